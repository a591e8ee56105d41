"""The flower modules' paths before they were grouped by role are the new modules, with a FutureWarning."""

import importlib
import subprocess
import sys

import pytest

pytest.importorskip("flwr")

from flwr.supercore.object_ref import validate  # noqa: E402

from skfedriem.flower._moved import MOVED as _MOVED  # noqa: E402

MOVED = [(f"skfedriem.flower.{old}", f"skfedriem.flower.{new}") for old, new in _MOVED.items()]
KINDS = ("pca", "spdnet", "eegnet", "tangent")


def test_doctest_collection_skips_exactly_the_old_paths():
    """The root conftest skips each old file (collected under its new path), and no other."""
    import conftest

    assert conftest.collect_ignore == [f"skfedriem/flower/{old}.py" for old in _MOVED]


@pytest.mark.parametrize("old, new", MOVED)
def test_an_old_path_is_the_moved_module_itself(old, new):
    sys.modules.pop(old, None)
    with pytest.warns(FutureWarning, match=f"moved to {new}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)


@pytest.mark.parametrize("kind", KINDS)
def test_a_flower_app_project_made_before_the_move_still_names_its_apps(kind):
    """Flower checks ``module:attribute`` by reading the module's file: the old files assign every app."""
    assert validate(f"skfedriem.flower.apps:{kind}_server_app") == (True, None)
    assert validate(f"skfedriem.flower.site_client:{kind}_client_app") == (True, None)
    sys.modules.pop("skfedriem.flower.site_client", None)
    with pytest.warns(FutureWarning):
        old = importlib.import_module("skfedriem.flower.site_client")
    new = importlib.import_module("skfedriem.flower.deployment.site_client")
    assert getattr(old, f"{kind}_client_app") is getattr(new, f"{kind}_client_app")


def test_the_projects_name_the_new_paths():
    from skfedriem.flower.deployment.apps import APP_DIRS

    for kind in KINDS:
        text = (APP_DIRS[kind] / "pyproject.toml").read_text()
        assert f'"skfedriem.flower.deployment.apps:{kind}_server_app"' in text
        assert f'"skfedriem.flower.deployment.site_client:{kind}_client_app"' in text


@pytest.mark.parametrize("old", ["skfedriem.flower.loopback", "skfedriem.flower.site_worker"])
def test_an_old_command_line_still_runs(old):
    done = subprocess.run([sys.executable, "-m", old, "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout and "FutureWarning" in done.stderr
