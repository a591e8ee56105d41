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
