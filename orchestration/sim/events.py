"""The simulation's virtual clock and its queue of timed events.

An event is (at, seq, kind, data): a datagram arriving (DATAGRAM: destination address and bytes), a member's protocol
timer (TIMER: name and incarnation) or a call (CALL: a function and its arguments). Events at the same instant run
in the order they were queued (`seq`), so a run is a pure function of the seed and the calls made. Each kind has its
own push method and its own tuple type, so the kind of a popped event tells the type of its data.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Final, Literal, TypeAlias, TypeVarTuple

DATAGRAM: Final = 0
TIMER: Final = 1
CALL: Final = 2

Ts = TypeVarTuple("Ts")

DatagramEvent: TypeAlias = tuple[float, int, Literal[0], tuple[str, bytes]]  # destination address, datagram
TimerEvent: TypeAlias = tuple[float, int, Literal[1], tuple[str, int]]  # member name, incarnation
# fn and its arguments; call_at checked that they fit, the queue keeps them without their types
CallEvent: TypeAlias = tuple[float, int, Literal[2], tuple[Callable[..., object], tuple[object, ...]]]
Event: TypeAlias = DatagramEvent | TimerEvent | CallEvent


class EventQueue:
    """Virtual time (`now`, seconds) and the events still to come, ordered by (time, insertion)."""

    __slots__ = ("_seq", "heap", "now")

    def __init__(self) -> None:
        self.now = 0.0
        self.heap: list[Event] = []
        self._seq = 0

    def push_datagram(self, at: float, dst_addr: str, data: bytes) -> None:
        """The datagram `data` arrives at the member address `dst_addr` at virtual time `at`."""
        self._seq += 1
        heapq.heappush(self.heap, (at, self._seq, DATAGRAM, (dst_addr, data)))

    def push_timer(self, at: float, name: str, incarnation: int) -> None:
        """The protocol timer of member `name`'s incarnation `incarnation` fires at virtual time `at`."""
        self._seq += 1
        heapq.heappush(self.heap, (at, self._seq, TIMER, (name, incarnation)))

    def call_at(self, when: float, fn: Callable[[*Ts], object], *args: *Ts) -> None:
        """fn(*args) at virtual time `when` (now, if `when` has passed)."""
        self._seq += 1
        heapq.heappush(self.heap, (max(when, self.now), self._seq, CALL, (fn, args)))

    def pop(self) -> Event:
        return heapq.heappop(self.heap)

    def next_at(self) -> float | None:
        return self.heap[0][0] if self.heap else None

    def only_timers(self) -> bool:
        """Nothing queued but protocol timers (no datagram in flight, no call due)."""
        return all(kind == TIMER for _, _, kind, _ in self.heap)
