"""Timing helpers: repeat, take the median, print one aligned line per figure."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median_time(fn: Callable[[], object], repeats: int = 5, clock: Callable[[], float] = time.perf_counter) -> float:
    """Median time of fn() in seconds over `repeats` runs (after one warm-up run): wall time, or this process's CPU
    time with `clock=time.process_time` (single-threaded work on a machine that other work shares)."""
    fn()
    times = []
    for _ in range(repeats):
        t = clock()
        fn()
        times.append(clock() - t)
    return statistics.median(times)


def report(name: str, value: float, unit: str, note: str = "") -> None:
    print(f"{name:<58} {value:>14,.2f} {unit:<14} {note}")
