"""Helpers the benchmark scripts share (not a benchmark: ``smoke.py`` skips names starting with ``_``)."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


def timed(fn: Callable[[], object], repeats: int, warmup: int = 3) -> float:
    """Median seconds of ``fn()`` over ``repeats`` calls, after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


@contextmanager
def busy(on: bool = True) -> Iterator[None]:
    """A competing process spinning one core inside the block (our users' machines are shared)."""
    process = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if on else None
    try:
        time.sleep(0.5 if on else 0)
        yield
    finally:
        if process is not None:
            process.kill()
            process.wait()
