"""chaos/nfqueue/arrival.py: the kernel's CLOCK_REALTIME receive stamps moved to CLOCK_MONOTONIC, implausible ones
refused (the netns side, a handler judging a queued packet by its arrival: tests/netns/test_timed_rules.py)."""

from __future__ import annotations

import time

from chaos.nfqueue.arrival import EARLIEST_NS, LATEST_NS, ArrivalClock


def stamp(real_ns: int) -> tuple[int, int]:
    return real_ns // 1_000_000_000, real_ns % 1_000_000_000 // 1_000


def test_a_stamp_becomes_the_same_instant_on_the_monotonic_clock() -> None:
    clock = ArrivalClock()
    try:
        real, mono = time.clock_gettime_ns(time.CLOCK_REALTIME), time.monotonic_ns()
        clock.sync()
        for back_ms in (0, 60, 5_000):
            got = clock.monotonic_ns(*stamp(real - back_ms * 1_000_000))
            assert got is not None
            assert abs(got - (mono - back_ms * 1_000_000)) < 2_000_000, (back_ms, got - mono)
    finally:
        clock.close()


def test_a_stamp_far_from_the_burst_is_refused() -> None:
    clock = ArrivalClock()
    try:
        clock.sync()
        real = time.clock_gettime_ns(time.CLOCK_REALTIME)
        assert clock.monotonic_ns(*stamp(real + LATEST_NS + 100_000_000)) is None  # the realtime clock stepped
        assert clock.monotonic_ns(*stamp(real - EARLIEST_NS - 100_000_000)) is None
        assert clock.monotonic_ns(0, 0) is None  # no stamp at all
    finally:
        clock.close()
