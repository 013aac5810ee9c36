"""MCAST: reliable, per-sender FIFO multicast with a fixed window and positive acks (design/MCAST.txt, JGRP-2780).

JGroups released this design as NAKACK4; the property names and defaults here are NAKACK4's (and its base
ReliableMulticast's). Every member keeps one `RingBuffer` of `capacity` slots per member of the view: its own send
window and a receiver window per other member, allocated once, so memory is fixed per member of the view.

Sender: `multicast` assigns the next seqno at once. If the send window has space the message is added, multicast
and delivered locally in the same call; otherwise it is held in a FIFO and released, in seqno order, when acks free
space (nothing overtakes a held message). The ack map holds the highest ACK of every other current member; the send
window is purged to its minimum (the sender's own entry counts as fully acked). View changes restrict the ack map to
the new members and purge the send window to the minimum ack of the remaining ones (`purge_on_view_change`, the fix
of JGRP-2853/2875), which can release held messages; with it off (the bug) only an ACK that raises the minimum
purges, so once the members that stopped acking are removed, the remaining ones (which acked everything sent) send no
further ACK and the sender stays blocked on its full window. When the window's low end does not move across two
retransmit runs, the highest sent message is resent (unicast) to every member that has not acked it, so a lost tail
message shows up as a gap and a lost last ACK is repeated (receivers re-ACK duplicates; `ack_duplicates` off is
JGRP-2874's flaw: they do not, and a sender blocked by lost ACKs stays blocked).

Receiver: a message outside `(highest delivered, low + capacity]` is dropped; in-window ones are delivered in order
and freed at once. An ACK of the highest delivered seqno goes to the sender after `ack_threshold` deliveries, else
from the retransmit task (`xmit_interval`) if anything was delivered (or a duplicate seen) since the last one. The
retransmit task asks each sender for its gaps (XMIT_REQ), only for seqnos already missing on the previous run, plus
the in-window tail below the highest seqno seen from it (messages dropped above a full window); the answer is one
XMIT_RSP per message, carrying the original sender and seqno.

Views and digests: new members get a window at 0 (a joiner's at the coordinator's digest); a merge restarts the
windows of the senders GMS names at the merge digest's offsets. The merge digest holds each member's own entry as
(purged, highest sent): a window of any other sender still waiting for messages that sender has purged skips past
them. A sender purges only what every member of its view acked, so such a gap belongs to a member the sender had
dropped from its view (JGroups' mergeDigest resets such windows too, to the sender's highest seqno; here only the
unrecoverable part is skipped, nothing the sender can still retransmit).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from node.protocols.base import NEVER, SECONDS, Deliver, Effects, MulticastLayer, Properties, prop
from node.tables import RingBuffer
from node.wire import Digest, Message, View
from node.wire_headers import MCAST_ACK as ACK
from node.wire_headers import MCAST_MSG as MSG
from node.wire_headers import MCAST_XMIT_REQ as XMIT_REQ
from node.wire_headers import MCAST_XMIT_RSP as XMIT_RSP

MAX_XMIT_RANGES = 3000  # ranges per XMIT_REQ (16 bytes each): keeps a request inside one datagram


@dataclass
class McastProps(Properties):
    """Properties with JGroups' NAKACK4 (MCAST) names and defaults; durations in seconds."""

    capacity: int = prop(16384, "slots of every window (messages); fixed for the life of the protocol")
    ack_threshold: int = prop(0, "a receiver ACKs after this many deliveries; 0 = capacity // 4")
    xmit_interval: float = prop(
        1.0, "retransmit task: pending ACKs, XMIT_REQs, resend of the highest unacked message", SECONDS
    )
    max_xmit_req_size: int = prop(1024, "max seqnos asked for in one XMIT_REQ; 0 = as many as fit a datagram")
    ack_duplicates: bool = prop(
        True,
        "a receiver re-acks a duplicate of what it delivered (the sender's resend of its highest unacked message asks "
        "for it); False never answers it, as JGroups' NAKACK4 did not answer HIGHEST_SEQNO up to 5.4.5 (JGRP-2874): "
        "lost last ACKs leave a sender blocked on its full window (the bug)",
    )
    purge_on_view_change: bool = prop(
        True,
        "a view change purges the send window to the minimum ack of the remaining members (JGRP-2853/2875); False "
        "purges only when an ACK arrives: a sender blocked by members that were removed stays blocked (the bug)",
    )

    def validate(self) -> None:
        if self.capacity < 1:
            raise ValueError("mcast.capacity must be >= 1")
        if self.ack_threshold < 0:
            raise ValueError("mcast.ack_threshold must be >= 0 (0: capacity // 4)")
        if self.xmit_interval <= 0:
            raise ValueError("mcast.xmit_interval must be > 0")
        if self.max_xmit_req_size < 0:
            raise ValueError("mcast.max_xmit_req_size must be >= 0")

    def effective_ack_threshold(self) -> int:
        return self.ack_threshold or max(1, self.capacity // 4)


class ReceiverWindow:
    """One sender's messages at this receiver. Delivered messages are freed at once (low == hd)."""

    __slots__ = ("ack_pending", "delivered_since_ack", "highest_seen", "table", "xmit_highest")

    def __init__(self, capacity: int, offset: int) -> None:
        self.table: RingBuffer[bytes] = RingBuffer(capacity, offset)
        self.delivered_since_ack = 0
        self.ack_pending = False  # a duplicate arrived: the sender may have lost our last ACK
        self.highest_seen = offset  # highest seqno seen, including ones dropped above the window
        self.xmit_highest: int | None = None  # highest missing seqno seen by the previous retransmit run


class Mcast(MulticastLayer[McastProps]):
    """The MCAST state machine of one member: its send window, held sends, ack map and receiver windows."""

    NAME = "mcast"
    PROTOCOL = "MCAST"
    PROPS = McastProps
    COUNTERS = (
        "msgs_sent",
        "msgs_received",
        "msgs_delivered",
        "duplicates_received",
        "dropped_outside_window",
        "dropped_not_server",
        "own_msgs_ignored",
        "msgs_from_non_members",
        "acks_sent",
        "acks_received",
        "acks_from_non_members",
        "acks_invalid",
        "xmits",
        "xmit_reqs_sent",
        "xmit_reqs_received",
        "xmit_rsps_sent",
        "xmit_rsps_received",
        "xmit_reqs_missing",
        "sends_held",
        "held_dropped_on_close",
        "windows_reset",
        "windows_skipped",
    )

    def __init__(self, local: str, props: McastProps | None = None) -> None:
        super().__init__(local, props)
        self._capacity = self.props.capacity  # windows keep the capacity they were made with
        self.send_window: RingBuffer[bytes] = RingBuffer(self._capacity, 0)  # low = purged, hd = hr = highest sent
        self._seqno = 0  # highest seqno assigned (sent or held)
        self._held: deque[tuple[int, bytes]] = deque()  # (seqno, payload), seqnos consecutive from hr + 1
        self.windows: dict[str, ReceiverWindow] = {}  # other member -> its messages here
        self.acks: dict[str, int] = {}  # other current member -> highest seqno of ours it acked
        self._ack_floor: dict[str, int] = {}  # reset_windows for members not in the view yet (install_view uses it)
        self.members: tuple[str, ...] = ()
        self._is_server = False
        self._next_xmit = -NEVER  # the first tick starts the retransmit task
        self._watermark = (0, 0)  # (low, hr) of the send window as seen by the previous retransmit run

    # --- application side -----------------------------------------------------------------------------------------

    def multicast(self, payload: bytes, now: float, out: Effects) -> int:
        """Assigns the next seqno and returns it; sends and delivers locally now, or holds it until acks free space."""
        self._seqno += 1
        seqno = self._seqno
        if self._held or not self.send_window.can_add(seqno):
            self._held.append((seqno, payload))
            self.c["sends_held"] += 1
        else:
            self._send(seqno, payload, out)
        return seqno

    def _send(self, seqno: int, payload: bytes, out: Effects) -> None:
        win = self.send_window
        win.add(seqno, payload)
        win.mark_delivered(seqno)
        out.send(None, MSG(seqno, payload))
        out.delivers.append(Deliver("multicast", self.local, payload, None, seqno))
        self.c["msgs_sent"] += 1
        self.c["msgs_delivered"] += 1
        if not self.acks:  # nobody else to wait for
            win.purge(seqno)

    def _release(self, out: Effects) -> None:
        held = self._held
        win = self.send_window
        while held and win.can_add(held[0][0]):
            seqno, payload = held.popleft()
            self._send(seqno, payload, out)

    def pending(self) -> int:
        """Held messages (the runtime applies back-pressure while > 0)."""
        return len(self._held)

    @property
    def blocked(self) -> bool:
        return bool(self._held)

    def close(self) -> int:
        """Stopping: drops the held messages and returns how many. Their seqnos never left this member and are
        handed out again by later multicasts, so receivers never wait for them."""
        n = len(self._held)
        self._held.clear()
        self._seqno = self.send_window.hr
        self.c["held_dropped_on_close"] += n
        return n

    # --- network side ---------------------------------------------------------------------------------------------

    def handle(self, src: str, msgs: list[Message], now: float, out: Effects) -> None:
        """A batch of MCAST messages from src (in arrival order)."""
        data: list[tuple[int, bytes]] = []
        xmitted: dict[str, list[tuple[int, bytes]]] = {}
        for m in msgs:
            if isinstance(m, MSG):
                data.append((m.seqno, m.payload))
            elif isinstance(m, ACK):
                self._handle_ack(src, m.seqno, out)
            elif isinstance(m, XMIT_REQ):
                self._handle_xmit_req(src, m, out)
            elif isinstance(m, XMIT_RSP):
                self.c["xmit_rsps_received"] += 1
                xmitted.setdefault(m.sender, []).append((m.seqno, m.payload))
        if data:
            self._receive(src, data, out)
        for sender, items in xmitted.items():
            self._receive(sender, items, out)

    def _receive(self, sender: str, items: list[tuple[int, bytes]], out: Effects) -> None:
        c = self.c
        n = len(items)
        c["msgs_received"] += n
        if sender == self.local:
            c["own_msgs_ignored"] += n
            return
        if not self._is_server:
            c["dropped_not_server"] += n
            return
        w = self.windows.get(sender)
        if w is None:
            c["msgs_from_non_members"] += n
            return
        table = w.table
        top = table.low + table.capacity
        added = 0
        for seqno, payload in items:
            if seqno > w.highest_seen:
                w.highest_seen = seqno
            if seqno <= table.hd:
                c["duplicates_received"] += 1
                if self.props.ack_duplicates:
                    w.ack_pending = True  # the sender may have lost our last ACK: repeat it on the next run
            elif seqno in table:
                c["duplicates_received"] += 1
            elif seqno > top:
                c["dropped_outside_window"] += 1
            else:
                table.add(seqno, payload)
                added += 1
        if added:
            self._deliver(sender, w, out)

    def _deliver(self, sender: str, w: ReceiverWindow, out: Effects) -> None:
        """Delivers the run of messages after the highest delivered one, frees them, and ACKs past the threshold."""
        table = w.table
        first = table.hd + 1
        delivered = table.remove_deliverable()
        if not delivered:
            return
        table.purge(table.hd)
        out.delivers.extend(Deliver("multicast", sender, p, None, first + i) for i, p in enumerate(delivered))
        self.c["msgs_delivered"] += len(delivered)
        w.delivered_since_ack += len(delivered)
        if w.delivered_since_ack >= self.props.effective_ack_threshold():
            self._send_ack(sender, w, out)

    def _send_ack(self, sender: str, w: ReceiverWindow, out: Effects) -> None:
        seqno = w.table.hd
        out.send(sender, ACK(seqno))
        w.delivered_since_ack = 0
        w.ack_pending = False
        self.c["acks_sent"] += 1
        out.event("ack", peer=sender, conn_id=None, seqno=seqno)

    def _handle_ack(self, src: str, seqno: int, out: Effects) -> None:
        prev = self.acks.get(src)
        if prev is None:
            self.c["acks_from_non_members"] += 1
            return
        if seqno > self.send_window.hr:  # more than we ever sent: a bogus or misrouted ACK purges nothing
            self.c["acks_invalid"] += 1
            return
        self.c["acks_received"] += 1
        if seqno > prev:
            self.acks[src] = seqno
            if prev <= self.send_window.low:  # only a member at or below the purged end can hold the minimum
                self._purge(out)

    def _min_ack(self) -> int:
        return min(self.acks.values()) if self.acks else self.send_window.hr

    def _purge(self, out: Effects) -> None:
        """Purges the send window to the minimum ack and releases held messages into the space freed."""
        win = self.send_window
        if win.purge(self._min_ack()) and self._held:
            self._release(out)

    def _handle_xmit_req(self, src: str, m: XMIT_REQ, out: Effects) -> None:
        c = self.c
        c["xmit_reqs_received"] += 1
        if m.sender == self.local:
            table = self.send_window
        else:
            w = self.windows.get(m.sender)
            if w is None:
                c["xmit_reqs_missing"] += 1
                return
            table = w.table
        lowest, highest = table.low + 1, table.hr
        done = table.low  # every seqno is answered at most once per request, so a request costs <= capacity sends
        missing = False
        sent = 0
        for first, last in m.ranges:
            if first < lowest:
                missing = True
            lo = max(first, done + 1)
            hi = min(last, highest)
            for seqno in range(lo, hi + 1):
                payload = table.get(seqno)
                if payload is None:
                    missing = True
                else:
                    out.send(src, XMIT_RSP(seqno, m.sender, payload))
                    sent += 1
            if last > highest:
                missing = True
            done = max(done, hi)
        c["xmit_rsps_sent"] += sent
        c["xmits"] += sent
        if missing:
            c["xmit_reqs_missing"] += 1

    # --- membership -----------------------------------------------------------------------------------------------

    def install_view(self, view: View, now: float, out: Effects) -> None:
        """Receiver windows for new members (empty, offset 0), none for members gone; the ack map follows the view
        and, with purge_on_view_change, the send window is purged to its new minimum (a member gone no longer holds
        back purging: held messages may be released)."""
        others = [m for m in view.members if m != self.local]
        current = set(others)
        self.members = tuple(view.members)
        for m in [m for m in self.windows if m not in current]:
            del self.windows[m]
        for m in others:
            if m not in self.windows:
                self.windows[m] = ReceiverWindow(self._capacity, 0)
        floor = self._ack_floor
        self.acks = {m: self.acks.get(m, floor.get(m, 0)) for m in others}
        floor.clear()
        if self.props.purge_on_view_change:
            self._purge(out)

    def digest(self) -> Digest:
        """member -> (highest delivered, highest received) for every window, own as (purged, hs): in a merge digest
        (every member's own entry) the first field tells receivers which of our messages are gone for good."""
        d: Digest = {m: (w.table.hd, w.table.hr) for m, w in self.windows.items()}
        win = self.send_window
        d[self.local] = (win.low, win.hr)
        return d

    def set_digest(self, digest: Digest, now: float, out: Effects) -> None:
        """Joiner: the window of every member in the digest starts after its highest received seqno there."""
        for m, (_, hr) in digest.items():
            if m != self.local:
                self._reset_window(m, hr)

    def reset_windows(self, digest: Digest, members: Iterable[str], now: float, out: Effects) -> None:
        """Merge: fresh windows at offset digest[m][1] for the given members. Those members reset their window for
        us to digest[local][1] as well, so they will never ack anything below it: their ack entries are raised to
        it (clamped to what we sent), which may purge and release held messages.

        Every other sender in the digest (a merge digest holds each member's own entry, (purged, hs)) keeps its
        window, but one still waiting for messages that sender has purged skips past them (`_skip_purged`)."""
        own = digest.get(self.local)
        floor = min(own[1], self.send_window.hr) if own is not None else None
        reset = set(members)
        for m in reset:
            if m == self.local:
                continue
            if m in digest:
                self._reset_window(m, digest[m][1])
            if floor is not None:
                if m in self.acks:
                    self.acks[m] = max(self.acks[m], floor)
                else:
                    self._ack_floor[m] = max(self._ack_floor.get(m, 0), floor)
        for m, (purged, _) in digest.items():
            if m != self.local and m not in reset:
                self._skip_purged(m, purged, out)
        self._purge(out)

    def _skip_purged(self, sender: str, purged: int, out: Effects) -> None:
        """The sender has purged everything <= `purged`: it can never retransmit those. A sender purges only what
        every member of its view acked, so a window still missing some of them belongs to a member the sender
        dropped from its view meanwhile (or took to reset its window in a merge this member never installed, see
        gms_merge.py) and they are not owed to it; without this its window would wait for them forever and deliver
        nothing more from that sender. The window restarts at `purged`, keeping what it received above; the run
        after it is delivered. Nothing is delivered twice (hd only grows)."""
        w = self.windows.get(sender)
        if w is None or w.table.hd >= purged:
            return
        old = w.table
        fresh = ReceiverWindow(self._capacity, purged)
        for seqno in range(purged + 1, old.hr + 1):
            payload = old.get(seqno)
            if payload is not None:
                fresh.table.add(seqno, payload)
        fresh.highest_seen = max(w.highest_seen, purged)
        fresh.delivered_since_ack = w.delivered_since_ack
        fresh.ack_pending = True  # tell the sender where we are now
        self.windows[sender] = fresh
        self.c["windows_skipped"] += 1
        self._deliver(sender, fresh, out)

    def _reset_window(self, member: str, offset: int) -> None:
        """A fresh window at offset, unless the current one has delivered that far already (never deliver twice)."""
        w = self.windows.get(member)
        if w is not None and w.table.hd >= offset:
            return
        self.windows[member] = ReceiverWindow(self._capacity, offset)
        self.c["windows_reset"] += 1

    def become_server(self, now: float, out: Effects) -> None:
        """Joining is done: messages are accepted from now on (before, they are dropped and counted)."""
        self._is_server = True

    @property
    def is_server(self) -> bool:
        return self._is_server

    # --- timers ---------------------------------------------------------------------------------------------------

    def next_wakeup(self) -> float:
        return self._next_xmit

    def tick(self, now: float, out: Effects) -> None:
        if now >= self._next_xmit:
            self._next_xmit = now + self.props.xmit_interval
            self._retransmit_run(out)

    def _retransmit_run(self, out: Effects) -> None:
        props = self.props
        c = self.c
        # receiver side: pending ACKs, then ask for what is missing. Only seqnos that were already missing in the
        # previous run are asked for, so messages still in flight are not requested.
        for sender, w in self.windows.items():
            if w.delivered_since_ack or w.ack_pending:
                self._send_ack(sender, w, out)
            ranges = self._missing(w, props.max_xmit_req_size)
            if not ranges:
                w.xmit_highest = None
                continue
            highest = ranges[-1][1]
            prev = w.xmit_highest
            if prev is None or highest > prev:
                w.xmit_highest = highest
            if prev is None:
                continue
            ranges = [(f, min(last, prev)) for f, last in ranges if f <= prev][:MAX_XMIT_RANGES]
            if ranges:
                out.send(sender, XMIT_REQ(sender, tuple(ranges)))
                c["xmit_reqs_sent"] += 1
        # sender side: resend the highest sent message to the members that have not acked it when the window's low
        # end did not move since the previous run (a lost tail message, or a lost last ACK)
        win = self.send_window
        mark = (win.low, win.hr)
        if win.low < win.hr and mark == self._watermark:
            hs = win.hr
            payload = win.get(hs)
            if payload is not None:
                for m, acked in self.acks.items():
                    if acked < hs:
                        out.send(m, MSG(hs, payload))
                        c["xmits"] += 1
                        out.event("xmit", peer=m, conn_id=None, seqno=hs)
        self._watermark = mark

    @staticmethod
    def _missing(w: ReceiverWindow, max_count: int) -> list[tuple[int, int]]:
        """Gaps in the window, then its tail up to the highest seqno seen (dropped above a full window)."""
        table = w.table
        ranges = table.missing(max_count) if table.num_missing() else []
        tail_end = min(w.highest_seen, table.low + table.capacity)
        if tail_end > table.hr:
            n = sum(last - first + 1 for first, last in ranges)
            if max_count > 0:
                tail_end = min(tail_end, table.hr + max_count - n)
            if tail_end > table.hr:
                ranges.append((table.hr + 1, tail_end))
        return ranges

    # --- introspection --------------------------------------------------------------------------------------------

    def set_property(self, name: str, value: object) -> None:
        if name == "capacity":
            raise ValueError("mcast.capacity is fixed once the protocol runs (JGroups: writable=false)")
        super().set_property(name, value)

    def property_changed(self, name: str) -> None:
        if name == "xmit_interval":
            self._next_xmit = -NEVER  # apply at the next tick

    def gauges(self) -> dict[str, int]:
        return {
            "pending": len(self._held),
            "windows": len(self.windows) + 1,
            "own_window_size": len(self.send_window),
            "min_ack": self._min_ack(),
            "undelivered_msgs": sum(len(w.table) for w in self.windows.values()),
            "missing_msgs": sum(w.table.num_missing() for w in self.windows.values()),
        }

    def missing_by_sender(self) -> dict[str, int]:
        return {sender: w.table.num_missing() for sender, w in self.windows.items()}

    def is_idle(self) -> bool:
        """Nothing held, no gaps (nor a known missing tail), and the own window fully acked by current members."""
        win = self.send_window
        return (
            not self._held
            and win.low == win.hr
            and all(w.table.num_missing() == 0 and w.highest_seen <= w.table.hr for w in self.windows.values())
        )
