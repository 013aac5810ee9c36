"""Unit tests for node/protocols/mcast.py: Mcast instances wired by hand, with a virtual clock.

The network is a list of in-flight (src, dest, message) triples; a multicast becomes one triple per member of the
net, the sender included (loopback), so tests drop, duplicate and reorder single copies.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from typing import Any

import pytest

from node.protocols.base import Deliver, Effects
from node.protocols.mcast import ACK, MSG, XMIT_REQ, XMIT_RSP, Mcast, McastProps
from node.wire import View, ViewId
from tests.unit.harness import Net, Predicate, Wire, never, of

INTERVAL = 1.0  # McastProps().xmit_interval


def view(members: Iterable[str], vid: int = 1) -> View:
    members = tuple(members)
    return View(ViewId(members[0], vid), members)


class McastNet(Net[Mcast]):
    """Mcast members on the shared harness, in view 1 of all of them, servers, their retransmit tasks started."""

    def __init__(self, names: Iterable[str] = ("A", "B", "C"), caps: dict[str, int] | None = None, **props: Any):
        super().__init__()
        caps = caps or {}
        for n in names:
            self.add(n, Mcast(n, McastProps(**{**props, **({"capacity": caps[n]} if n in caps else {})})))
        self.install(self.names, 1)
        for n in self.names:
            self.call(n, lambda m, out: m.become_server(self.now, out))
            self.call(n, lambda m, out: m.tick(self.now, out))  # starts the retransmit task

    def install(self, members: Iterable[str], vid: int, at: Iterable[str] | None = None) -> None:
        v = view(members, vid)
        for n in self.names if at is None else at:
            self.call(n, lambda m, out: m.install_view(v, self.now, out))

    def mcast(self, src: str, payload: bytes) -> int:
        return self.call(src, lambda m, out: m.multicast(payload, self.now, out))

    def advance(self, dt: float = INTERVAL, *names: str) -> None:
        super().advance(dt, *names)

    def settle(self, rounds: int = 50, drop: Predicate = never) -> int:
        """Pumps and ticks until every member is idle; returns the rounds it took."""
        for i in range(rounds):
            self.pump(drop)
            if all(m.is_idle() for m in self.nodes.values()) and not self.wire:
                return i
            self.advance()
        raise AssertionError(f"not idle after {rounds} rounds: {[m.counters() for m in self.nodes.values()]}")

    def sent_seqnos(self, src: str) -> list[int]:
        """Seqnos of the MSGs src multicast (each counted once; resends to single members are not)."""
        return [m.seqno for s, d, m in self.sends if s == src and type(m) is MSG and d is None]


def to(dest: str) -> Callable[[Wire], bool]:
    return lambda w: w[1] == dest


# ---------------------------------------------------------------------------------------------------- basics


def test_multicast_delivers_locally_and_everywhere_in_order() -> None:
    net = McastNet()
    assert [net.mcast("A", f"a{i}".encode()) for i in range(1, 6)] == [1, 2, 3, 4, 5]
    assert [d.payload for d in net.delivered["A"]] == [b"a1", b"a2", b"a3", b"a4", b"a5"]  # at once, before any I/O
    assert net.delivered["A"][0] == Deliver("multicast", "A", b"a1", None, 1)
    net.pump()
    for n in "BC":
        assert net.seqnos(n, "A") == [1, 2, 3, 4, 5]
        assert [d.payload for d in net.delivered[n]] == [b"a1", b"a2", b"a3", b"a4", b"a5"]
    assert net.seqnos("A", "A") == [1, 2, 3, 4, 5]  # the looped-back copies were not delivered again
    c = net["A"].counters()
    assert (c["msgs_sent"], c["own_msgs_ignored"], c["msgs_delivered"]) == (5, 5, 5)
    assert net["B"].counters()["msgs_delivered"] == 5
    assert c["own_window_size"] == 5 and not net["A"].is_idle()  # not acked yet (5 < ack_threshold)
    net.settle()
    assert net["A"].counters()["own_window_size"] == 0 and net["A"].counters()["min_ack"] == 5


@pytest.mark.parametrize("seed", [20240419, 7, 2780])
def test_fifo_per_sender_with_loss_reorder_and_duplication(seed: int) -> None:
    rng = random.Random(seed)
    net = McastNet(capacity=16, ack_threshold=4)
    expected: dict[str, list[bytes]] = {n: [] for n in net.names}
    for step in range(2000):
        src = rng.choice(net.names)
        payload = f"{src}{step}".encode()
        net.mcast(src, payload)
        expected[src].append(payload)
        if step % 7 == 0:  # a messy network: loss, duplication, reordering (also of ACKs and XMITs)
            items = [w for w in net.take() if rng.random() > 0.2]
            items += [w for w in items if rng.random() < 0.1]
            rng.shuffle(items)
            net.deliver(items, batch=rng.random() < 0.5)
        if step % 50 == 0:
            net.advance()
    for _ in range(30):  # keep the network lossy while the rest drains
        items = [w for w in net.take() if rng.random() > 0.2]
        rng.shuffle(items)
        net.deliver(items)
        net.advance()
    net.settle()
    for n in net.names:
        for s in net.names:
            got = [d for d in net.delivered[n] if d.sender == s]
            assert [d.seqno for d in got] == list(range(1, len(expected[s]) + 1)), (n, s)
            assert [d.payload for d in got] == expected[s], (n, s)
    totals = {k: sum(m.counters()[k] for m in net.nodes.values()) for k in ("duplicates_received", "xmit_rsps_sent")}
    assert totals["duplicates_received"] > 0 and totals["xmit_rsps_sent"] > 0
    assert sum(m.counters()["sends_held"] for m in net.nodes.values()) > 0  # windows of 16 filled up on the way
    for n in net.names:
        assert net.sent_seqnos(n) == sorted(set(net.sent_seqnos(n)))  # every MSG left once, in seqno order


# ---------------------------------------------------------------------------------------------------- flow control


def test_sender_blocks_when_window_full_and_resumes_on_acks_in_seqno_order() -> None:
    net = McastNet(capacity=4, ack_threshold=1)
    a = net["A"]
    assert [net.mcast("A", b"m%d" % i) for i in range(1, 5)] == [1, 2, 3, 4]
    assert not a.blocked
    assert [net.mcast("A", b"m%d" % i) for i in range(5, 8)] == [5, 6, 7]  # seqnos assigned now, messages held
    assert a.blocked and a.pending() == 3 and a.counters()["sends_held"] == 3
    assert net.sent_seqnos("A") == [1, 2, 3, 4] and net.seqnos("A", "A") == [1, 2, 3, 4]
    for _ in range(3):
        net.pump(drop=of(ACK, "C"))  # C's ACKs are lost: B alone cannot free space
    assert a.blocked and a.counters()["min_ack"] == 0
    net.deliver([("C", "A", ACK(2))])  # C acks 1-2: two slots free, 5 and 6 go out; 7 stays held
    assert net.sent_seqnos("A") == [1, 2, 3, 4, 5, 6] and a.pending() == 1
    assert net.seqnos("A", "A") == [1, 2, 3, 4, 5, 6]  # delivered locally as they leave
    assert net.mcast("A", b"m8") == 8  # behind the held 7, even if space appeared meanwhile
    net.deliver([("C", "A", ACK(3))])
    assert net.sent_seqnos("A") == [1, 2, 3, 4, 5, 6, 7] and a.pending() == 1
    net.settle()
    assert net.sent_seqnos("A") == list(range(1, 9)) and not a.blocked
    for n in net.names:
        assert net.seqnos(n, "A") == list(range(1, 9))
        assert [d.payload for d in net.delivered[n]] == [b"m%d" % i for i in range(1, 9)]


def test_lost_tail_and_lost_acks_are_recovered_by_resending_the_highest() -> None:
    net = McastNet(capacity=8)
    for i in range(1, 9):
        net.mcast("A", b"%d" % i)
    assert net.mcast("A", b"9") == 9 and net["A"].blocked
    net.take(of(MSG, dest="C"))  # C never sees 1-8: there is no gap it could notice
    net.pump(drop=of(ACK))  # B delivers 1-8, but its ACKs are lost
    assert net["A"].blocked and net.seqnos("B", "A") == list(range(1, 9))
    net.settle()
    assert not net["A"].blocked and net["A"].counters()["xmits"] > 0
    assert {(s, d) for s, d, m in net.seen if type(m) is MSG and s != d and m.seqno == 8} == {("A", "B"), ("A", "C")}
    assert net.seqnos("C", "A") == list(range(1, 10)) and net.seqnos("B", "A") == list(range(1, 10))
    assert net["B"].counters()["duplicates_received"] >= 1  # the resend that made B repeat its lost ACK


def test_view_change_removing_a_slow_member_releases_held_messages() -> None:
    net = McastNet(capacity=4, ack_threshold=1)
    a = net["A"]
    for i in range(6):
        net.mcast("A", b"%d" % i)
    net.take(to("C"))  # C is slow (or gone): it never acks
    net.pump()
    assert a.blocked and a.pending() == 2 and a.counters()["min_ack"] == 0
    net.install(("A", "B"), 2, at="AB")
    assert not a.blocked and net.sent_seqnos("A") == [1, 2, 3, 4, 5, 6]
    assert net.seqnos("A", "A") == [1, 2, 3, 4, 5, 6]
    assert "C" not in a.acks and "C" not in a.windows and a.counters()["windows"] == 2
    net.take(to("C"))
    net.settle()
    assert net.seqnos("B", "A") == [1, 2, 3, 4, 5, 6] and a.counters()["min_ack"] == 6


def test_ack_from_non_member_or_above_highest_sent_is_ignored() -> None:
    net = McastNet(capacity=4, ack_threshold=1)
    a = net["A"]
    for i in range(5):
        net.mcast("A", b"%d" % i)
    net.take()
    assert a.blocked
    net.deliver([("D", "A", ACK(4)), ("D", "A", ACK(4))])  # D is not a member
    assert a.blocked and a.counters()["own_window_size"] == 4 and a.counters()["acks_from_non_members"] == 2
    assert "D" not in a.acks
    net.deliver([("B", "A", ACK(99)), ("C", "A", ACK(99))])  # more than A ever sent
    assert a.blocked and a.counters()["acks_invalid"] == 2 and a.acks == {"B": 0, "C": 0}
    net.deliver([("B", "A", ACK(4)), ("C", "A", ACK(3))])
    assert a.acks == {"B": 4, "C": 3} and a.counters()["acks_received"] == 2
    assert a.pending() == 0 and net.sent_seqnos("A") == [1, 2, 3, 4, 5]
    net.deliver([("C", "A", ACK(1))])  # an old ACK does not move the entry back
    assert a.acks["C"] == 3 and a.counters()["min_ack"] == 3


def test_close_drops_held_messages_and_releases_the_sender() -> None:
    net = McastNet(capacity=4)
    a = net["A"]
    for i in range(7):
        net.mcast("A", b"%d" % i)
    assert a.pending() == 3 and a.blocked
    assert a.close() == 3
    assert a.pending() == 0 and not a.blocked and a.counters()["held_dropped_on_close"] == 3
    assert a.close() == 0
    net.settle()  # the dropped seqnos never left: nobody waits for them, and a later multicast reuses them
    assert net.mcast("A", b"after") == 5
    net.settle()
    assert net.seqnos("B", "A") == [1, 2, 3, 4, 5]


def test_memory_is_bounded_by_capacity() -> None:
    net = McastNet(capacity=64)
    a = net["A"]
    total = 100_000
    sent = held_max = 0
    while sent < total:
        while sent < total and not a.blocked:  # the runtime's back-pressure: stop while something is held
            net.mcast("A", b"x")
            sent += 1
        held_max = max(held_max, a.pending())
        net.pump(batch=True)
        if a.blocked:
            net.advance()  # acks below ack_threshold go out on xmit_interval
            net.pump(batch=True)
    net.settle()
    assert held_max == 1  # only what the test itself sent while blocked
    for n in net.names:
        m = net[n]
        for table in [m.send_window, *(w.table for w in m.windows.values())]:
            assert table.capacity == 64 and len(table._buf) == 64 and len(table) <= 64
    for n in "BC":
        assert len(net.delivered[n]) == total and net.delivered[n][-1].seqno == total
    assert a.counters()["own_window_size"] == 0 and a.counters()["min_ack"] == total


# ---------------------------------------------------------------------------------------------------- receiving


def test_receiver_drops_outside_window_and_recovers_by_retransmission() -> None:
    net = McastNet(caps={"B": 4}, capacity=16, ack_threshold=2)
    for i in range(1, 13):
        net.mcast("A", b"%d" % i)
    net.take(lambda w: w[1] == "B" and w[2].seqno == 1)  # B loses #1
    net.pump()
    b = net["B"]
    assert net.seqnos("B", "A") == [] and b.counters()["dropped_outside_window"] == 8  # 5-12 above (0, 4]
    assert b.windows["A"].table.hr == 4
    net.advance()
    assert not [w for w in net.wire if type(w[2]) is XMIT_REQ]  # first run: only noted
    net.advance()
    (req,) = [w for w in net.take(of(XMIT_REQ))]
    assert req[:2] == ("B", "A") and req[2].sender == "A" and req[2].ranges == ((1, 1),)
    net.deliver([req])
    (rsp,) = net.take(of(XMIT_RSP))
    assert rsp[2] == XMIT_RSP(1, "A", b"1") and rsp[:2] == ("A", "B")
    net.deliver([rsp])
    assert net.seqnos("B", "A") == [1, 2, 3, 4]
    net.settle()
    assert net.seqnos("B", "A") == list(range(1, 13))
    assert [d.payload for d in net.delivered["B"]] == [b"%d" % i for i in range(1, 13)]
    assert net["A"].is_idle() and b.is_idle()


def test_xmit_req_only_for_seqnos_missing_on_the_previous_run() -> None:
    net = McastNet()
    for i in range(1, 4):
        net.mcast("A", b"%d" % i)
    net.take(lambda w: w[1] == "B" and type(w[2]) is MSG and w[2].seqno == 2)
    net.pump()
    net.advance()
    assert not net.take(of(XMIT_REQ))  # 2 might still be in flight
    net.mcast("A", b"4")
    net.mcast("A", b"5")
    net.take(lambda w: w[1] == "B" and type(w[2]) is MSG and w[2].seqno == 4)
    net.pump()
    net.advance()
    reqs = [w[2] for w in net.take(of(XMIT_REQ))]
    assert reqs == [XMIT_REQ("A", ((2, 2),))]  # 4 went missing after the previous run: not yet
    net.advance()
    reqs = [w[2] for w in net.take(of(XMIT_REQ))]
    assert reqs == [XMIT_REQ("A", ((2, 2), (4, 4)))]
    c = net["B"].counters()
    assert c["missing_msgs"] == 2 and c["undelivered_msgs"] == 2 and c["xmit_reqs_sent"] == 2


def test_messages_before_become_server_and_from_non_members_are_dropped() -> None:
    j = Mcast("J")
    out = Effects()
    j.install_view(view("AJ"), 0.0, out)
    j.handle("A", [MSG(1, b"early")], 0.0, out)
    assert not out.delivers and j.counters()["dropped_not_server"] == 1 and not j.is_server
    j.become_server(0.0, out)
    assert j.is_server
    j.handle("A", [MSG(1, b"x")], 0.0, out)
    j.handle("X", [MSG(1, b"stranger")], 0.0, out)
    j.handle("B", [XMIT_RSP(1, "X", b"stranger")], 0.0, out)
    j.handle("A", [XMIT_RSP(1, "J", b"mine")], 0.0, out)
    assert [d.payload for d in out.delivers] == [b"x"]
    c = j.counters()
    assert (c["msgs_from_non_members"], c["own_msgs_ignored"], c["msgs_received"]) == (2, 1, 5)


def test_acks_after_threshold_or_on_xmit_interval() -> None:
    net = McastNet(("A", "B"), ack_threshold=3)
    for i in range(4):
        net.mcast("A", b"%d" % i)
    net.pump(drop=of(ACK))
    net.wire = []
    acks = [m for s, _, m in net.seen if type(m) is ACK]
    assert acks == [ACK(3)]  # after 3 deliveries; the 4th waits for the retransmit task
    net.advance()
    assert [w[2] for w in net.take(of(ACK))] == [ACK(4)]
    net.advance()
    assert not net.take(of(ACK))  # nothing delivered since: no ACK
    net.deliver([("A", "B", MSG(2, b"1"))])  # a duplicate: the sender may have missed our ACK
    net.advance()
    assert [w[2] for w in net.take(of(ACK))] == [ACK(4)]
    assert Mcast("X", McastProps(capacity=100)).props.effective_ack_threshold() == 25


# ---------------------------------------------------------------------------------------------------- digests


def test_digest_and_set_digest_for_a_joiner() -> None:
    net = McastNet(("A", "B"))
    for i in range(1, 11):
        net.mcast("A", b"%d" % i)
    net.mcast("B", b"b1")
    net.settle()
    assert net["A"].digest() == {"A": (10, 10), "B": (1, 1)}
    assert net["B"].digest() == {"A": (10, 10), "B": (1, 1)}
    # J joins: the coordinator's digest says where J starts for every sender
    j = Mcast("J")
    net.add("J", j)
    net.install(("A", "B", "J"), 2)
    net.call("J", lambda m, out: m.set_digest(net["A"].digest(), net.now, out))
    net.call("J", lambda m, out: m.become_server(net.now, out))
    assert j.digest() == {"A": (10, 10), "B": (1, 1), "J": (0, 0)}
    net.deliver([("A", "J", MSG(5, b"5"))])  # old: never delivered (it is below J's offset)
    net.mcast("A", b"11")
    net.mcast("A", b"12")
    net.take(lambda w: w[1] == "J" and type(w[2]) is MSG and w[2].seqno == 11)
    net.pump()
    net.advance()
    net.advance()
    reqs = [w[2] for w in net.wire if type(w[2]) is XMIT_REQ and w[0] == "J"]
    assert reqs == [XMIT_REQ("A", ((11, 11),))]  # never asks for seqnos <= the offset
    net.settle()
    assert net.seqnos("J", "A") == [11, 12] and net.seqnos("J", "B") == []
    assert j.counters()["duplicates_received"] >= 1 and j.counters()["windows_reset"] == 2


def test_reset_windows_after_a_merge() -> None:
    net = McastNet(capacity=8, ack_threshold=1)
    a, b, c = net["A"], net["B"], net["C"]
    for i in range(1, 4):
        net.mcast("A", b"a%d" % i)
        net.mcast("C", b"c%d" % i)
    net.settle()
    # partition {A, B} | {C}; each side keeps multicasting
    net.install("AB", 2, at="AB")
    net.install("C", 2, at="C")
    for i in range(4, 9):
        net.mcast("A", b"a%d" % i)
        net.mcast("C", b"c%d" % i)
    net.pump(drop=lambda w: (w[0] == "C") != (w[1] == "C"))
    # A fills its window (8, 16] and holds #17; B's ACKs for 9-16 are still in flight when the merge view comes
    for i in range(9, 18):
        net.mcast("A", b"a%d" % i)
    net.take(to("C"))
    net.deliver(net.take(lambda w: w[1] != "C"), batch=True)
    acks_b = net.take(of(ACK, "B"))
    assert a.pending() == 1 and net.wire == []
    merge = View(ViewId("A", 3), ("A", "B", "C"), (ViewId("A", 2), ViewId("C", 2)))
    for n in net.names:
        net.call(n, lambda m, out: m.install_view(merge, net.now, out))
    net.deliver(acks_b)
    assert a.acks == {"B": 16, "C": 0} and a.blocked  # C is new in A's ack map: it holds back purging
    # the merge digest: every member's own entry (purged, highest sent), from its subgroup
    digest = {"A": a.digest()["A"], "B": b.digest()["B"], "C": c.digest()["C"]}
    assert digest == {"A": (8, 16), "B": (0, 0), "C": (8, 8)}
    net.call("A", lambda m, out: m.reset_windows(digest, ["C"], net.now, out))
    # C restarts its window for A after 16 and will never ack below it: its entry is 16 now, 9-16 are purged and
    # #17 leaves at once, without waiting for C to ack anything
    assert a.acks["C"] == 16 and not a.blocked and net.sent_seqnos("A")[-1] == 17
    net.call("B", lambda m, out: m.reset_windows(digest, ["C"], net.now, out))
    net.call("C", lambda m, out: m.reset_windows(digest, ["A", "B"], net.now, out))
    assert c.acks == {"A": 8, "B": 8}
    assert b.windows["A"].table.hd == 16 and b.counters()["windows_reset"] == 1  # B had delivered that far: kept
    net.mcast("C", b"c9")
    net.settle()
    assert net.seqnos("C", "A") == [1, 2, 3, 17]  # a4-a16 belong to the other partition: never waited for
    assert net.seqnos("B", "A") == list(range(1, 18))  # nothing twice
    assert net.seqnos("A", "C") == [1, 2, 3, 9] and net.seqnos("B", "C") == [1, 2, 3, 9]
    assert [d.payload for d in net.delivered["A"] if d.sender == "C"] == [b"c1", b"c2", b"c3", b"c9"]
    assert not any(w[2].ranges[0][0] <= 16 for w in net.seen if type(w[2]) is XMIT_REQ and w[2].sender == "A")
    assert all(m.is_idle() for m in net.nodes.values())


def test_merge_digest_skips_messages_the_sender_purged_after_dropping_the_receiver() -> None:
    """Regression (property test, overlapping splits): E dropped C from its view and purged what C had not acked;
    C never dropped E. Back in one view (E took C back through a merge C never installed, then both installed C's
    own next view), C's window for E waits for E's purged messages: E cannot answer its XMIT_REQs, so C delivered
    nothing more from E, forever. The next merge digest (E's own entry: purged, highest sent) restarts C's window
    at E's purged end, even though E came from C's own subgroup (no reset)."""
    net = McastNet(("C", "E"), ack_threshold=1)
    c, e = net["C"], net["E"]
    net.install("E", 2, at="E")  # E drops C; C keeps E
    for i in range(1, 4):
        net.mcast("E", b"e%d" % i)
    net.take(to("C"))  # cut: C hears none of them; E purges them at once (nobody else to wait for)
    assert e.send_window.low == 3
    net.install("CE", 3)  # both in one view again, C's window for E untouched (E was never gone for C)
    net.mcast("E", b"e4")
    net.mcast("E", b"e5")
    for _ in range(5):
        net.pump()
        net.advance()
    assert net.seqnos("C", "E") == [] and not c.is_idle()
    assert e.counters()["xmit_reqs_missing"] >= 1  # asked for 1-3, which E no longer has
    net.call("C", lambda m, out: m.reset_windows({"C": c.digest()["C"], "E": e.digest()["E"]}, [], net.now, out))
    assert net.seqnos("C", "E") == [4, 5] and c.counters()["windows_skipped"] == 1
    net.settle()
    assert all(m.is_idle() for m in net.nodes.values())
    assert e.acks == {"C": 5} and e.send_window.low == 5


def test_reset_windows_before_the_merge_view_keeps_the_ack_floor() -> None:
    net = McastNet(("A", "B"), capacity=4, ack_threshold=1)
    a = net["A"]
    for i in range(1, 6):
        net.mcast("A", b"%d" % i)
    net.take()
    net.deliver([("B", "A", ACK(4))])
    assert a.pending() == 0 and a.send_window.low == 4
    a.reset_windows({"A": (5, 5), "C": (0, 0)}, ["C"], net.now, Effects())  # C is not in A's view yet
    assert "C" in a.windows and "C" not in a.acks
    net.install(("A", "B", "C"), 2, at="A")
    assert a.acks == {"B": 4, "C": 5}
    net.install(("A", "B", "D"), 3, at="A")
    assert a.acks == {"B": 4, "D": 0} and set(a.windows) == {"B", "D"}


def test_reset_windows_never_delivers_twice_nor_waits_below_the_offset() -> None:
    net = McastNet(("A", "B"))
    for i in range(1, 11):
        net.mcast("A", b"%d" % i)
    net.pump()
    b = net["B"]
    assert net.seqnos("B", "A") == list(range(1, 11))
    old = [w for w in net.seen if w[1] == "B" and type(w[2]) is MSG]
    net.call("B", lambda m, out: m.reset_windows({"A": (5, 5)}, ["A"], net.now, out))
    assert b.windows["A"].table.hd == 10 and b.counters()["windows_reset"] == 0  # B is past the digest: kept
    net.call("B", lambda m, out: m.set_digest({"A": (7, 7)}, net.now, out))
    assert b.windows["A"].table.hd == 10 and b.counters()["windows_reset"] == 0
    net.deliver(old[5:])  # 6-10 again (retransmitted, or duplicated by the network)
    assert net.seqnos("B", "A") == list(range(1, 11)) and b.counters()["duplicates_received"] == 5
    net.call("B", lambda m, out: m.reset_windows({"A": (12, 12)}, ["A"], net.now, out))
    assert b.windows["A"].table.hd == 12 and b.counters()["windows_reset"] == 1
    net.deliver([("A", "B", MSG(11, b"11")), ("A", "B", MSG(13, b"13"))])
    assert net.seqnos("B", "A") == [*range(1, 11), 13] and b.is_idle()


def test_a_member_alone_never_blocks() -> None:
    for members in (None, ("A",)):
        m = Mcast("A", McastProps(capacity=4))
        out = Effects()
        if members:
            m.install_view(view(members), 0.0, out)
        assert [m.multicast(b"%d" % i, 0.0, out) for i in range(1, 11)] == list(range(1, 11))
        assert not m.blocked and m.counters()["sends_held"] == 0 and m.is_idle()
        assert [d.seqno for d in out.delivers] == list(range(1, 11))
        assert m.digest() == {"A": (10, 10)} and m.counters()["min_ack"] == 10


# ---------------------------------------------------------------------------------------------------- misc


def test_xmit_req_answers_each_seqno_once_and_counts_what_is_gone() -> None:
    net = McastNet(("A", "B"), capacity=8, ack_threshold=1)
    for i in range(1, 7):
        net.mcast("A", b"%d" % i)
    net.pump()  # B acked 6: A's window is empty
    for i in range(7, 10):
        net.mcast("A", b"%d" % i)
    net.take()
    a = net["A"]
    out = Effects()
    a.handle("B", [XMIT_REQ("A", ((0, 2**63), (7, 9), (8, 8)))], net.now, out)
    assert [m for _, m in out.sends] == [XMIT_RSP(s, "A", b"%d" % s) for s in (7, 8, 9)]
    assert {d for d, _ in out.sends} == {"B"}
    a.handle("B", [XMIT_REQ("A", ((8, 9),)), XMIT_REQ("Z", ((1, 1),))], net.now, out)
    c = a.counters()
    assert (c["xmit_reqs_received"], c["xmit_reqs_missing"], c["xmit_rsps_sent"]) == (3, 2, 5)


def test_properties() -> None:
    m = Mcast("A")
    assert m.props.as_dict() == {
        "capacity": 16384,
        "ack_threshold": 0,
        "xmit_interval": 1.0,
        "max_xmit_req_size": 1024,
        "ack_duplicates": True,
        "purge_on_view_change": True,
    }
    out = Effects()
    m.tick(5.0, out)
    assert m.next_wakeup() == 6.0
    m.set_property("xmit_interval", "200ms")
    assert m.props.xmit_interval == 0.2 and m.next_wakeup() == float("-inf")
    m.set_property("ack_threshold", "10")
    assert m.props.effective_ack_threshold() == 10
    with pytest.raises(ValueError, match="capacity"):
        m.set_property("capacity", 10)
    with pytest.raises(ValueError, match="ack_threshold"):
        m.set_property("ack_threshold", -1)
    with pytest.raises(ValueError, match="xmit_interval"):
        McastProps(xmit_interval=0).validate()
    with pytest.raises(ValueError, match="unknown property"):
        m.set_property("use_mcast_xmit", True)
    assert set(m.counters()) >= {"pending", "windows", "own_window_size", "min_ack", "undelivered_msgs", "missing_msgs"}
