"""A member's history: its events as JSON lines in the format of SCENARIO.md, appended as they happen.

Events are buffered in memory and written to the OS at batch boundaries (`flush`), as complete lines in one
`os.write`, so a member killed with SIGKILL loses at most what it had not flushed yet, and at worst leaves one
partial last line, which readers skip. Field list (SCENARIO.md, shared with analysis/schema.py):

    t (ns, CLOCK_MONOTONIC), member, incarnation, event, and per event:
    send / deliver: kind (unicast|multicast), sender, dest, conn_id, seqno, msg_id, size
    view: view_id, members, merge
    conn: peer, conn_id, side (send|recv), state (open|closing|closed|removed)
    xmit: peer, conn_id, seqno        ack: peer, conn_id, seqno
    stop: counters (the member's protocol counters at the end)
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


class HistoryWriter:
    def __init__(self, path: str, member: str, incarnation: int = 1, *, clock: Any = time.monotonic_ns) -> None:
        self.path = path
        self.member = member
        self.incarnation = incarnation
        self.clock = clock
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self._buf: list[str] = []
        self._end_partial_line()
        self.events_written = 0

    def _end_partial_line(self) -> None:
        """A restarted member appends to the file of its killed incarnation, which may end in a cut-off line:
        terminate it, so that line stays the only damage and this incarnation's first event is a line of its own."""
        size = os.fstat(self._fd).st_size
        if size and os.pread(self._fd, 1, size - 1) != b"\n":
            os.write(self._fd, b"\n")

    def event(self, event: str, **fields: Any) -> None:
        record = {"t": self.clock(), "member": self.member, "incarnation": self.incarnation, "event": event}
        record.update(fields)
        self._buf.append(_dumps(record))

    def flush(self) -> None:
        if not self._buf:
            return
        data = ("\n".join(self._buf) + "\n").encode()
        self.events_written += len(self._buf)
        self._buf.clear()
        view = memoryview(data)
        while view:  # a regular file takes it in one write; loop for the rare short write
            n = os.write(self._fd, view)
            view = view[n:]

    def close(self) -> None:
        if self._fd >= 0:
            self.flush()
            os.close(self._fd)
            self._fd = -1
