"""The documentation keeps up with the code: every public name has an API page, the examples stay examples."""

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("make_api", ROOT / "docs" / "make_api.py")
make_api = importlib.util.module_from_spec(spec)
spec.loader.exec_module(make_api)


def test_every_public_name_is_in_the_api_reference():
    page = "\n".join(section.read_text() for section in sorted((ROOT / "docs" / "api").glob("*.rst")))
    listed = {(module, name) for module, names in
              re.findall(r"\.\. currentmodule:: (\S+)\n\n\.\. autosummary::\n(?:   :.*\n)*\n((?:   \S+\n)+)", page)
              for name in names.split()}
    for _, module, _, names in make_api.api_names():
        for name in names:
            assert (module, name) in listed, f"{module}.{name} is missing from docs/api/: run docs/make_api.py"


@pytest.mark.parametrize("example", sorted((ROOT / "examples").glob("plot_*.py")), ids=lambda p: p.name)
def test_gallery_examples_have_a_title_and_a_figure(example):
    text = example.read_text()
    assert text.startswith('"""\n') and "\n===" in text.split('"""')[1]  # sphinx-gallery's title block
    assert "plt.subplots" in text or "plt.figure" in text or "Display" in text  # each ends with a figure
