"""Sphinx configuration of skfedriem's documentation (``make docs``; built offline, warnings are errors)."""

import inspect
import os
import sys
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS))

import skfedriem  # noqa: E402

project = "skfedriem"
author = "skfedriem developers"
copyright = "2026, skfedriem developers"  # noqa: A001 - Sphinx's name
release = version = skfedriem.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx-mathjax-offline",  # MathJax from the package, not a CDN: the site renders math offline
    "numpydoc",
    "sphinx_gallery.gen_gallery",
    "generated_tables",
]
templates_path = ["_templates"]
exclude_patterns = ["_build", "auto_examples/*.ipynb", "auto_examples/*.py", "auto_examples/*.zip"]
autosummary_generate = True
# No "inherited-members" default here: a non-string default replaces the directive's own option (Sphinx merges them so),
# and the class template asks for inherited members (a classifier's fit and predict are its base class's).
autodoc_default_options = {"members": True}
numpydoc_show_class_members = False
toc_object_entries_show_parents = "hide"  # the page's table of contents lists fit(), not FederatedTangentSpaceClassifier.fit()
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
default_role = "literal"

html_theme = "pydata_sphinx_theme"
html_static_path = ["_static"]
html_css_files = ["skfedriem.css"]
html_title = f"skfedriem {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "footer_start": ["copyright"],
    "secondary_sidebar_items": ["page-toc"],
}
html_sidebars = {"index": [], "getting_started": [], "changelog": [], "contributing": [], "benchmarks": []}

sphinx_gallery_conf = {
    "examples_dirs": "../examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "ignore_pattern": r"(demo|__init__)\.py",
    "within_subsection_order": "FileNameSortKey",
    "abort_on_example_error": True,
    "download_all_examples": False,
    "remove_config_comments": True,
    "show_memory": False,
    "reset_modules": ("matplotlib",),
    "write_computation_times": False,  # its page loads scripts from CDNs; the site stays offline
}



def _skip_foreign_members(app, what, name, obj, skip, options):
    """Document what skfedriem defines, inherited or not (a classifier's page lists fit and predict, which its base
    class defines): not the methods classes inherit from scikit-learn or torch."""
    module = getattr(obj, "__module__", None) or getattr(getattr(obj, "__func__", None), "__module__", None)
    if what == "class" and module is not None and not module.startswith("skfedriem"):
        return True
    if what == "class" and module is None and (inspect.isroutine(obj) or inspect.isgetsetdescriptor(obj)
                                               or inspect.ismemberdescriptor(obj)):  # torch.Tensor's C members
        return True
    return skip


def setup(app):
    app.connect("autodoc-skip-member", _skip_foreign_members)


# The examples seed their public choices; their noise stays unseeded unless they say otherwise.
warnings.filterwarnings("ignore", category=UserWarning, message=".*Matplotlib is currently using agg.*")
os.environ.setdefault("OMP_NUM_THREADS", "1")
# MNE and MOABB keep their files here (the examples download nothing: FakeDataset and local files only)
_mne_data = DOCS / "_build" / "mne_data"
_mne_data.mkdir(parents=True, exist_ok=True)
os.environ.setdefault("MNE_DATA", str(_mne_data))
os.environ.setdefault("MOABB_RESULTS", str(_mne_data))
