"""Helpers the benchmark scripts share (not a benchmark: ``smoke.py`` skips names starting with ``_``)."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Self


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


def _process_tree(pid: int) -> list[int]:
    """``pid`` and every process below it (workers, and the fork server that starts them)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    children.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(entry))
            except OSError:
                continue
    tree, stack = [], [pid]
    while stack:
        tree.append(stack.pop())
        stack += children.get(tree[-1], [])
    return tree


def _memory_kb(pid: int) -> tuple[int, int]:
    """(RSS, PSS) summed over ``pid`` and its descendants, kB. PSS counts the pages they share once."""
    rss = pss = 0
    for p in _process_tree(pid):
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                fields = {line.split(":")[0]: int(line.split()[1]) for line in f if line[:4] in ("Rss:", "Pss:")}
        except OSError:
            continue
        rss, pss = rss + fields.get("Rss", 0), pss + fields.get("Pss", 0)
    return rss, pss


class PeakMemory:
    """Samples the memory of this process and its descendants (their PSS) every 0.2 s (Linux)."""

    def __enter__(self) -> Self:
        self.rss_kb, self.pss_kb, self._stop = 0, 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            self._update()

    def _update(self) -> None:
        rss, pss = _memory_kb(os.getpid())
        self.rss_kb, self.pss_kb = max(self.rss_kb, rss), max(self.pss_kb, pss)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._update()
