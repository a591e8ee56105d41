"""The promises the package makes about its environment are the ones its metadata and README make, and hold."""

import re
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import numpy as np
from packaging.specifiers import SpecifierSet

from skfedriem._utils.compat import DP_ACCOUNTING_VERSIONS, dense_pmfs, infinity_mass
from skfedriem.privacy.accounting.pld_reading import epsilon_for_delta
from skfedriem.privacy.accounting.subsampled_gaussian import single_step_pld

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
README = (ROOT / "README.md").read_text()
GETTING_STARTED = (ROOT / "docs" / "getting_started.rst").read_text()


def requirement(name: str) -> SpecifierSet:
    (spec,) = [r for r in PROJECT["dependencies"] if re.match(rf"{name}\b", r)]
    return SpecifierSet(spec[len(name):].split(";")[0].strip())


def test_the_python_and_torch_the_readme_promises_are_the_packages():
    floor = PROJECT["requires-python"]
    assert sys.version_info[:2] >= tuple(int(v) for v in floor.removeprefix(">=").split("."))
    for page in (README, GETTING_STARTED):
        assert f"Python {floor}" in page or f"Python {floor.replace('>=', '>= ')}" in page
        assert re.search(rf"torch{re.escape(str(requirement('torch')))}", page)


def test_the_package_ships_its_type_hints():
    assert (ROOT / "skfedriem" / "py.typed").exists()
    assert "py.typed" in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"]["skfedriem"]


def test_dp_accounting_is_a_version_whose_internals_compat_reads():
    pinned = requirement("dp-accounting")
    assert pinned == SpecifierSet(",".join(DP_ACCOUNTING_VERSIONS))
    assert version("dp-accounting") in pinned


def test_the_compat_pmfs_give_the_librarys_own_epsilon():
    for sampling in ("fixed", "poisson"):
        pld = single_step_pld(0.8, 0.1, sampling, 1e-3).self_compose(20)
        pmfs = dense_pmfs(pld)
        assert all(np.isclose(p.probs.sum() + p.infinity_mass, 1.0) for p in pmfs)
        assert infinity_mass(pld) == max(p.infinity_mass for p in pmfs)
        assert np.isclose(epsilon_for_delta(pld, 1e-5), pld.get_epsilon_for_delta(1e-5), rtol=1e-9)
