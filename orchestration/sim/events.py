"""The simulation's virtual clock and its queue of timed events.

An event is (at, kind, data): a datagram arriving (DATAGRAM: destination address and bytes), a member's protocol
timer (TIMER: name and incarnation) or a call (CALL: a function and its arguments). Events at the same instant run
in the order they were queued, so a run is a pure function of the seed and the calls made.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

DATAGRAM, TIMER, CALL = 0, 1, 2


class EventQueue:
    """Virtual time (`now`, seconds) and the events still to come, ordered by (time, insertion)."""

    __slots__ = ("_seq", "heap", "now")

    def __init__(self) -> None:
        self.now = 0.0
        self.heap: list[tuple[float, int, int, Any]] = []
        self._seq = 0

    def push(self, at: float, kind: int, data: Any) -> None:
        self._seq += 1
        heapq.heappush(self.heap, (at, self._seq, kind, data))

    def call_at(self, when: float, fn: Callable[..., Any], *args: Any) -> None:
        """fn(*args) at virtual time `when` (now, if `when` has passed)."""
        self.push(max(when, self.now), CALL, (fn, args))

    def pop(self) -> tuple[float, int, int, Any]:
        return heapq.heappop(self.heap)

    def next_at(self) -> float | None:
        return self.heap[0][0] if self.heap else None

    def only_timers(self) -> bool:
        """Nothing queued but protocol timers (no datagram in flight, no call due)."""
        return all(kind == TIMER for _, _, kind, _ in self.heap)
