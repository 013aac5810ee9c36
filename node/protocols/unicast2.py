"""UNICAST2: reliable, FIFO unicast with negative acks and STABLE (design/UNICAST2.txt), flaw included.

Sender A numbers messages to B per connection (seqnos from 1); #1 carries `first` and the connection's conn-id,
later messages carry conn-id 0 ("unset"). A keeps what it sent until B's STABLE purges it and never retransmits on
its own: B asks. B delivers in order and, from its retransmit task (`xmit_interval`), asks A for the gaps in its
window (XMIT_REQ). B tells A what it delivered with STABLE, every `stable_interval` and after `max_bytes` of payload.
A non-first message B cannot place (no entry, or a conn-id other than 0 and B's) is dropped and B asks A to resend
its first message (SEND_FIRST_SEQNO).

Known flaw, kept on purpose (UNICAST2.txt scenario #6): a non-first message has conn-id 0, so B files it under
whatever connection it has. After A reopens the connection and #1 is late, B takes the new #2 for a duplicate of
the old connection's #2 and acks it with a STABLE that A, not checking conn-ids on STABLE, applies to the new
connection: A purges #2 before B has it, and B's XMIT_REQs for #2 go unanswered forever.

The first and last message problems (UNICAST3.txt [1] [2]) have JGroups' fixes, each behind a property named after
it (both off by default, see Unicast2Props). With either on, B acks a connection's first message (ACK with its
conn-id), so A knows B has the connection. JGRP-1563: until that ACK (or a STABLE of the connection) arrives,
`resend_first_msg` makes A's retransmit task resend the first unpurged message, flagged first.
Without it a lost first message is repaired only when A's next message makes B ask (SEND_FIRST_SEQNO). JGRP-1548:
B cannot miss what it never heard of, so a lost last message stays lost until something later reveals it;
`resend_last_seqno` makes A's retransmit task resend its highest-sent message on an established connection when
highest-sent is not yet STABLE and did not move since the previous run (as UNICAST3's HA/HS and NAKACK2's
resend_last_seqno); B takes it, or acks it as a duplicate (STABLE), which purges A's window.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from node.protocols.base import NEVER, SECONDS, BuildContext, Deliver, Effects, Properties, UnicastLayer, prop
from node.tables import RetransmitTable
from node.wire import Message
from node.wire_headers import UNICAST2_ACK as ACK
from node.wire_headers import UNICAST2_DATA as DATA
from node.wire_headers import UNICAST2_SEND_FIRST_SEQNO as SEND_FIRST_SEQNO
from node.wire_headers import UNICAST2_STABLE as STABLE
from node.wire_headers import UNICAST2_XMIT_REQ as XMIT_REQ

CONN_ID_MOD = 1 << 32  # conn-ids are u32 on the wire; 0 means "unset" and is never assigned
MAX_XMIT_RANGES = 3000  # ranges per XMIT_REQ (16 bytes each): keeps a request inside one datagram
TIME_EPSILON = 1e-9  # interval comparisons tolerate float drift of accumulated tick times
MAX_SEQNO_AHEAD = 1 << 20  # a DATA this far past highest-delivered is dropped: the window's memory stays bounded


@dataclass
class Unicast2Props(Properties):
    """Properties with JGroups' UNICAST2 names; durations in seconds."""

    xmit_interval: float = prop(0.5, "receiver's retransmit task: XMIT_REQ for every gap", SECONDS)
    stable_interval: float = prop(
        60.0, "periodic STABLE to every sender whose highest delivered moved; 0 disables", SECONDS
    )
    max_bytes: int = prop(500_000, "payload bytes received on a connection that trigger a STABLE at once")
    max_stable_msgs: int = prop(
        1, "STABLEs sent for the same highest delivered (1: only when it moved; JGroups uses 5)"
    )
    conn_expiry_timeout: float = prop(
        0.0, "idle connections are removed after this; 0 (default here) disables reaping", SECONDS
    )
    # JGroups' fixes, off by default: this UNICAST2 is the design note's, whose sender never retransmits on its own
    # (tests/unit/test_unicast2.py pins that); UNICAST3 is the protocol with the fixes built in.
    resend_first_msg: bool = prop(False, "JGRP-1563: resend the first message until the receiver acks it")
    resend_last_seqno: bool = prop(False, "JGRP-1548: resend the highest-sent message while not STABLE and not moving")

    def validate(self) -> None:
        if self.xmit_interval <= 0:
            raise ValueError("unicast2.xmit_interval must be > 0")
        if self.stable_interval < 0 or self.conn_expiry_timeout < 0:
            raise ValueError("unicast2.stable_interval and conn_expiry_timeout must be >= 0")
        if self.max_bytes <= 0:
            raise ValueError("unicast2.max_bytes must be > 0")
        if self.max_stable_msgs < 1:
            raise ValueError("unicast2.max_stable_msgs must be >= 1")


class SenderEntry:
    __slots__ = ("conn_id", "established", "last_active", "runs", "table", "watermark")

    def __init__(self, conn_id: int, now: float) -> None:
        self.conn_id = conn_id
        self.table: RetransmitTable[DATA] = RetransmitTable(0)  # hd = highest purged by STABLE, hr = highest sent
        self.last_active = now  # last send: drives conn_expiry_timeout
        self.established = False  # the receiver acked the first message (ACK) or sent a STABLE of this connection
        self.watermark = (0, 0)  # (highest purged, highest sent) as seen by the previous retransmit run
        self.runs = 0  # retransmit runs that saw this entry (the first one does not resend: the ACK may be on its way)


class ReceiverEntry:
    __slots__ = ("conn_id", "first_seqno", "last_active", "received_bytes", "stable_high", "stable_repeats", "table")

    def __init__(self, conn_id: int, first_seqno: int, now: float) -> None:
        self.conn_id = conn_id
        self.first_seqno = first_seqno
        self.table: RetransmitTable[DATA] = RetransmitTable(first_seqno - 1)
        self.last_active = now
        self.received_bytes = 0  # payload bytes added since the last STABLE (max_bytes)
        self.stable_high = first_seqno - 1  # high of the last STABLE sent
        self.stable_repeats = -1  # STABLEs sent for stable_high; -1: none yet (nothing delivered to acknowledge)


class Unicast2(UnicastLayer[Unicast2Props]):
    """The UNICAST2 state machine of one member (all its send and receive connections)."""

    NAME = "unicast2"
    PROTOCOL = "UNICAST2"
    ACKS_EACH_MESSAGE = False  # purged by STABLE rounds
    PROPS = Unicast2Props
    COUNTERS = (
        "msgs_sent",
        "msgs_received",
        "msgs_delivered",
        "duplicates_received",
        "xmit_reqs_sent",
        "xmit_reqs_received",
        "xmit_reqs_unknown_conn",
        "xmit_rsps_sent",
        "xmits",
        "xmit_reqs_missing",
        "stables_sent",
        "stables_dup_acks",
        "stables_received",
        "stables_unknown",
        "send_first_seqno_sent",
        "send_first_seqno_received",
        "send_first_seqno_unknown",
        "first_acks_sent",
        "first_acks_received",
        "first_msg_resends",
        "last_msg_resends",
        "dropped_unknown_conn",
        "dropped_out_of_window",
        "conns_created",
        "conns_reset",
        "conns_expired",
        "conns_removed",
    )

    def __init__(self, local: str, props: Unicast2Props | None = None, *, conn_id_start: int = 1) -> None:
        super().__init__(local, props)
        self.send_table: dict[str, SenderEntry] = {}
        self.recv_table: dict[str, ReceiverEntry] = {}
        self.members: frozenset[str] | None = None  # stored only: UNICAST2 ages nothing out by membership here
        self._next_conn_id = conn_id_start % CONN_ID_MOD or 1
        self._next_xmit = -NEVER  # the first tick starts the retransmit task
        self._next_stable = -NEVER  # the first tick schedules the stable task (first run one stable_interval later)
        self._pending: list[tuple[str, int, int, int]] = []  # final STABLEs of removed receive connections (next tick)

    @classmethod
    def create(cls, local: str, props: Mapping[str, object], ctx: BuildContext) -> Unicast2:
        return cls(local, cls.make_props(props), conn_id_start=ctx.conn_id_start)

    # --- helpers --------------------------------------------------------------------------------------------------

    def _new_conn_id(self) -> int:
        conn_id = self._next_conn_id
        self._next_conn_id = (conn_id + 1) % CONN_ID_MOD or 1
        return conn_id

    @staticmethod
    def _conn_event(out: Effects, peer: str, conn_id: int, side: str, state: str) -> None:
        out.event("conn", peer=peer, conn_id=conn_id, side=side, state=state)

    def _send_stable(self, peer: str, conn_id: int, low: int, high: int, out: Effects) -> None:
        """STABLE(low, high, conn_id): `high` is what the sender may purge; `low` (the receiver's low watermark) is
        informational."""
        out.send(peer, STABLE(low, high, conn_id))
        self.c["stables_sent"] += 1
        out.event("stable", peer=peer, conn_id=conn_id, seqno=high)

    def _stable(self, peer: str, entry: ReceiverEntry, out: Effects) -> bool:
        """Sends STABLE(highest delivered) unless that value was already sent max_stable_msgs times."""
        hd = entry.table.hd
        if hd == entry.stable_high:
            if entry.stable_repeats < 0 or entry.stable_repeats >= self.props.max_stable_msgs:
                return False
            entry.stable_repeats += 1
        else:
            entry.stable_high = hd
            entry.stable_repeats = 1
        entry.received_bytes = 0
        self._send_stable(peer, entry.conn_id, entry.table.low, hd, out)
        return True

    @staticmethod
    def _final_stable(peer: str, entry: ReceiverEntry) -> tuple[str, int, int, int] | None:
        """(peer, conn_id, low, high) of the STABLE a removed receive connection sends (as JGroups'
        removeReceiveConnection does) if it delivered anything: lets the sender purge, so that a later
        SEND_FIRST_SEQNO does not restart the receiver's next window at messages it already delivered."""
        if entry.table.hd < entry.first_seqno:
            return None
        return peer, entry.conn_id, entry.table.low, entry.table.hd

    # --- application side -----------------------------------------------------------------------------------------

    def send(self, dest: str, payload: bytes, now: float, out: Effects) -> int:
        """Sends payload to dest; returns its seqno on the connection."""
        entry = self.send_table.get(dest)
        if entry is None:
            entry = SenderEntry(self._new_conn_id(), now)
            self.send_table[dest] = entry
            self.c["conns_created"] += 1
            self._conn_event(out, dest, entry.conn_id, "send", "open")
        table = entry.table
        seqno = table.hr + 1
        first = seqno == 1
        # Only the first message carries the conn-id (UNICAST2.txt #6: "#1(conn-id=322649) #2(conn-id=0)").
        msg = DATA(seqno, entry.conn_id if first else 0, first, payload)
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
        """A batch of UNICAST2 messages from src (in arrival order)."""
        data: list[DATA] = []
        for m in msgs:
            if isinstance(m, DATA):
                data.append(m)
            elif isinstance(m, STABLE):
                self._handle_stable(src, m)
            elif isinstance(m, XMIT_REQ):
                self._handle_xmit_req(src, m, out)
            elif isinstance(m, SEND_FIRST_SEQNO):
                self._handle_send_first_seqno(src, m, out)
            elif isinstance(m, ACK):
                self._handle_ack(src, m)
        if data:
            self._handle_data(src, data, now, out)

    def _handle_data(self, src: str, data: list[DATA], now: float, out: Effects) -> None:
        c = self.c
        c["msgs_received"] += len(data)
        entry = self.recv_table.get(src)
        dup_high = 0  # highest duplicate <= highest delivered on `entry`: acked (STABLE) nevertheless, once per batch
        sfs_seqno = 0  # highest dropped seqno: one SEND_FIRST_SEQNO per batch
        first_ack: tuple[int, int] | None = None  # (seqno, conn_id) of the batch's last first message: ACKed (1563)
        matched = False
        for m in data:
            if m.first:
                if entry is None or entry.conn_id != m.conn_id:
                    if entry is not None and dup_high:
                        self._ack_duplicate(src, entry, dup_high, out)
                        dup_high = 0
                    entry = self._new_receiver_entry(src, m.seqno, m.conn_id, now, out)
                # else: same conn-id, a retransmitted first message: NOP (no second connection establishment)
                first_ack = (m.seqno, m.conn_id)
            elif entry is None or (m.conn_id != 0 and m.conn_id != entry.conn_id):
                c["dropped_unknown_conn"] += 1
                if m.seqno > sfs_seqno:
                    sfs_seqno = m.seqno
                continue
            # conn-id 0 is taken for the current connection, whichever that is (the flaw of scenario #6)
            matched = True
            table = entry.table
            if m.seqno - table.hd > MAX_SEQNO_AHEAD:
                c["dropped_out_of_window"] += 1
                continue
            if table.add(m.seqno, m):
                entry.received_bytes += len(m.payload)
                if m.seqno == table.hd + 1:
                    delivered = table.remove_deliverable()
                    conn_id = entry.conn_id
                    out.delivers.extend(Deliver("unicast", src, d.payload, conn_id, d.seqno) for d in delivered)
                    c["msgs_delivered"] += len(delivered)
            else:
                c["duplicates_received"] += 1
                if m.seqno <= table.hd and m.seqno > dup_high:
                    dup_high = m.seqno
        if entry is not None and matched:
            entry.last_active = now
            if dup_high:
                self._ack_duplicate(src, entry, dup_high, out)
            if entry.received_bytes >= self.props.max_bytes and entry.table.hd != entry.stable_high:
                self._stable(src, entry, out)
        if first_ack is not None and (self.props.resend_first_msg or self.props.resend_last_seqno):
            out.send(src, ACK(*first_ack))
            c["first_acks_sent"] += 1
        if sfs_seqno:
            out.send(src, SEND_FIRST_SEQNO(sfs_seqno))
            c["send_first_seqno_sent"] += 1

    def _ack_duplicate(self, src: str, entry: ReceiverEntry, seqno: int, out: Effects) -> None:
        """UNICAST2.txt #6: B "discards #2, but *acks* it nevertheless" (STABLE up to the duplicate's seqno)."""
        self.c["stables_dup_acks"] += 1
        self._send_stable(src, entry.conn_id, entry.table.low, seqno, out)

    def _new_receiver_entry(self, src: str, seqno: int, conn_id: int, now: float, out: Effects) -> ReceiverEntry:
        old = self.recv_table.get(src)
        if old is not None:
            self.c["conns_reset"] += 1
            self._conn_event(out, src, old.conn_id, "recv", "closed")
        entry = ReceiverEntry(conn_id, seqno, now)
        self.recv_table[src] = entry
        self.c["conns_created"] += 1
        self._conn_event(out, src, conn_id, "recv", "open")
        return entry

    def _handle_stable(self, src: str, m: STABLE) -> None:
        self.c["stables_received"] += 1
        entry = self.send_table.get(src)
        if entry is None:
            self.c["stables_unknown"] += 1
            return
        # No conn-id check: UNICAST2.txt checks conn-ids only for SEND_FIRST_SEQNO. A STABLE of B's previous
        # connection (or B's ack of a "duplicate") therefore purges the current one: scenario #6.
        entry.table.purge(m.high)  # purges up to min(high, highest sent)
        if m.conn_id == entry.conn_id:
            entry.established = True  # B has this connection (it may have lost the first message's ACK)

    def _handle_ack(self, src: str, m: ACK) -> None:
        """B acked the first message of a connection (JGRP-1563): A stops resending it if the conn-id is A's."""
        self.c["first_acks_received"] += 1
        entry = self.send_table.get(src)
        if entry is not None and entry.conn_id == m.conn_id:
            entry.established = True

    def _handle_xmit_req(self, src: str, m: XMIT_REQ, out: Effects) -> None:
        c = self.c
        c["xmit_reqs_received"] += 1
        requested = sum(last - first + 1 for first, last in m.ranges)
        entry = self.send_table.get(src)
        if entry is None or entry.conn_id != m.conn_id:
            # requests for another connection's seqnos must not be answered with this connection's messages
            c["xmit_reqs_unknown_conn"] += 1
            c["xmit_reqs_missing"] += requested
            return
        table = entry.table
        sent = 0
        for first, last in m.ranges:
            for seqno, msg in table.items(first, last):
                out.send(src, msg)
                out.event("xmit", peer=src, conn_id=entry.conn_id, seqno=seqno)
                sent += 1
        c["xmit_rsps_sent"] += sent
        c["xmits"] += sent
        c["xmit_reqs_missing"] += requested - sent  # e.g. purged by a STABLE of another connection (scenario #6)

    def _handle_send_first_seqno(self, src: str, m: SEND_FIRST_SEQNO, out: Effects) -> None:
        """Resends the lowest unpurged message as first, with this connection's conn-id; then, as JGroups does, the
        rest up to the seqno B dropped."""
        self.c["send_first_seqno_received"] += 1
        entry = self.send_table.get(src)
        if entry is None:
            self.c["send_first_seqno_unknown"] += 1
            return
        table = entry.table
        lowest = table.get(table.low + 1)
        if lowest is None:
            return  # everything purged: nothing to resend
        resend = [lowest._replace(first=True, conn_id=entry.conn_id)]
        resend.extend(msg for _, msg in table.items(lowest.seqno + 1, m.seqno))
        for msg in resend:
            out.send(src, msg)
            out.event("xmit", peer=src, conn_id=entry.conn_id, seqno=msg.seqno)
        self.c["xmits"] += len(resend)

    # --- connection management ------------------------------------------------------------------------------------

    def close_connection(self, peer: str, now: float, out: Effects) -> None:
        """Removes both directions at once (UNICAST2.txt #3); the receive side sends a last STABLE first."""
        send = self.send_table.pop(peer, None)
        if send is not None:
            self.c["conns_removed"] += 1
            self._conn_event(out, peer, send.conn_id, "send", "closed")
        recv = self.recv_table.pop(peer, None)
        if recv is not None:
            self.remember_delivered(peer, recv)
            self.c["conns_removed"] += 1
            stable = self._final_stable(peer, recv)
            if stable is not None:
                self._send_stable(*stable, out)
            self._conn_event(out, peer, recv.conn_id, "recv", "closed")

    def remove_send_connection(self, peer: str) -> bool:
        """Drops the sender entry at once (unilateral: unpurged messages are gone, the peer is not told)."""
        return self.send_table.pop(peer, None) is not None

    def remove_receive_connection(self, peer: str) -> bool:
        """Drops the receiver entry at once; its last STABLE goes out at the next tick (this call has no Effects)."""
        entry = self.recv_table.pop(peer, None)
        if entry is None:
            return False
        self.remember_delivered(peer, entry)
        stable = self._final_stable(peer, entry)
        if stable is not None:
            self._pending.append(stable)
        return True

    def remove_connection(self, peer: str) -> bool:
        removed_send = self.remove_send_connection(peer)
        removed_recv = self.remove_receive_connection(peer)
        return removed_send or removed_recv

    def set_members(self, members: Iterable[str] | None) -> None:
        self.members = None if members is None else frozenset(members)

    # --- timers ---------------------------------------------------------------------------------------------------

    def next_wakeup(self) -> float:
        return min(self._next_xmit, self._next_stable)

    def tick(self, now: float, out: Effects) -> None:
        if self._pending:
            for stable in self._pending:
                self._send_stable(*stable, out)
            self._pending.clear()
        if now >= self._next_xmit:
            self._next_xmit = now + self.props.xmit_interval
            self._retransmit_run(now, out)
        if now >= self._next_stable:
            interval = self.props.stable_interval
            run = self._next_stable != -NEVER
            self._next_stable = now + interval if interval > 0 else NEVER
            if run:
                for peer, entry in self.recv_table.items():
                    self._stable(peer, entry, out)

    def _retransmit_run(self, now: float, out: Effects) -> None:
        # Ask for every gap, every run, for as long as it lasts: a gap the sender can no longer fill (scenario #6)
        # is asked for forever; xmit_reqs_sent (here) and xmit_reqs_missing (at the sender) keep rising.
        members = self.members
        for peer, entry in self.recv_table.items():
            if members is not None and peer not in members:
                continue  # a member that left will not answer
            table = entry.table
            if table.num_missing():
                ranges = tuple(table.missing()[:MAX_XMIT_RANGES])
                out.send(peer, XMIT_REQ(entry.conn_id, ranges))
                self.c["xmit_reqs_sent"] += 1
        if self.props.resend_first_msg or self.props.resend_last_seqno:
            self._resend_run(out)
        if self.props.conn_expiry_timeout > 0:
            self._reap(now, out)

    def _resend_run(self, out: Effects) -> None:
        """The sender's part of the retransmit task (JGroups' fixes of JGRP-1563 and JGRP-1548): the first message
        of a connection the receiver has not acknowledged by the second run that sees it, flagged first with the
        conn-id; on an established one,
        the highest-sent message when it is not STABLE and (highest purged, highest sent) did not move since the
        previous run (so a stream in progress is not resent)."""
        props = self.props
        members = self.members
        for peer, entry in self.send_table.items():
            table = entry.table
            watermark = (table.hd, table.hr)
            previous, entry.watermark = entry.watermark, watermark
            entry.runs += 1
            if (members is not None and peer not in members) or table.hd == table.hr:
                continue  # a member that left will not answer; nothing unpurged
            if not entry.established:
                if props.resend_first_msg and entry.runs > 1:
                    msg = table.get(table.low + 1)
                    if msg is not None:
                        self._resend(peer, entry, msg._replace(first=True, conn_id=entry.conn_id), out)
                        self.c["first_msg_resends"] += 1
            elif props.resend_last_seqno and previous == watermark:
                msg = table.get(table.hr)
                if msg is not None:
                    self._resend(peer, entry, msg, out)
                    self.c["last_msg_resends"] += 1

    def _resend(self, peer: str, entry: SenderEntry, msg: DATA, out: Effects) -> None:
        out.send(peer, msg)
        out.event("xmit", peer=peer, conn_id=entry.conn_id, seqno=msg.seqno)
        self.c["xmits"] += 1

    def _reap(self, now: float, out: Effects) -> None:
        timeout = self.props.conn_expiry_timeout
        for peer, send in list(self.send_table.items()):
            if now - send.last_active >= timeout - TIME_EPSILON:
                del self.send_table[peer]
                self.c["conns_expired"] += 1
                self._conn_event(out, peer, send.conn_id, "send", "closed")
        for peer, recv in list(self.recv_table.items()):
            if now - recv.last_active >= timeout - TIME_EPSILON:
                self.remember_delivered(peer, recv)
                del self.recv_table[peer]
                self.c["conns_expired"] += 1
                stable = self._final_stable(peer, recv)
                if stable is not None:
                    self._send_stable(*stable, out)
                self._conn_event(out, peer, recv.conn_id, "recv", "closed")

    # --- introspection --------------------------------------------------------------------------------------------

    def property_changed(self, name: str) -> None:
        if name == "xmit_interval":
            self._next_xmit = -NEVER  # apply at the next tick
        elif name == "stable_interval":
            self._next_stable = -NEVER  # reschedule at the next tick

    def is_idle(self) -> bool:
        """True when every sender window is purged (all STABLEd) and no receiver window holds or misses anything.
        Connections to peers outside the current membership (when one is known) do not count."""
        members = self.members
        return all(len(e.table) == 0 for p, e in self.send_table.items() if members is None or p in members) and all(
            e.table.num_missing() == 0 and len(e.table) == 0
            for p, e in self.recv_table.items()
            if members is None or p in members
        )
