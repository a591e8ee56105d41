"""The benchmark scripts stay runnable: each has smoke arguments, which ``.ci/run`` uses (``make bench-smoke``)."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("smoke", ROOT / "benchmarks" / "smoke.py")
smoke = importlib.util.module_from_spec(spec)
spec.loader.exec_module(smoke)


def test_every_benchmark_has_smoke_arguments():
    assert set(smoke.benchmark_names()) == set(smoke.SMOKE_ARGS)


def test_skipped_benchmarks_say_why():
    for name, args in smoke.SMOKE_ARGS.items():
        assert isinstance(args, list) or (isinstance(args, str) and len(args) > 10), name


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readmes_measured_figures_are_the_kept_results():
    """The README's figures are generated from benchmarks/results/*.json, and stay what those files hold."""
    report = _load("report")
    readme = (ROOT / "README.md").read_text()
    assert report.readme_figures() in readme, "README figures differ from benchmarks/results: run report.py docs"


def test_the_readme_names_every_speed_target_it_misses():
    import json

    report = _load("report")
    figures = json.loads((ROOT / "benchmarks" / "results" / "speed.json").read_text())["result"]
    text = report.readme_figures()
    import re

    for name, target in figures["targets"].items():
        named = re.search(rf"(?<![\w_]){re.escape(name)} ", text) is not None
        assert named == (not figures["figures"][name] <= target), name  # a NaN figure is a target not met
