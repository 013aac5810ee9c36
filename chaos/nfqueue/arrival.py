"""When a queued packet arrived: the kernel's receive stamp (NFQA_TIMESTAMP) moved to CLOCK_MONOTONIC.

A rule's window (active_from_ns / active_until_ns) is an instant of CLOCK_MONOTONIC, and a packet belongs to the
window it arrived in, not the one the handler reads it in: a handler that runs 60 ms behind under load would
otherwise judge a packet that arrived before a discard's instant by the discard, and the fault would show early (seen
in tests/netns/test_onset.py under CI's 4 workers: a count-limited discard 63.5 ms early).

The kernel puts NFQA_TIMESTAMP on a packet queued at an input hook only when the packet has a receive stamp, and it
stamps received packets only while some socket on the machine asks for stamps (the netstamp_needed static key): the
clock holds one socket with SO_TIMESTAMP set for as long as it lives. The stamp is CLOCK_REALTIME in microseconds; it
is moved to CLOCK_MONOTONIC with the offset between the two clocks read at the start of each read burst. A stamp
that lands implausibly far from that instant (the realtime clock was stepped) is not used, and neither is a missing
one (the first packets after the key is switched on): such a packet is judged by the clock when it is read, as
before.
"""

from __future__ import annotations

import socket
import struct
import time

NFQA_TIMESTAMP = 4  # struct nfqnl_msg_packet_timestamp { __be64 sec; __be64 usec; }
STAMP = struct.Struct("!QQ")
SO_TIMESTAMP = getattr(socket, "SO_TIMESTAMP", 29)
LATEST_NS = 1_000_000_000  # a stamp this far after the burst's start is not believed (a packet read during it)
EARLIEST_NS = 30_000_000_000  # nor one this far before it: no packet waits in the queue that long


class ArrivalClock:
    """Turns the kernel's receive stamps into CLOCK_MONOTONIC nanoseconds (None: not usable, read the clock)."""

    def __init__(self) -> None:
        self._sock: socket.socket | None = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMP, 1)
        except OSError:
            self._sock.close()
            self._sock = None  # no stamps: every packet is judged by the clock when read
        self._offset = 0
        self._now = 0
        self.sync()

    def sync(self) -> None:
        """Reads both clocks: the offset for the stamps of the burst that follows."""
        self._now = time.monotonic_ns()
        self._offset = time.clock_gettime_ns(time.CLOCK_REALTIME) - self._now

    def monotonic_ns(self, sec: int, usec: int) -> int | None:
        """The arrival, in CLOCK_MONOTONIC ns, of a packet stamped `sec`.`usec` (CLOCK_REALTIME), or None."""
        t = sec * 1_000_000_000 + usec * 1_000 - self._offset
        if t > self._now + LATEST_NS or t < self._now - EARLIEST_NS:
            return None
        return t

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
