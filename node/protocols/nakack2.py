"""NAKACK2: reliable, per-sender FIFO multicast with negative acks (JGroups NAKACK2, NAKACK2-no-retransmission.txt).

A member numbers its multicasts (seqnos from 1), keeps them in its own window until STABLE says everyone has them,
and delivers each to itself at once. Every member keeps a receiver window per other view member and delivers that
member's messages in seqno order. From its retransmit task (every `xmit_interval`) a receiver asks for the gaps in
its windows (XMIT_REQ, to the original sender, or to everyone with `use_mcast_xmit_req`); whoever has a copy answers
with XMIT_RSP (original sender and seqno inside, so any member can answer; multicast with `use_mcast_xmit`). A
sender whose last multicast is not followed by another one multicasts HIGHEST_SEQNO (`resend_last_seqno`), so a
receiver that lost the tail finds the gap (JGRP-1904); it repeats it at every retransmit run until STABLE has purged
that seqno (`resend_last_seqno_max_times` = 0, as JGroups' ReliableMulticast does since 5.4.0), so a receiver cut off
across the first announcement gets the next one (JGRP-2167). A message that ends a silence of at least
xmit_interval from its sender and leaves a gap (a healed partition) asks for the gap at once, and then for the next
max_xmit_req_size seqnos each time the previous ones have all arrived (`xmit_req_after_silence`): what was sent
before the silence is lost, not in flight, so it need not wait for retransmit runs, one chunk per run.

`xmit_interval <= 0` turns retransmission off (JGRP-2675, for TCP): no retransmit or last-seqno task, and the
joiner's become-server queue is unbounded, since a message it dropped could never be repaired. The switch
`become_server_queue_unbounded_without_xmit = False` keeps the queue bounded anyway, to reproduce the joiner stuck
behind a gap that the design note describes.

Views and digests: new members get a window at 0, a joiner's windows start after the coordinator's highest seqno of
each member (`set_digest`: a joiner is not owed earlier messages). The digest holds our own entry as (purged, highest
sent): what STABLE purged from our send window can never be retransmitted. A merge restarts the windows of the
senders GMS names (`reset_windows`) at what each sender can still resend: above max(what we delivered, the first
field of its entry), keeping what we received above that and knowing its highest seqno (the second field), so the
retransmit task asks for the missing tail. What the sender purged is skipped (JGRP-940: a subgroup purges what only
it had); what it still holds is delivered, once and in order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from node.protocols.base import NEVER, SECONDS, Deliver, Effects, MulticastLayer, Properties, prop
from node.tables import RetransmitTable
from node.wire import Digest, Message, View
from node.wire_headers import NAKACK2_HIGHEST_SEQNO as HIGHEST_SEQNO
from node.wire_headers import NAKACK2_MSG as MSG
from node.wire_headers import NAKACK2_XMIT_REQ as XMIT_REQ
from node.wire_headers import NAKACK2_XMIT_RSP as XMIT_RSP

MAX_XMIT_RANGES = 3000  # ranges per XMIT_REQ (16 bytes each): keeps a request inside one datagram
MAX_SEQNO_AHEAD = 1 << 20  # a MSG (or announced seqno) this far past highest-delivered is dropped: bounded memory


@dataclass
class Nakack2Props(Properties):
    """Properties with JGroups' names and defaults; durations in seconds."""

    xmit_interval: float = prop(
        1.0, "retransmit and last-seqno tasks; <= 0 disables retransmission (JGRP-2675)", SECONDS
    )
    use_mcast_xmit: bool = prop(True, "XMIT_RSPs are multicast (everyone who lost the message gets it once)")
    use_mcast_xmit_req: bool = prop(False, "XMIT_REQs are multicast (every member holding a copy answers)")
    discard_delivered_msgs: bool = prop(True, "False keeps delivered messages of others until STABLE purges them")
    max_xmit_req_size: int = prop(1024, "max seqnos asked for in one XMIT_REQ; 0 = as many ranges as fit a datagram")
    become_server_queue_size: int = prop(50, "MSGs kept (newest) until BECOME_SERVER; 0 disables the queue")
    resend_last_seqno: bool = prop(True, "multicast HIGHEST_SEQNO when the highest sent seqno stops moving (JGRP-1904)")
    resend_last_seqno_max_times: int = prop(
        0,
        "HIGHEST_SEQNOs sent for the same seqno; 0 = no limit: at every retransmit run until STABLE has purged it "
        "(JGroups 5.4+'s ReliableMulticast); 1 is NAKACK2's default, the JGRP-2167 flaw",
    )
    become_server_queue_unbounded_without_xmit: bool = prop(
        True, "legacy switch: False keeps the become-server queue bounded with xmit_interval <= 0 (the JGRP-2675 bug)"
    )
    xmit_req_after_silence: bool = prop(
        True,
        "a message that ends at least xmit_interval of silence from its sender and leaves a gap asks for it at once, "
        "chunk after chunk as each arrives; False asks once per retransmit run, as JGroups does",
    )

    def validate(self) -> None:
        for name in ("max_xmit_req_size", "become_server_queue_size", "resend_last_seqno_max_times"):
            if getattr(self, name) < 0:
                raise ValueError(f"nakack2.{name} must be >= 0")


class Window:
    """A receiver window for one sender.

    `table` holds what was received but not yet delivered (its hd is the highest delivered); `kept` holds delivered
    messages for answering XMIT_REQs until STABLE purges them (only with discard_delivered_msgs = False).
    `announced` is the highest seqno known to exist (HIGHEST_SEQNO, STABLE, a merge digest): (hr, announced] counts
    as missing.
    """

    __slots__ = ("announced", "asked_at", "kept", "last_received", "table", "xmit_asked", "xmit_highest")

    def __init__(self, offset: int, keep_delivered: bool) -> None:
        self.table: RetransmitTable[bytes] = RetransmitTable(offset)
        self.kept: RetransmitTable[bytes] | None = RetransmitTable(offset) if keep_delivered else None
        self.announced = offset
        self.xmit_highest: int | None = None  # missing up to here is not in flight (a previous run, a silence)
        self.xmit_asked: int | None = None  # the highest seqno of the last chunk asked for after a silence
        self.last_received: float | None = None  # when the last new message of this sender arrived
        self.asked_at = -NEVER  # when the last XMIT_REQ for this window went out

    def num_missing(self) -> int:
        table = self.table
        return table.num_missing() + max(0, self.announced - table.hr)


class Nakack2(MulticastLayer[Nakack2Props]):
    """The NAKACK2 state machine of one member: its own sender window and a receiver window per other member."""

    NAME = "nakack2"
    PROTOCOL = "NAKACK2"
    PROPS = Nakack2Props
    COUNTERS = (
        "msgs_sent",
        "msgs_received",
        "msgs_delivered",
        "duplicates_received",
        "own_msgs_ignored",
        "msgs_from_non_members",
        "xmit_reqs_sent",
        "xmit_reqs_after_silence",
        "xmit_reqs_received",
        "xmit_rsps_sent",
        "xmit_rsps_received",
        "xmit_reqs_missing",
        "highest_seqno_sent",
        "highest_seqno_received",
        "become_server_queued",
        "become_server_dropped",
        "dropped_out_of_window",
        "stable_purged",
    )

    def __init__(self, local: str, props: Nakack2Props | None = None) -> None:
        super().__init__(local, props)
        self.sent: RetransmitTable[bytes] = RetransmitTable(0)  # own multicasts: hd = purged by STABLE, hr = sent
        self.windows: dict[str, Window] = {}  # sender -> receiver window (every view member but the local one)
        self.view: View | None = None
        self._server = False
        self._queue: deque[tuple[str, int, bytes]] = deque()  # become-server queue: (sender, seqno, payload)
        self._next_xmit = -NEVER if self.props.xmit_interval > 0 else NEVER  # the first tick starts the tasks
        self._hs_prev_run = 0  # last-seqno task: highest sent seqno at its previous run
        self._last_announced = 0  # ... the seqno of the last HIGHEST_SEQNO sent, and how often it was sent
        self._announce_count = 0

    # --- application side -----------------------------------------------------------------------------------------

    def multicast(self, payload: bytes, now: float, out: Effects) -> int:
        """Multicasts payload and delivers it locally at once; returns its seqno."""
        seqno = self.sent.hr + 1
        self.sent.add(seqno, payload)
        out.send(None, MSG(seqno, payload))
        out.delivers.append(Deliver("multicast", self.local, payload, None, seqno))
        self.c["msgs_sent"] += 1
        self.c["msgs_delivered"] += 1
        return seqno

    # --- network side ---------------------------------------------------------------------------------------------

    def handle(self, src: str, msgs: list[Message], now: float, out: Effects) -> None:
        """A batch of NAKACK2 messages from src (in arrival order): all messages are added, then delivered once."""
        c = self.c
        if src == self.local:  # our own multicasts (and mcast XMIT_REQs/RSPs) looped back by the network
            c["own_msgs_ignored"] += len(msgs)
            return
        data: list[tuple[str, int, bytes]] = []
        for m in msgs:
            if isinstance(m, MSG):
                c["msgs_received"] += 1
                data.append((src, m.seqno, m.payload))
            elif isinstance(m, XMIT_RSP):
                c["xmit_rsps_received"] += 1
                if m.sender == self.local:
                    c["own_msgs_ignored"] += 1
                else:
                    data.append((m.sender, m.seqno, m.payload))
            elif isinstance(m, XMIT_REQ):
                self._handle_xmit_req(src, m, out)
            elif isinstance(m, HIGHEST_SEQNO):
                c["highest_seqno_received"] += 1
                self._announce(src, m.seqno)
        if not data:
            return
        bound = self._queue_bound()
        if self._server or bound == 0:
            self._receive(data, now, out)
            return
        self._queue.extend(data)  # not a server yet: hold everything until become_server()
        c["become_server_queued"] += len(data)
        self._trim_queue(bound)

    def _receive(self, data: Iterable[tuple[str, int, bytes]], now: float, out: Effects) -> None:
        c = self.c
        touched: dict[str, Window] = {}
        for sender, seqno, payload in data:
            w = self.windows.get(sender)
            if w is None:
                c["msgs_from_non_members"] += 1
                continue
            if seqno - w.table.hd > MAX_SEQNO_AHEAD:
                c["dropped_out_of_window"] += 1
                continue
            if w.table.add(seqno, payload):
                touched[sender] = w
            else:
                c["duplicates_received"] += 1
        interval = self.props.xmit_interval
        at_once = self.props.xmit_req_after_silence and interval > 0
        for sender, w in touched.items():
            # a silence ended by the answer to our own XMIT_REQ does not count
            silence = w.last_received is not None and now - w.last_received >= interval <= now - w.asked_at
            w.last_received = now
            self._deliver(sender, w, out)
            if not at_once:
                continue
            if w.num_missing() == 0:
                w.xmit_asked = None
            elif silence:
                # everything missing was sent before the silence: lost, not in flight
                known = max(w.table.hr, w.announced)
                w.xmit_highest = known if w.xmit_highest is None else max(w.xmit_highest, known)
                self._ask_next_chunk(sender, w, now, out)
            elif w.xmit_asked is not None and w.table.hd >= w.xmit_asked:
                self._ask_next_chunk(sender, w, now, out)  # the last chunk has all arrived

    def _ask_next_chunk(self, sender: str, w: Window, now: float, out: Effects) -> None:
        """XMIT_REQ for the next max_xmit_req_size missing seqnos known not to be in flight (up to xmit_highest)."""
        prev = w.xmit_highest
        ranges = [] if prev is None else [(f, min(last, prev)) for f, last in self._missing_ranges(w) if f <= prev]
        if not ranges:
            w.xmit_asked = None
            return
        w.xmit_asked = ranges[-1][1]
        self._send_xmit_req(sender, w, ranges, now, out)
        self.c["xmit_reqs_after_silence"] += 1

    def _deliver(self, sender: str, w: Window, out: Effects) -> None:
        first = w.table.hd + 1
        payloads = w.table.remove_deliverable()
        if not payloads:
            return
        out.delivers.extend(
            Deliver("multicast", sender, p, None, seqno) for seqno, p in enumerate(payloads, start=first)
        )
        self.c["msgs_delivered"] += len(payloads)
        if w.kept is not None:
            w.kept.add_batch(enumerate(payloads, start=first))
        if w.table.hd >= w.announced:
            w.announced = w.table.hd

    def _announce(self, sender: str, seqno: int) -> None:
        """sender has sent seqno (HIGHEST_SEQNO, STABLE): what we lack up to it is missing and asked for at the next
        retransmit run (it is not in flight, so no run has to see it missing first). Ignored until we are a server:
        the become-server queue may hold those messages."""
        w = self.windows.get(sender)
        if w is None or not self._server or seqno <= w.table.hr or seqno <= w.announced:
            return
        if seqno - w.table.hd > MAX_SEQNO_AHEAD:
            self.c["dropped_out_of_window"] += 1
            return
        w.announced = seqno
        w.xmit_highest = seqno if w.xmit_highest is None else max(w.xmit_highest, seqno)

    def _handle_xmit_req(self, src: str, m: XMIT_REQ, out: Effects) -> None:
        c = self.c
        c["xmit_reqs_received"] += 1
        sender = m.sender
        if sender == self.local:
            stores = [self.sent]
            highest = self.sent.hr
        else:
            w = self.windows.get(sender)
            stores = [] if w is None else [w.table] if w.kept is None else [w.kept, w.table]
            highest = 0 if w is None else w.table.hr
        dest = None if self.props.use_mcast_xmit else src
        sent = asked = 0
        for first, last in m.ranges:
            asked += max(0, min(last, highest) - max(first, 1) + 1)
            for store in stores:
                for seqno, payload in store.items(first, last):
                    out.send(dest, XMIT_RSP(seqno, sender, payload))
                    out.event("xmit", peer=dest, sender=sender, seqno=seqno)
                    sent += 1
        c["xmit_rsps_sent"] += sent
        c["xmit_reqs_missing"] += asked - sent  # asked for, below what we saw, but no longer (or never) held

    # --- membership -----------------------------------------------------------------------------------------------

    def install_view(self, view: View, now: float, out: Effects) -> None:
        """Removes the windows of members that left; new members get a window at offset 0 unless one exists."""
        self.view = view
        members = set(view.members)
        for sender in [s for s in self.windows if s not in members]:
            del self.windows[sender]
        keep = not self.props.discard_delivered_msgs
        for member in view.members:
            if member != self.local and member not in self.windows:
                self.windows[member] = Window(0, keep)

    def digest(self) -> Digest:
        """{member: (highest delivered, highest received)} for every window, the local one as (purged, hs): in a
        merge digest (every member's own entry) the first field tells receivers which of our messages are gone for
        good, the second how far to ask for the rest. (STABLE counts our own entry as (hs, hs): we delivered all.)"""
        d: Digest = {self.local: (self.sent.hd, self.sent.hr)}
        for sender, w in self.windows.items():
            d[sender] = (w.table.hd, w.table.hr)
        return d

    def set_digest(self, digest: Digest, now: float, out: Effects) -> None:
        """A joiner: windows start at the coordinator's highest seqno of each member (earlier ones are not wanted).
        The local entry, if any, is ignored: our own seqnos are never reset."""
        for sender, (_, hr) in digest.items():
            if sender != self.local:
                self._reset_window(sender, hr, out)

    def reset_windows(self, digest: Digest, members: Iterable[str], now: float, out: Effects) -> None:
        """A merge: the windows of `members` (another subgroup's) restart at what each sender can still resend.
        digest[m] = (low, highest): m's own entry (purged, highest sent) in a merge digest, which GMS may raise (what
        we delivered of m before it left our view) or give as (highest, highest) (a sender new to our view: start
        after its highest seqno, as a joiner). The window restarts at max(low, what we delivered), so what m purged
        is skipped, and knows of `highest`: the retransmit task asks m for what is missing up to it. Other windows
        are kept."""
        for sender in members:
            if sender != self.local and sender in digest:
                low, highest = digest[sender]
                self._reset_window(sender, low, out, highest)

    def _reset_window(self, sender: str, offset: int, out: Effects, highest: int = 0) -> None:
        """A fresh window at offset, never below what was delivered (no duplicate deliveries); received messages
        above the offset are carried over, so nothing that arrived has to be retransmitted. `highest`, the sender's
        highest seqno, is announced (what we lack up to it is asked for at the next retransmit run, not in flight)."""
        old = self.windows.get(sender)
        w = Window(offset, not self.props.discard_delivered_msgs)
        if old is not None:
            if old.table.hd > offset:
                w = Window(old.table.hd, not self.props.discard_delivered_msgs)
            carried = old.table.items(w.table.hd + 1, old.table.hr)
            if carried:
                w.table.add_batch(carried)
            w.announced = max(w.announced, old.announced)
        # as _announce: never further ahead of highest-delivered than a MSG may be (bounded memory)
        highest = min(highest, w.table.hd + MAX_SEQNO_AHEAD)
        if highest > w.announced:
            w.announced = w.xmit_highest = highest
        self.windows[sender] = w
        self._deliver(sender, w, out)

    def become_server(self, now: float, out: Effects) -> None:
        """BECOME_SERVER: replays the queued messages into the windows and delivers what is deliverable."""
        if self._server:
            return
        self._server = True
        queued = list(self._queue)
        self._queue.clear()
        self._receive(queued, now, out)

    @property
    def is_server(self) -> bool:
        return self._server

    def _queue_bound(self) -> int | None:
        """Capacity of the become-server queue; None = unbounded; 0 = no queue (messages are processed at once)."""
        p = self.props
        if p.xmit_interval <= 0 and p.become_server_queue_unbounded_without_xmit:
            return None
        return p.become_server_queue_size

    def _trim_queue(self, bound: int | None) -> None:
        """Drops the oldest queued messages beyond bound (as JGroups' BoundedList does)."""
        if bound is None or not self._queue:
            return
        excess = len(self._queue) - bound
        for _ in range(excess):
            self._queue.popleft()
        if excess > 0:
            self.c["become_server_dropped"] += excess

    def stable(self, digest: Digest) -> None:
        """Purges every window up to min(digest[m][0], its highest delivered). With retransmission on, a
        digest[m][1] above our highest received from m announces missing messages (JGRP-2678)."""
        c = self.c
        xmit = self.props.xmit_interval > 0
        for sender, (hd, hr) in digest.items():
            if sender == self.local:
                c["stable_purged"] += self.sent.purge(min(hd, self.sent.hr))
                continue
            w = self.windows.get(sender)
            if w is None:
                continue
            if w.kept is not None:
                c["stable_purged"] += w.kept.purge(min(hd, w.table.hd))
            if xmit:
                self._announce(sender, hr)

    # --- timers ---------------------------------------------------------------------------------------------------

    def next_wakeup(self) -> float:
        return self._next_xmit if self.props.xmit_interval > 0 else NEVER

    def tick(self, now: float, out: Effects) -> None:
        interval = self.props.xmit_interval
        if interval <= 0 or now < self._next_xmit:
            return
        self._next_xmit = now + interval
        self._retransmit_run(now, out)
        if self.props.resend_last_seqno:
            self._last_seqno_run(out)

    def _retransmit_run(self, now: float, out: Effects) -> None:
        """Asks for the gaps of every window; only seqnos already missing at the previous run (or announced), so
        messages still in flight are not requested."""
        for sender, w in self.windows.items():
            if w.num_missing() == 0:
                w.xmit_highest = w.xmit_asked = None
                continue
            ranges = self._missing_ranges(w)
            highest = ranges[-1][1]
            prev = w.xmit_highest
            if prev is None or highest > prev:
                w.xmit_highest = highest
            if prev is None:
                continue
            ranges = [(f, min(last, prev)) for f, last in ranges if f <= prev]
            if ranges and w.xmit_asked is not None:
                w.xmit_asked = ranges[-1][1]  # what arrives of this one continues the chunks after a silence
            self._send_xmit_req(sender, w, ranges, now, out)

    def _missing_ranges(self, w: Window) -> list[tuple[int, int]]:
        """The first max_xmit_req_size missing seqnos of a window, the announced tail included."""
        limit = self.props.max_xmit_req_size
        table = w.table
        ranges = table.missing(limit)
        if w.announced > table.hr:  # the announced tail, within what max_xmit_req_size leaves
            tail = w.announced
            if limit > 0:
                tail = min(tail, table.hr + limit - sum(last - first + 1 for first, last in ranges))
            if tail > table.hr:
                ranges.append((table.hr + 1, tail))
        return ranges

    def _send_xmit_req(self, sender: str, w: Window, ranges: list[tuple[int, int]], now: float, out: Effects) -> None:
        if ranges:
            w.asked_at = now
            dest = None if self.props.use_mcast_xmit_req else sender
            out.send(dest, XMIT_REQ(sender, tuple(ranges[:MAX_XMIT_RANGES])))
            self.c["xmit_reqs_sent"] += 1

    def _last_seqno_run(self, out: Effects) -> None:
        """HIGHEST_SEQNO(hs) when hs did not move since the previous run: at most resend_last_seqno_max_times per hs,
        or, with 0, at every run until STABLE has purged our window up to hs (every member has delivered it).

        0 is the default, as JGroups' current multicast protocols do it: ReliableMulticast (NAKACK3, NAKACK4),
        since 5.4.0 (JGRP-2780), has no limit; its LastSeqnoResender.execute (ReliableMulticast.java L1359-1381 at
        jgroups-5.5.6.Final) runs from every retransmit task (triggerXmit, L1354), skips the run after a regular
        multicast (skipNext, L545), and stops only once `low == highest_sent_seqno` (L1375): the send buffer is
        purged. NAKACK2 at jgroups-5.5.6.Final still stops after resend_last_seqno_max_times = 1 (NAKACK2.java L127,
        L1431): a receiver cut off from the sender across that one announcement waits for the next STABLE round
        (JGRP-2167; scenarios/bugs/nakack2-last-seqno-lost.toml keeps 1 as the flawed setting)."""
        hs = self.sent.hr
        prev, self._hs_prev_run = self._hs_prev_run, hs
        if hs == 0 or hs != prev:
            return
        if hs != self._last_announced:
            self._last_announced = hs
            self._announce_count = 0
        limit = self.props.resend_last_seqno_max_times
        if (limit == 0 and self.sent.hd >= hs) or (limit > 0 and self._announce_count >= limit):
            return
        self._announce_count += 1
        out.send(None, HIGHEST_SEQNO(hs))
        self.c["highest_seqno_sent"] += 1

    # --- introspection --------------------------------------------------------------------------------------------

    def property_changed(self, name: str) -> None:
        if name == "xmit_interval":
            self._next_xmit = -NEVER if self.props.xmit_interval > 0 else NEVER  # start at the next tick / stop
        elif name == "discard_delivered_msgs":
            for w in self.windows.values():
                if self.props.discard_delivered_msgs:
                    w.kept = None
                elif w.kept is None:
                    w.kept = RetransmitTable(w.table.hd)
        if name in ("xmit_interval", "become_server_queue_size", "become_server_queue_unbounded_without_xmit"):
            self._trim_queue(self._queue_bound())

    def gauges(self) -> dict[str, int]:
        return {
            "windows": len(self.windows) + 1,
            "undelivered_msgs": sum(len(w.table) for w in self.windows.values()),
            "missing_msgs": sum(w.num_missing() for w in self.windows.values()),
            "sender_window_size": len(self.sent),
            "become_server_queue_size": len(self._queue),
        }

    def missing_by_sender(self) -> dict[str, int]:
        return {sender: w.num_missing() for sender, w in self.windows.items()}

    def is_idle(self) -> bool:
        """True when no receiver window has a gap or undelivered messages, the become-server queue is empty, and no
        HIGHEST_SEQNO announcement of the last multicast is still due (until then a receiver that lost it does
        not know it is missing anything)."""
        return (
            not self._queue
            and not self._announcement_due()
            and all(w.num_missing() == 0 and len(w.table) == 0 for w in self.windows.values())
        )

    def _announcement_due(self) -> bool:
        """The last seqno's announcement is still to come: its first one, and, with a limit, the repeats up to it.
        Without a limit (0) the repeats go on until STABLE purges it, but only a receiver that lost the first needs
        them, and the orchestrator sees that one as a tail it has not heard (Stack.multicast_heard)."""
        p = self.props
        hs = self.sent.hr
        if not p.resend_last_seqno or p.xmit_interval <= 0 or hs == 0:
            return False
        limit = p.resend_last_seqno_max_times
        if limit == 0:
            return self.sent.hd < hs and (hs != self._last_announced or self._announce_count == 0)
        if hs != self._last_announced:
            return True
        return self._announce_count < limit
