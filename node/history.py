"""A member's history: its events as JSON lines in the format of docs/scenario-format.md, appended as they happen.

This module is the one place that shapes history events: the real member (node/runtime.py) and the simulator
(orchestration/sim/simulation.py) both build them with the methods of `HistoryWriter` (`start`, `sent`, `delivered`,
`protocol_events`, `stop`) and encode them with the one encoder (`encode`), so the same event has the same keys in
the same order and the same bytes on every backend. Field list (docs/scenario-format.md, shared with
analysis/schema.py):

    t (ns: CLOCK_MONOTONIC, or the simulator's virtual time), member, incarnation, event, and per event:
    start: address (e.g. "B/2"), stack, transport
    send: kind (unicast|multicast), sender, dest, conn_id, seqno, msg_id, size
    deliver: kind, sender (name), sender_address (e.g. "B/2"), dest, conn_id, seqno, msg_id, size
    view: view_id, members, merge
    conn: peer, conn_id, side (send|recv), state (open|closing|closed|removed)
    xmit: peer, conn_id, seqno        ack: peer, conn_id, seqno
    stop: counters (the stack's counters per protocol at the end; the real member adds `runtime` and
          `unacked_by_peer` sections)

Two modes:
- file (`HistoryWriter(path, ...)`, the real member): events are buffered in memory and written to the OS at batch
  boundaries (`flush`), as complete lines in one `os.write` on an append-only file, so a member killed with SIGKILL
  loses at most what it had not flushed yet, and at worst leaves one partial last line, which readers skip.
  `send` and `deliver`, one per message, skip the dict and the encoder: their constant part (member, incarnation,
  kind, peer) is encoded once per peer by `encode` and the rest formatted into it (the same bytes, 10x cheaper:
  JSON encoding was a third of a member's time at full rate).
- memory (`HistoryWriter(None, ..., records=list)`, the simulator): events are appended to `records` as dicts;
  `write_records` later writes them exactly as a file-mode writer would have.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Mapping
from json.encoder import encode_basestring
from pathlib import Path

from node.addresses import name_of
from node.payload import msg_id_of
from node.protocols.base import Deliver, Event

encode: Callable[[object], str] = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
"""The one encoder of history lines (and of faults.jsonl lines): compact, UTF-8, keys in insertion order."""


def lines_of(records: Iterable[Mapping[str, object]]) -> bytes:
    """Records as the bytes of their history lines (what a file-mode writer appends for them)."""
    text = "".join(encode(r) + "\n" for r in records)
    return text.encode()


def write_records(path: str | Path, records: Iterable[Mapping[str, object]]) -> None:
    """Writes records as a new history file (replacing one that exists), line for line as a file-mode writer would."""
    Path(path).write_bytes(lines_of(records))


def _plain(conn_id: object, seqno: object, msg_id: object) -> bool:
    """The per-message fields are of the types the fast path formats exactly as `encode` does."""
    return type(seqno) is int and (conn_id is None or type(conn_id) is int) and (msg_id is None or type(msg_id) is str)


def _int_or_null(value: int | None) -> str:
    return "null" if value is None else repr(value)


def _str_or_null(value: str | None) -> str:
    return "null" if value is None else encode_basestring(value)


class HistoryWriter:
    """The history of one member incarnation. `path` None: memory mode, events go to `records` (a new list if
    none is given; several incarnations of one member may share one list). `clock` gives `t` in ns."""

    def __init__(
        self,
        path: str | None,
        member: str,
        incarnation: int = 1,
        *,
        clock: Callable[[], int] = time.monotonic_ns,
        records: list[dict[str, object]] | None = None,
    ) -> None:
        if path is not None and records is not None:
            raise ValueError("a history writer has a file (path) or a record list, not both")
        self.path = path
        self.member = member
        self.incarnation = incarnation
        self.clock = clock
        self.records: list[dict[str, object]] | None = None
        if path is None:
            self.records = records if records is not None else []
        self._buf: list[str] = []
        self._heads: dict[tuple[str, str, str | None, str | None], str] = {}  # the constant part of send/deliver lines
        self.events_written = 0
        self._fd = -1
        if path is not None:
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            self._end_partial_line()

    def _end_partial_line(self) -> None:
        """A restarted member appends to the file of its killed incarnation, which may end in a cut-off line:
        terminate it, so that line stays the only damage and this incarnation's first event is a line of its own."""
        size = os.fstat(self._fd).st_size
        if size and os.pread(self._fd, 1, size - 1) != b"\n":
            os.write(self._fd, b"\n")

    # --- events -----------------------------------------------------------------------------------------------------

    def event(self, event: str, **fields: object) -> None:
        """One event: t, member, incarnation, event, then `fields` in the order given."""
        record = {"t": self.clock(), "member": self.member, "incarnation": self.incarnation, "event": event}
        record.update(fields)
        if self.records is not None:
            self.records.append(record)
            self.events_written += 1
        else:
            self._buf.append(encode(record))

    def start(self, address: str, stack: str, transport: str) -> None:
        """The incarnation started (its first event): its address, stack name and transport."""
        self.event("start", address=address, stack=stack, transport=transport)

    def sent(
        self,
        kind: str,
        dest: str | None,
        conn_id: int | None,
        seqno: int,
        msg_id: str | None,
        size: int,
        *,
        dest_address: str | None = None,
    ) -> None:
        """This member sent an application message: `dest` is a member name (None for a multicast, whose conn_id
        is None too), `dest_address` the incarnation it was addressed to ("C" or "C/2"; None for a multicast),
        `size` the payload's bytes."""
        if self.records is None and _plain(conn_id, seqno, msg_id) and type(size) is int:
            head = self._send_head(kind, dest, dest_address)
            self._buf.append(
                f'{{"t":{self.clock()}{head},"conn_id":{_int_or_null(conn_id)},"seqno":{seqno},'
                f'"msg_id":{_str_or_null(msg_id)},"size":{size}}}'
            )
            return
        self.event(
            "send",
            kind=kind,
            sender=self.member,
            dest=dest,
            dest_address=dest_address,
            conn_id=conn_id,
            seqno=seqno,
            msg_id=msg_id,
            size=size,
        )

    def sends(
        self, kind: str, dest: str | None, conn_id: int | None, dest_address: str | None
    ) -> Callable[[int, str, int], None]:
        """A writer of the send lines of a burst of messages of one kind to one destination (None: multicast) on one
        connection: write(seqno, msg_id, size) adds the line `sent(kind, dest, conn_id, seqno, msg_id, size,
        dest_address=...)` would, with everything but t, seqno, msg_id and size formatted once. seqno and size are
        ints, msg_id a str."""
        if self.records is not None or not _plain(conn_id, 0, None):

            def write_event(seqno: int, msg_id: str, size: int) -> None:
                self.sent(kind, dest, conn_id, seqno, msg_id, size, dest_address=dest_address)

            return write_event
        middle = f'{self._send_head(kind, dest, dest_address)},"conn_id":{_int_or_null(conn_id)},"seqno":'
        append, clock = self._buf.append, self.clock

        def write(seqno: int, msg_id: str, size: int) -> None:
            append(f'{{"t":{clock()}{middle}{seqno},"msg_id":{encode_basestring(msg_id)},"size":{size}}}')

        return write

    def delivered(self, d: Deliver) -> str | None:
        """This member delivered `d` (from the stack's output); returns its msg_id."""
        msg_id = msg_id_of(d.payload)
        if self.records is None and _plain(d.conn_id, d.seqno, msg_id):
            key = ("deliver", d.kind, d.sender, None)
            head = self._heads.get(key)
            if head is None:
                head = self._head(
                    key,
                    kind=d.kind,
                    sender=name_of(d.sender),
                    sender_address=d.sender,
                    dest=self.member if d.kind == "unicast" else None,
                )
            self._buf.append(
                f'{{"t":{self.clock()}{head},"conn_id":{_int_or_null(d.conn_id)},"seqno":{d.seqno},'
                f'"msg_id":{_str_or_null(msg_id)},"size":{len(d.payload)}}}'
            )
            return msg_id
        self.event(
            "deliver",
            kind=d.kind,
            sender=name_of(d.sender),
            sender_address=d.sender,
            dest=self.member if d.kind == "unicast" else None,
            conn_id=d.conn_id,
            seqno=d.seqno,
            msg_id=msg_id,
            size=len(d.payload),
        )
        return msg_id

    def _send_head(self, kind: str, dest: str | None, dest_address: str | None) -> str:
        """The constant part of a send line (`_head`), cached per kind and destination."""
        key = ("send", kind, dest, dest_address)
        head = self._heads.get(key)
        if head is None:
            head = self._head(key, kind=kind, sender=self.member, dest=dest, dest_address=dest_address)
        return head

    def _head(self, key: tuple[str, str, str | None, str | None], **fields: object) -> str:
        """The constant part of a send or deliver line, from `"member"` up to (without) `"conn_id"`, as `encode`
        writes it; cached under `key` (the event and the arguments it is made of)."""
        record = {"member": self.member, "incarnation": self.incarnation, "event": key[0], **fields}
        head = self._heads[key] = "," + encode(record)[1:-1]
        return head

    def protocol_events(self, events: Iterable[Event]) -> None:
        """The events the stack's protocols emitted (view, conn, xmit, ...), with a peer address turned into the
        peer's name. The events' fields are consumed (changed in place)."""
        for e in events:
            fields = e.fields
            peer = fields.get("peer")
            if isinstance(peer, str):
                fields["peer"] = name_of(peer)
            self.event(e.kind, **fields)

    def stop(self, counters: Mapping[str, object]) -> None:
        """The member ends gracefully (its last event): its counters, per protocol."""
        self.event("stop", counters=counters)

    # --- output -----------------------------------------------------------------------------------------------------

    def flush(self) -> None:
        """File mode: writes the buffered events as complete lines in one write. Memory mode: nothing to do."""
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
