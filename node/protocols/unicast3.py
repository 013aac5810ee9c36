"""UNICAST3: reliable, FIFO unicast with positive cumulative acks (design/UNICAST3.txt, UNICAST3-sync.txt).

Sender A numbers messages to B per connection (conn-id, seqnos from 1, `first` on #1) and keeps them until B's
cumulative ACK. Its retransmit task resends the highest-sent message when highest-acked < highest-sent did not move
across two runs. Receiver B delivers in order, acks once per message batch (immediately for batches of at least
`ack_threshold`, otherwise delayed by at most `min_time_between_acks`), and asks for missing ranges (XMIT_REQ) from
its retransmit task. A message on a connection B does not know (no entry, or a non-first message with another
conn-id) is dropped and B asks A for the first seqno (SEND_FIRST_SEQNO), at most once per `sync_min_interval`,
from its retransmit task; A answers with its lowest message (flagged first) and its highest sent one, so B sees the
gap between them at once. Each SEND_FIRST_SEQNO sent is a `sync` history event (the sender, and the conn-id B did
not know), which a scenario's control_per_heal bounds (JGRP-1874). ACKs and SEND_FIRST_SEQNOs carry receiver-made
increasing timestamps; A drops ones older than the last it accepted, so a delayed ACK of an earlier connection
incarnation cannot purge messages B has not seen (JGRP-1873). `sync_timestamps = False` turns that off, to reproduce
the bug. Duplicates are acked too (JGRP-1578: a sender whose ACKs were lost resends its highest message until one
gets through); `ack_duplicates = False` acks only batches that delivered something, as UNICAST did before that fix,
to reproduce the endless retransmission.

Not in JGroups (`xmit_req_after_silence`, default on): a message that ends a silence of at least xmit_interval from
its sender, or the answer to our SEND_FIRST_SEQNO, and leaves a gap asks for the gap at once rather than on the second
retransmit run: what was sent before the silence is lost, not in flight (a partition that healed), also from a peer
outside our view (a member a split made us exclude: its messages arrive before the merge view does); so does a view
that brings a peer back (a merge), for what is missing from that peer. The retransmit task neither acks nor asks a
peer outside the view (JGroups' task has no such filter). Until 11-26 the silence did not ask such a peer either:
its messages waited for the merge view, 0.8 s after a heal on netns (bench_partition). That gate had been added
because asking made the partition-heal scenario's merge "time out"; the cause was the runner, which ended a run
whose messages had all arrived before the merge could happen (orchestration/schedule.py: wait_quiet).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

from node.protocols.base import NEVER, SECONDS, BuildContext, Deliver, Effects, Properties, UnicastLayer, prop
from node.tables import RetransmitTable
from node.wire import Message, View
from node.wire_headers import UNICAST3_ACK as ACK
from node.wire_headers import UNICAST3_CLOSE as CLOSE
from node.wire_headers import UNICAST3_DATA as DATA
from node.wire_headers import UNICAST3_SEND_FIRST_SEQNO as SEND_FIRST_SEQNO
from node.wire_headers import UNICAST3_XMIT_REQ as XMIT_REQ

TS_MOD = 1 << 32
MAX_XMIT_RANGES = 3000  # ranges per XMIT_REQ (16 bytes each): keeps a request inside one datagram
TIME_EPSILON = 1e-9  # interval comparisons tolerate float drift of accumulated tick times
MAX_SEQNO_AHEAD = 1 << 20  # a DATA this far past highest-delivered is dropped: the window's memory stays bounded


class State(Enum):
    OPEN = "open"
    CLOSING = "closing"  # flushed, then removed after conn_close_timeout


@dataclass
class Unicast3Props(Properties):
    """Properties with JGroups' names and defaults; durations in seconds."""

    xmit_interval: float = prop(
        0.5,
        "retransmit task: pending acks, XMIT_REQs, SEND_FIRST_SEQNOs, resending the highest unacked message",
        SECONDS,
    )
    conn_expiry_timeout: float = prop(120.0, "idle OPEN connection -> CLOSING; 0 disables reaping", SECONDS)
    conn_close_timeout: float = prop(240.0, "CLOSING connection -> removed (sender sends CLOSE); 0 disables", SECONDS)
    ack_threshold: int = prop(100, "a batch of at least this many is acked at once; 1 acks every message at once")
    min_time_between_acks: float = prop(
        0.05, "other acks are delayed so that a connection sees at most one per this", SECONDS
    )
    sync_min_interval: float = prop(2.0, "min time between SEND_FIRST_SEQNOs to the same sender (JGRP-1874)", SECONDS)
    max_retransmit_time: float = prop(
        60.0, "a sender entry without any ack progress for this long is removed; 0 = never", SECONDS
    )
    max_xmit_req_size: int = prop(0, "max seqnos asked for in one XMIT_REQ; 0 = as many as fit a datagram")
    sync_timestamps: bool = prop(
        True, "legacy switch: False drops the ACK/SEND_FIRST_SEQNO timestamp check (JGRP-1873)"
    )
    ack_duplicates: bool = prop(True, "legacy switch: False acks only batches that delivered something (JGRP-1578)")
    xmit_req_after_silence: bool = prop(
        True,
        "a gap after xmit_interval of silence from its sender (a heal), after the answer to our SEND_FIRST_SEQNO or "
        "in a view that brings the sender back is asked for at once; False waits for the second retransmit run, as "
        "JGroups does",
    )

    def validate(self) -> None:
        if self.xmit_interval <= 0:
            raise ValueError("unicast3.xmit_interval must be > 0")
        for name in ("conn_expiry_timeout", "conn_close_timeout", "sync_min_interval", "max_retransmit_time"):
            if getattr(self, name) < 0:
                raise ValueError(f"unicast3.{name} must be >= 0")
        if self.ack_threshold < 1:
            raise ValueError("unicast3.ack_threshold must be >= 1")
        if self.min_time_between_acks < 0 or self.max_xmit_req_size < 0:
            raise ValueError("unicast3.min_time_between_acks and max_xmit_req_size must be >= 0")


class SenderEntry:
    __slots__ = ("conn_id", "last_active", "last_progress", "last_ts", "state", "table", "watermark")

    def __init__(self, conn_id: int, now: float) -> None:
        self.conn_id = conn_id
        self.table: RetransmitTable[DATA] = RetransmitTable(0)
        self.state = State.OPEN
        self.last_active = now  # last send or ack: drives conn_expiry_timeout / conn_close_timeout
        self.last_progress = now  # last time highest-acked moved (or the entry was created): max_retransmit_time
        self.watermark = (0, 0)  # (highest acked, highest sent) as seen by the previous retransmit run
        self.last_ts = 0  # last accepted receiver timestamp; 0 = none yet

    def accept_timestamp(self, ts: int) -> bool:
        """True (and remembered) if ts is newer than the last accepted one, with 32-bit wrap-around."""
        if self.last_ts == 0 or 0 < (ts - self.last_ts) % TS_MOD < TS_MOD // 2:
            self.last_ts = ts
            return True
        return False


class ReceiverEntry:
    __slots__ = (
        "ack_pending",
        "asked_at",
        "conn_id",
        "last_ack_sent",
        "last_active",
        "last_received",
        "state",
        "table",
        "xmit_highest",
    )

    def __init__(self, conn_id: int, first_seqno: int, now: float) -> None:
        self.conn_id = conn_id
        self.table: RetransmitTable[DATA] = RetransmitTable(first_seqno - 1)
        self.state = State.OPEN
        self.last_active = now
        self.last_received = now  # the last message of this connection (xmit_req_after_silence)
        self.asked_at = -NEVER  # the last XMIT_REQ on this connection
        self.ack_pending = False
        self.last_ack_sent = -NEVER
        self.xmit_highest: int | None = None  # highest missing seqno seen by the previous retransmit run


class Unicast3(UnicastLayer[Unicast3Props]):
    """The UNICAST3 state machine of one member (all its send and receive connections)."""

    NAME = "unicast3"
    PROTOCOL = "UNICAST3"
    PROPS = Unicast3Props
    COUNTERS = (
        "msgs_sent",
        "msgs_received",
        "msgs_delivered",
        "duplicates_received",
        "acks_sent",
        "acks_received",
        "acks_dropped_conn_id",
        "acks_withheld",
        "stale_acks_dropped",
        "xmits",
        "xmit_reqs_sent",
        "xmit_reqs_after_silence",
        "xmit_reqs_received",
        "xmit_rsps_sent",
        "xmit_reqs_missing",
        "send_first_seqno_sent",
        "send_first_seqno_received",
        "stale_send_first_seqno_dropped",
        "send_first_seqno_unknown",
        "dropped_unknown_conn",
        "dropped_out_of_window",
        "close_sent",
        "close_received",
        "conns_created",
        "conns_reset",
        "conns_expired",
        "conns_removed",
        "conns_removed_unacked",
    )

    def __init__(self, local: str, props: Unicast3Props | None = None, *, conn_id_start: int = 1) -> None:
        super().__init__(local, props)
        self.send_table: dict[str, SenderEntry] = {}
        self.recv_table: dict[str, ReceiverEntry] = {}
        self.last_sync_sent: dict[str, float] = {}  # sender -> when we last asked it for its first seqno
        # senders to ask for their first seqno on the next retransmit run -> conn-id of the message that asked
        self.sync_wanted: dict[str, int] = {}
        self.members: frozenset[str] | None = None  # None: no membership (max_retransmit_time applies to all)
        self._next_conn_id = conn_id_start % TS_MOD or 1
        self._timestamp = 0
        self._next_xmit = -NEVER  # the first tick starts the retransmit task
        self._ack_due: dict[str, float] = {}  # receiver entries with a delayed ack -> when it is due

    @classmethod
    def create(cls, local: str, props: Mapping[str, object], ctx: BuildContext) -> Unicast3:
        return cls(local, cls.make_props(props), conn_id_start=ctx.conn_id_start)

    # --- helpers --------------------------------------------------------------------------------------------------

    def _new_conn_id(self) -> int:
        conn_id = self._next_conn_id
        self._next_conn_id = (conn_id + 1) % TS_MOD or 1
        return conn_id

    def _new_timestamp(self) -> int:
        self._timestamp = (self._timestamp + 1) % TS_MOD or 1
        return self._timestamp

    @staticmethod
    def _conn_event(out: Effects, peer: str, conn_id: int, side: str, state: str) -> None:
        out.event("conn", peer=peer, conn_id=conn_id, side=side, state=state)

    def _send_ack(self, peer: str, entry: ReceiverEntry, now: float, out: Effects) -> None:
        seqno = entry.table.hd
        out.send(peer, ACK(seqno, entry.conn_id, self._new_timestamp()))
        entry.ack_pending = False
        entry.last_ack_sent = now
        self._ack_due.pop(peer, None)
        self.c["acks_sent"] += 1
        out.event("ack", peer=peer, conn_id=entry.conn_id, seqno=seqno)

    # --- application side -----------------------------------------------------------------------------------------

    def send(self, dest: str, payload: bytes, now: float, out: Effects) -> int:
        """Sends payload to dest; returns its seqno on the connection."""
        entry = self.send_table.get(dest)
        if entry is None:
            entry = SenderEntry(self._new_conn_id(), now)
            self.send_table[dest] = entry
            self.c["conns_created"] += 1
            self._conn_event(out, dest, entry.conn_id, "send", "open")
        elif entry.state is State.CLOSING:
            entry.state = State.OPEN
            self._conn_event(out, dest, entry.conn_id, "send", "open")
        table = entry.table
        seqno = table.hr + 1
        msg = DATA(seqno, entry.conn_id, seqno == 1, payload)
        table.add(seqno, msg)
        entry.last_active = now
        out.send(dest, msg)
        self.c["msgs_sent"] += 1
        return seqno

    def send_conn_id(self, dest: str) -> int | None:
        entry = self.send_table.get(dest)
        return entry.conn_id if entry else None

    # --- network side ---------------------------------------------------------------------------------------------

    def handle(self, src: str, msgs: list[Message], now: float, out: Effects) -> None:
        """A batch of UNICAST3 messages from src (in arrival order)."""
        data: list[DATA] = []
        for m in msgs:
            if isinstance(m, DATA):
                data.append(m)
            elif isinstance(m, ACK):
                self._handle_ack(src, m, now)
            elif isinstance(m, XMIT_REQ):
                self._handle_xmit_req(src, m, out)
            elif isinstance(m, SEND_FIRST_SEQNO):
                self._handle_send_first_seqno(src, m, out)
            elif isinstance(m, CLOSE):
                self._handle_close(src, m, out)
        if data:
            self._handle_data(src, data, now, out)

    def _handle_data(self, src: str, data: list[DATA], now: float, out: Effects) -> None:
        # A first message (new connection) is applied before the rest of the batch (UNICAST3.txt).
        for m in data:
            if m.first:
                self._receiver_entry_for_first(src, m.seqno, m.conn_id, now, out)
        entry = self.recv_table.get(src)
        c = self.c
        c["msgs_received"] += len(data)
        added = 0
        matched = 0
        for m in data:
            if entry is None or entry.conn_id != m.conn_id:
                c["dropped_unknown_conn"] += 1
                self._want_sync(src, m.conn_id, now)
                continue
            matched += 1
            if m.seqno - entry.table.hd > MAX_SEQNO_AHEAD:
                c["dropped_out_of_window"] += 1
                continue
            if entry.table.add(m.seqno, m):
                added += 1
            else:
                c["duplicates_received"] += 1
        if entry is None or not matched:
            return
        # a silence ended by the answer to our own XMIT_REQ does not count
        silence = now - entry.last_received >= self.props.xmit_interval <= now - entry.asked_at
        entry.last_active = entry.last_received = now
        if entry.state is not State.OPEN:
            entry.state = State.OPEN
            self._conn_event(out, src, entry.conn_id, "recv", "open")
        delivered = entry.table.remove_deliverable() if added else []
        if delivered:
            conn_id = entry.conn_id
            out.delivers.extend(Deliver("unicast", src, m.payload, conn_id, m.seqno) for m in delivered)
            c["msgs_delivered"] += len(delivered)
        if silence and self.props.xmit_req_after_silence and entry.table.num_missing():
            # What is missing was sent before a silence of at least xmit_interval (a partition that healed): it is
            # lost, not in flight, so it is asked for now instead of two retransmit runs later.
            self._ask_all_missing(src, entry, now, out)
        if not delivered and not self.props.ack_duplicates:
            c["acks_withheld"] += 1  # JGRP-1578's flaw: nothing new delivered, nothing acked
            return
        # Ack once per batch: at once for big batches, else delayed (duplicates are acked too, or a sender whose
        # ack was lost would retransmit forever).
        if matched >= self.props.ack_threshold or now - entry.last_ack_sent >= self.props.min_time_between_acks:
            self._send_ack(src, entry, now, out)
        else:
            entry.ack_pending = True
            self._ack_due.setdefault(src, entry.last_ack_sent + self.props.min_time_between_acks)

    def _receiver_entry_for_first(self, src: str, seqno: int, conn_id: int, now: float, out: Effects) -> None:
        entry = self.recv_table.get(src)
        if entry is not None and entry.conn_id == conn_id:
            return
        if entry is not None:
            self.c["conns_reset"] += 1
            self._conn_event(out, src, entry.conn_id, "recv", "closed")
            self._ack_due.pop(src, None)
        entry = self.recv_table[src] = ReceiverEntry(conn_id, seqno, now)
        if src in self.last_sync_sent:
            # the answer to our SEND_FIRST_SEQNO: what lies between the first and the highest message that come with
            # it was sent long ago, so a gap counts as after a silence (xmit_req_after_silence)
            entry.last_received = -NEVER
        self.c["conns_created"] += 1
        self._conn_event(out, src, conn_id, "recv", "open")

    def _want_sync(self, src: str, conn_id: int, now: float) -> None:
        last = self.last_sync_sent.get(src)
        if last is None or now - last >= self.props.sync_min_interval - TIME_EPSILON:
            self.sync_wanted[src] = conn_id

    def _handle_ack(self, src: str, m: ACK, now: float) -> None:
        entry = self.send_table.get(src)
        if entry is None or entry.conn_id != m.conn_id:
            self.c["acks_dropped_conn_id"] += 1
            return
        if self.props.sync_timestamps and not entry.accept_timestamp(m.timestamp):
            self.c["stale_acks_dropped"] += 1
            return
        self.c["acks_received"] += 1
        table = entry.table
        before = table.hd
        table.purge(m.seqno)
        if table.hd > before:
            entry.last_progress = now
        entry.last_active = now

    def _handle_xmit_req(self, src: str, m: XMIT_REQ, out: Effects) -> None:
        self.c["xmit_reqs_received"] += 1
        entry = self.send_table.get(src)
        if entry is None or entry.conn_id != m.conn_id:
            self.c["xmit_reqs_missing"] += 1
            return
        table = entry.table
        sent = 0
        for first, last in m.ranges:
            for _, msg in table.items(max(first, table.low + 1), min(last, table.hr)):
                out.send(src, msg)
                sent += 1
        self.c["xmit_rsps_sent"] += sent
        self.c["xmits"] += sent

    def _handle_send_first_seqno(self, src: str, m: SEND_FIRST_SEQNO, out: Effects) -> None:
        self.c["send_first_seqno_received"] += 1
        entry = self.send_table.get(src)
        if entry is None:
            self.c["send_first_seqno_unknown"] += 1
            return
        if self.props.sync_timestamps and not entry.accept_timestamp(m.timestamp):
            self.c["stale_send_first_seqno_dropped"] += 1
            return
        # UNICAST3-sync.txt: resend the lowest message (flagged first) and the highest sent one, so the receiver
        # opens the connection and sees the gap between them in one batch
        table = entry.table
        lowest = table.get(table.low + 1)
        if lowest is not None:
            out.send(src, lowest._replace(first=True))
            self.c["xmits"] += 1
            highest = table.get(table.hr)
            if highest is not None and highest.seqno != lowest.seqno:
                out.send(src, highest)
                self.c["xmits"] += 1

    def _handle_close(self, src: str, m: CLOSE, out: Effects) -> None:
        self.c["close_received"] += 1
        entry = self.recv_table.get(src)
        if entry is not None and entry.conn_id == m.conn_id:
            self.remember_delivered(src, entry)
            del self.recv_table[src]
            self._ack_due.pop(src, None)
            self._conn_event(out, src, m.conn_id, "recv", "closed")

    # --- connection management ------------------------------------------------------------------------------------

    def close_connection(self, peer: str, now: float, out: Effects) -> None:
        """Closes both directions gracefully: CLOSING now (unacked messages are still flushed), removed later."""
        for side, conns in self._sides():
            entry = conns.get(peer)
            if entry is not None and entry.state is State.OPEN:
                entry.state = State.CLOSING
                entry.last_active = now
                self._conn_event(out, peer, entry.conn_id, side, "closing")

    def remove_send_connection(self, peer: str) -> bool:
        """Drops the sender entry at once (unilateral: unacked messages are gone, the peer is not told)."""
        return self.send_table.pop(peer, None) is not None

    def remove_receive_connection(self, peer: str) -> bool:
        """Drops the receiver entry at once (unilateral)."""
        self._ack_due.pop(peer, None)
        entry = self.recv_table.pop(peer, None)
        if entry is None:
            return False
        self.remember_delivered(peer, entry)
        return True

    def remove_connection(self, peer: str) -> bool:
        removed_send = self.remove_send_connection(peer)
        removed_recv = self.remove_receive_connection(peer)
        return removed_send or removed_recv

    def install_view(self, view: View, now: float, out: Effects) -> None:
        """Closes the connections of peers the view dropped, as JGroups does (CLOSING, removed after conn_close_timeout
        unless reopened: a receiver that lost its window syncs later, design/UNICAST3-sync.txt). A view that brings
        a peer back (a merge) asks it at once for what is missing (lost in the partition: xmit_req_after_silence)."""
        before = self.members
        self.set_members(view.members)
        for peer in sorted((set(self.send_table) | set(self.recv_table)) - set(view.members)):
            self.close_connection(peer, now, out)
        if before is None or not self.props.xmit_req_after_silence:
            return
        for peer in sorted(set(view.members) - before):
            entry = self.recv_table.get(peer)
            if entry is not None and entry.table.num_missing():
                self._ask_all_missing(peer, entry, now, out)

    def set_members(self, members: Iterable[str] | None) -> None:
        """The current membership (None: unknown)."""
        self.members = None if members is None else frozenset(members)

    # --- timers ---------------------------------------------------------------------------------------------------

    def next_wakeup(self) -> float:
        if self._ack_due:
            return min(self._next_xmit, min(self._ack_due.values()))
        return self._next_xmit

    def tick(self, now: float, out: Effects) -> None:
        if self._ack_due:
            for peer, due in list(self._ack_due.items()):
                if due <= now:
                    entry = self.recv_table.get(peer)
                    if entry is not None and entry.ack_pending:
                        self._send_ack(peer, entry, now, out)
                    else:
                        del self._ack_due[peer]
        if now >= self._next_xmit:
            self._next_xmit = now + self.props.xmit_interval
            self._retransmit_run(now, out)

    def _retransmit_run(self, now: float, out: Effects) -> None:
        self._receiver_run(now, out)
        self._sync_run(now, out)
        self._sender_run(now, out)
        self._reap(now, out)

    def _receiver_run(self, now: float, out: Effects) -> None:
        """Pending acks, then ask for what is missing. Only seqnos that were already missing in the previous run are
        asked for, so messages still in flight are not requested."""
        props = self.props
        members = self.members
        for peer, entry in self.recv_table.items():
            if members is not None and peer not in members:
                continue  # a member that left: neither acks nor retransmission requests (until a view brings it back)
            if entry.ack_pending:
                self._send_ack(peer, entry, now, out)
            table = entry.table
            if table.num_missing() == 0:
                entry.xmit_highest = None
                continue
            ranges = table.missing(props.max_xmit_req_size)
            highest = ranges[-1][1]
            prev = entry.xmit_highest
            if prev is None or highest > prev:
                entry.xmit_highest = highest
            if prev is not None:
                self._send_xmit_req(peer, entry, [(f, min(last, prev)) for f, last in ranges if f <= prev], now, out)

    def _sync_run(self, now: float, out: Effects) -> None:
        """SEND_FIRST_SEQNO, deferred to here and limited by last-sync-sent."""
        props = self.props
        c = self.c
        for peer, conn_id in sorted(self.sync_wanted.items()):
            last = self.last_sync_sent.get(peer)
            if last is None or now - last >= props.sync_min_interval - TIME_EPSILON:
                out.send(peer, SEND_FIRST_SEQNO(self._new_timestamp()))
                self.last_sync_sent[peer] = now
                c["send_first_seqno_sent"] += 1
                # conn_id: the connection B did not know (JGRP-1874's storms are counted per heal from these)
                out.event("sync", peer=peer, conn_id=conn_id)
        self.sync_wanted.clear()
        for peer in [p for p, t in self.last_sync_sent.items() if now - t >= props.sync_min_interval - TIME_EPSILON]:
            del self.last_sync_sent[peer]  # expired: keeps the table bounded

    def _sender_run(self, now: float, out: Effects) -> None:
        """Resends the highest sent message when HA < HS did not move since the previous run."""
        props = self.props
        c = self.c
        for peer, entry in list(self.send_table.items()):
            table = entry.table
            ha, hs = table.hd, table.hr
            if ha < hs:
                if (
                    props.max_retransmit_time > 0
                    and now - entry.last_progress >= props.max_retransmit_time
                    and (self.members is None or peer not in self.members)
                ):
                    del self.send_table[peer]
                    c["conns_removed_unacked"] += 1
                    self._conn_event(out, peer, entry.conn_id, "send", "removed")
                    continue
                if entry.watermark == (ha, hs):
                    msg = table.get(hs)
                    if msg is not None:
                        out.send(peer, msg)
                        c["xmits"] += 1
                        out.event("xmit", peer=peer, conn_id=entry.conn_id, seqno=hs)
            entry.watermark = (ha, hs)

    def _ask_all_missing(self, peer: str, entry: ReceiverEntry, now: float, out: Effects) -> None:
        """xmit_req_after_silence: an XMIT_REQ for everything missing now (known lost, not in flight); the next
        retransmit run asks again for what is still missing then."""
        ranges = entry.table.missing(self.props.max_xmit_req_size)
        entry.xmit_highest = ranges[-1][1]
        self._send_xmit_req(peer, entry, ranges, now, out)
        self.c["xmit_reqs_after_silence"] += 1

    def _send_xmit_req(
        self, peer: str, entry: ReceiverEntry, ranges: list[tuple[int, int]], now: float, out: Effects
    ) -> None:
        if ranges:
            entry.asked_at = now
            out.send(peer, XMIT_REQ(entry.conn_id, tuple(ranges[:MAX_XMIT_RANGES])))
            self.c["xmit_reqs_sent"] += 1

    def _sides(self) -> tuple[tuple[str, dict[str, SenderEntry] | dict[str, ReceiverEntry]], ...]:
        """Both tables of connections, each with the `side` its history events name."""
        return (("send", self.send_table), ("recv", self.recv_table))

    def _reap(self, now: float, out: Effects) -> None:
        props = self.props
        for side, conns in self._sides():
            for peer in list(conns):
                entry = conns[peer]
                idle = now - entry.last_active
                if entry.state is State.OPEN:
                    if props.conn_expiry_timeout > 0 and idle >= props.conn_expiry_timeout:
                        entry.state = State.CLOSING
                        entry.last_active = now
                        self.c["conns_expired"] += 1
                        self._conn_event(out, peer, entry.conn_id, side, "closing")
                elif props.conn_close_timeout > 0 and idle >= props.conn_close_timeout:
                    if side == "send" and entry.table.hd < entry.table.hr:
                        # CLOSING flushes its unacked messages (the design's "flush pending messages before closing
                        # a connection"): removed once drained, or by max_retransmit_time when the peer left
                        continue
                    if side == "recv":
                        self.remember_delivered(peer, entry)
                    del conns[peer]
                    self.c["conns_removed"] += 1
                    self._conn_event(out, peer, entry.conn_id, side, "closed")
                    if side == "send":
                        out.send(peer, CLOSE(entry.conn_id))
                        self.c["close_sent"] += 1
                    else:
                        self._ack_due.pop(peer, None)

    # --- introspection --------------------------------------------------------------------------------------------

    def property_changed(self, name: str) -> None:
        if name == "xmit_interval":
            self._next_xmit = -NEVER  # apply at the next tick

    def is_idle(self) -> bool:
        """True when every sender window is drained and no receiver window has a gap. Connections to peers outside the
        current membership (when one is known) do not count: nothing more will come from or be acked by them."""
        members = self.members
        return all(
            e.table.hd == e.table.hr for p, e in self.send_table.items() if members is None or p in members
        ) and all(
            e.table.num_missing() == 0 and len(e.table) == 0
            for p, e in self.recv_table.items()
            if members is None or p in members
        )
