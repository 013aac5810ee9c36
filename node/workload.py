"""The workload generator: one paced sending task, sans-IO, for the real member and the simulator alike.

A `Workload` is `count` messages of one kind (unicast to a member name, or multicast) with a payload `size`, sent
at `rate` messages/s from `start`, or, with `rate` None, as fast as the stack's flow control allows. It does no I/O
and reads no clock: its driver asks it how many messages are due now (`due`, or `due_on` that reads the flow
control of a stack), sends exactly that many, and calls it again at `next_wakeup()`. node/runtime.py drives it with
asyncio and real time, orchestration/sim/simulation.py with the virtual clock.

Pacing:
- rate r: message i (from 0) is due at `start + i / r`; a call at `now` returns every message due by then that was
  not sent yet (a late caller, e.g. a member resumed after SIGSTOP, sends its backlog at once), and `next_wakeup`
  is the due time of the next one (but not sooner than `granularity` after the last call: the real member polls
  every millisecond instead of waking for each message).
- rate None: bursts of up to BURST messages while flow control allows, i.e. for a unicast while fewer than
  MAX_UNACKED (inclusive) messages to the destination are unacknowledged, for a multicast while the multicast
  protocol is not `blocked` (MCAST with a full window); after a burst the next call is due at once (after the
  driver let receives and timers run), after a refusal POLL seconds later.

`progress` is the dict the control endpoint reports for a task: {"kind", "dest", "count", "sent", "done"}; `done`
is True once all were sent or the task was stopped (`stop`, e.g. its member stopped: then sent < count).
Standard library only.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from node.stack import Stack

KINDS = ("unicast", "multicast")
BURST = 200  # messages per burst without a rate
MAX_UNACKED = 20_000  # unicasts unacknowledged to one destination above which a burst waits
POLL = 0.001  # seconds between flow-control checks while sending is refused


class Progress(TypedDict):
    """A task's progress as the control endpoint reports it."""

    kind: str
    dest: str | None
    count: int
    sent: int
    done: bool


class Workload:
    """One sending task. `start` is on the driver's clock (seconds); `dest` is a member name for unicast, None for
    multicast."""

    def __init__(
        self,
        kind: str,
        dest: str | None,
        count: int,
        *,
        size: int = 0,
        rate: float | None = None,
        start: float = 0.0,
        granularity: float = 0.0,
        burst: int = BURST,
        max_unacked: int = MAX_UNACKED,
        poll: float = POLL,
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"workload kind must be {' or '.join(KINDS)}, not {kind!r}")
        if (kind == "unicast") != (dest is not None):
            raise ValueError("a unicast workload needs a destination; a multicast one has none")
        if count < 0 or size < 0:
            raise ValueError("count and size must be >= 0")
        if rate is not None and not rate > 0:
            raise ValueError("rate must be > 0 (or None: as fast as flow control allows)")
        if burst < 1 or granularity < 0 or poll <= 0:
            raise ValueError("burst must be >= 1, granularity >= 0 and poll > 0")
        self.kind = kind
        self.dest = dest
        self.count = count
        self.size = size
        self.rate = rate
        self.start = start
        self.granularity = granularity
        self.burst = burst
        self.max_unacked = max_unacked
        self.poll = poll
        self.progress: Progress = {"kind": kind, "dest": dest, "count": count, "sent": 0, "done": count == 0}
        self._last: float | None = None  # when `due` last ran (at or after start)
        self._last_n = 0  # what it returned then

    @property
    def sent(self) -> int:
        return self.progress["sent"]

    @property
    def done(self) -> bool:
        return self.progress["done"]

    def stop(self) -> None:
        """Ends the task where it is (its member stopped or was killed)."""
        self.progress["done"] = True

    def due_at(self, i: int) -> float:
        """When message i (from 0) is due (rate mode)."""
        assert self.rate is not None
        return self.start + i / self.rate

    def _due_by(self, now: float) -> int:
        """How many messages are due by `now` in rate mode (exactly consistent with `due_at`)."""
        rate = self.rate
        assert rate is not None
        k = max(0, min(self.count, int((now - self.start) * rate) + 1))
        while k < self.count and self.due_at(k) <= now:
            k += 1
        while k > 0 and self.due_at(k - 1) > now:
            k -= 1
        return k

    def due(self, now: float, *, unacked: int = 0, blocked: bool = False) -> int:
        """How many messages to send now; they count as sent (the caller sends exactly that many). `unacked` (the
        unicasts unacknowledged to the destination) and `blocked` (the multicast protocol refuses more) are the
        stack's flow control, used without a rate."""
        if self.done or now < self.start:
            return 0
        sent = self.progress["sent"]
        if self.rate is not None:
            n = self._due_by(now) - sent
        elif (self.kind == "unicast" and unacked > self.max_unacked) or (self.kind == "multicast" and blocked):
            n = 0
        else:
            n = min(self.burst, self.count - sent)
        self._last, self._last_n = now, n
        if n:
            self.progress["sent"] = sent + n
            if sent + n >= self.count:
                self.progress["done"] = True
        return n

    def due_on(self, stack: Stack, now: float, dest_address: str | None = None) -> int:
        """`due` with the flow control read from a node.stack.Stack (`dest_address`: the destination's current
        address, for unicast)."""
        if self.rate is not None or self.done:
            return self.due(now)
        if self.kind == "unicast":
            assert dest_address is not None
            return self.due(now, unacked=stack.unicast.unacked(dest_address))
        mcast = stack.multicast_protocol
        return self.due(now, blocked=mcast is not None and mcast.blocked)

    def next_wakeup(self) -> float:
        """When to call `due` next (on the driver's clock); math.inf once done."""
        if self.done:
            return math.inf
        if self._last is None:
            return self.start
        if self.rate is not None:
            return max(self.due_at(self.progress["sent"]), self._last + self.granularity)
        return self._last if self._last_n else self._last + self.poll
