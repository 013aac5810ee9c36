"""Unit tests for node/protocols/unicast2.py: two Unicast2 instances wired by hand, with a virtual clock.

Scenario numbers refer to design/UNICAST2.txt. Scenario #6 is a known flaw of the design that the implementation
keeps on purpose; its test pins the flaw down precisely.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from node.protocols.base import Effects
from node.protocols.unicast2 import DATA, SEND_FIRST_SEQNO, STABLE, XMIT_REQ, Unicast2, Unicast2Props
from node.stack import build_stack
from tests.unit.harness import Net, Wire, of


class Unicast2Net(Net[Unicast2]):
    """A and B on the shared harness, their timers started (retransmit task now, stable task one interval later)."""

    def __init__(self, **props: Any) -> None:
        super().__init__()
        self.add("A", Unicast2("A", Unicast2Props(**props), conn_id_start=322649))
        self.add("B", Unicast2("B", Unicast2Props(**props), conn_id_start=101200))
        for name in self.names:
            self.tick(name)

    @property
    def a(self) -> Unicast2:
        return self["A"]

    @property
    def b(self) -> Unicast2:
        return self["B"]

    def send(self, src: str, dest: str, payload: bytes) -> int:
        return self.call(src, lambda u, out: u.send(dest, payload, self.now, out))

    def send_many(self, src: str, dest: str, n: int, prefix: str = "m") -> None:
        for i in range(n):
            self.send(src, dest, f"{prefix}{i + 1}".encode())


def data(seqno: int | None = None) -> Callable[[Wire], bool]:
    return lambda w: type(w[2]) is DATA and (seqno is None or w[2].seqno == seqno)


def established(n_ab: int = 25, n_ba: int = 0, **props: Any) -> Unicast2Net:
    """A connection A->B with n_ab messages delivered (and B->A with n_ba), nothing STABLEd yet."""
    net = Unicast2Net(**props)
    net.send_many("A", "B", n_ab, "old")
    net.send_many("B", "A", n_ba, "old")
    net.pump()
    assert len(net.delivered["B"]) == n_ab and len(net.delivered["A"]) == n_ba
    return net


# ---------------------------------------------------------------------------------------------------- basics


def test_happy_path_fifo_and_headers() -> None:
    net = Unicast2Net()
    net.send_many("A", "B", 200)
    msgs = [m for _, _, m in net.wire]
    conn_id = net.a.send_conn_id("B")
    assert conn_id == 322649
    assert (msgs[0].seqno, msgs[0].conn_id, msgs[0].first) == (1, conn_id, True)
    assert all(m.conn_id == 0 and not m.first for m in msgs[1:])  # only #1 carries the conn-id
    assert [m.seqno for m in msgs] == list(range(1, 201))
    net.pump()
    assert net.payloads("B") == [f"m{i}".encode() for i in range(1, 201)]
    assert [d.seqno for d in net.delivered["B"]] == list(range(1, 201))
    assert {(d.sender, d.conn_id, d.kind) for d in net.delivered["B"]} == {("A", conn_id, "unicast")}
    assert net.b.recv_table["A"].conn_id == conn_id
    c = net.b.counters()
    assert (c["msgs_received"], c["msgs_delivered"], c["conns_created"], c["recv_conns"]) == (200, 200, 1, 1)
    assert net.a.counters()["unacked_msgs"] == 200  # nothing purged until a STABLE
    assert net.b.is_idle() and not net.a.is_idle()
    assert not net.sent(XMIT_REQ) and not net.sent(STABLE)


def test_reordered_messages_are_delivered_in_order() -> None:
    net = Unicast2Net()
    net.send_many("A", "B", 100)
    first, rest = net.wire[0], net.wire[1:]
    random.Random(7).shuffle(rest)
    net.wire = [first, *rest]
    net.pump()
    assert [d.seqno for d in net.delivered["B"]] == list(range(1, 101))
    assert net.b.counters()["dropped_unknown_conn"] == 0


def test_conn_ids_never_zero_and_wrap() -> None:
    u = Unicast2("A", conn_id_start=0)
    out = Effects()
    u.send("B", b"x", 0.0, out)
    assert u.send_conn_id("B") == 1
    u = Unicast2("A", conn_id_start=(1 << 32) - 1)
    u.send("B", b"x", 0.0, out)
    u.remove_send_connection("B")
    u.send("B", b"x", 0.0, out)
    assert u.send_conn_id("B") == 1  # wrapped past 0 ("unset")
    assert u.send_conn_id("C") is None


def test_duplicate_below_highest_delivered_is_discarded_and_acked() -> None:
    net = Unicast2Net()
    net.send_many("A", "B", 3)
    copy2 = net.wire[1]
    net.pump()
    net.deliver([copy2])  # a duplicate of #2 after #3 was delivered
    assert net.payloads("B") == [b"m1", b"m2", b"m3"]
    assert net.b.counters()["duplicates_received"] == 1
    (ack,) = net.take(of(STABLE))
    assert (ack[2].high, ack[2].conn_id) == (2, net.a.send_conn_id("B"))
    assert net.b.counters()["stables_dup_acks"] == 1
    net.deliver([ack])
    table = net.a.send_table["B"].table
    assert (table.low, len(table)) == (2, 1)  # A removed #1 and #2 from its sender window


def test_duplicate_above_highest_delivered_is_not_acked() -> None:
    net = Unicast2Net()
    net.send_many("A", "B", 3)
    m1, m2, m3 = net.take()
    net.deliver([m1, m3, m3])  # #3 twice while #2 is missing
    assert net.b.counters()["duplicates_received"] == 1
    assert not net.take(of(STABLE))
    net.deliver([m2])
    assert net.payloads("B") == [b"m1", b"m2", b"m3"]


def test_gap_is_repaired_by_xmit_req() -> None:
    net = Unicast2Net()
    net.send_many("A", "B", 10)
    net.pump(drop=lambda w: type(w[2]) is DATA and w[2].seqno in (3, 4, 7))
    assert net.payloads("B") == [b"m1", b"m2"]
    assert net.b.counters()["missing_msgs"] == 3
    net.advance(0.5, "B")  # retransmit run
    (req,) = net.take(of(XMIT_REQ))
    assert req[2].conn_id == net.b.recv_table["A"].conn_id
    assert req[2].ranges == ((3, 4), (7, 7))
    net.deliver([req])
    assert [w[2].seqno for w in net.wire] == [3, 4, 7]  # A resends exactly those
    net.pump()
    assert net.payloads("B") == [f"m{i}".encode() for i in range(1, 11)]
    assert net.a.counters()["xmit_rsps_sent"] == 3 and net.a.counters()["xmit_reqs_missing"] == 0
    assert [e.fields["seqno"] for e in net.events["A"] if e.kind == "xmit"] == [3, 4, 7]
    net.advance(0.5, "B")
    assert not net.take(of(XMIT_REQ))  # no gap, no request


def test_sender_does_not_retransmit_on_its_own() -> None:
    net = Unicast2Net()
    net.send_many("A", "B", 5)
    net.take()  # all lost
    for _ in range(20):
        net.advance(0.5)
    assert not net.wire and net.a.counters()["xmits"] == 0


def test_first_message_lost_send_first_seqno_recovers() -> None:
    net = Unicast2Net()
    net.send_many("A", "B", 3)
    net.take(data(1))
    net.deliver(net.take(), batch=True)  # #2 and #3 in one batch, no receiver entry: dropped
    assert net.delivered["B"] == []
    assert net.b.counters()["dropped_unknown_conn"] == 2
    (sfs,) = net.take(of(SEND_FIRST_SEQNO))  # one per batch, for the highest dropped seqno
    assert sfs[2].seqno == 3
    net.deliver([sfs])
    resent = [w[2] for w in net.wire]
    assert [(m.seqno, m.first, m.conn_id) for m in resent] == [(1, True, 322649), (2, False, 0), (3, False, 0)]
    net.pump()
    assert net.payloads("B") == [b"m1", b"m2", b"m3"]
    assert net.a.counters()["send_first_seqno_received"] == 1 and net.b.counters()["send_first_seqno_sent"] == 1


def test_non_first_message_of_another_connection_is_dropped() -> None:
    net = established(3)
    net.deliver([("A", "B", DATA(4, 999, False, b"other"))])  # a conn-id, but not B's: drop and ask
    assert net.b.counters()["dropped_unknown_conn"] == 1 and len(net.delivered["B"]) == 3
    assert [m.seqno for m in net.sent(SEND_FIRST_SEQNO, "B")] == [4]
    net.deliver([("A", "B", DATA(4, 0, False, b"unset"))])  # conn-id 0: taken for the current connection
    assert net.payloads("B")[-1] == b"unset"


def test_seqno_far_ahead_is_dropped() -> None:
    net = established(3)
    net.deliver([("A", "B", DATA(4 + (1 << 20), 0, False, b"far"))])
    assert net.b.counters()["dropped_out_of_window"] == 1 and net.b.recv_table["A"].table.hr == 3


def test_send_first_seqno_without_entry_is_ignored() -> None:
    u = Unicast2("A")
    out = Effects()
    u.handle("B", [SEND_FIRST_SEQNO(5)], 0.0, out)
    assert out.sends == [] and u.counters()["send_first_seqno_unknown"] == 1


def test_xmit_req_for_another_connection_is_not_answered() -> None:
    net = Unicast2Net()
    net.send_many("A", "B", 3)
    out = Effects()
    net.a.handle("B", [XMIT_REQ(999, ((1, 2),))], 0.0, out)
    assert out.sends == []
    c = net.a.counters()
    assert (c["xmit_reqs_unknown_conn"], c["xmit_reqs_missing"]) == (1, 2)


# ---------------------------------------------------------------------------------------------------- STABLE


def test_periodic_stable_purges_sender_window_only_when_delivery_moved() -> None:
    net = Unicast2Net(stable_interval=10.0)
    net.send_many("A", "B", 50)
    net.pump()
    net.advance(9.0)
    assert not net.sent(STABLE)  # first run one interval after start
    net.advance(1.0)
    (stable,) = net.sent(STABLE, "B")
    assert (stable.high, stable.conn_id) == (50, 322649)
    net.pump()
    assert net.a.counters()["unacked_msgs"] == 0 and net.a.counters()["stables_received"] == 1
    assert net.a.is_idle() and net.b.is_idle()
    net.advance(10.0)
    net.advance(10.0)
    assert len(net.sent(STABLE)) == 1  # highest delivered did not move: no new STABLE
    net.send("A", "B", b"more")
    net.pump()
    net.advance(10.0)
    assert [m.high for m in net.sent(STABLE)] == [50, 51]


def test_max_stable_msgs_repeats_a_stable() -> None:
    net = Unicast2Net(stable_interval=1.0, max_stable_msgs=3)
    net.send_many("A", "B", 5)
    net.pump()
    for _ in range(6):
        net.advance(1.0)
    assert [m.high for m in net.sent(STABLE)] == [5, 5, 5]


def test_max_bytes_triggers_stable_at_once() -> None:
    net = Unicast2Net(max_bytes=1000)
    for _ in range(25):
        net.send("A", "B", b"x" * 100)
    net.pump()
    assert [m.high for m in net.sent(STABLE)] == [10, 20]
    assert len(net.a.send_table["B"].table) == 5


def test_memory_bounded_with_periodic_stable() -> None:
    net = Unicast2Net(stable_interval=1.0)
    a, b = net.a, net.b
    most = 0
    for _ in range(100):  # 100 x 1000 = 100k messages, 4 rounds a second
        out = Effects()
        for _ in range(1000):
            a.send("B", b"0123456789abcdef", net.now, out)
        msgs = [msg for _, msg in out.sends]
        out_b = Effects()
        b.handle("A", msgs, net.now, out_b)
        assert len(out_b.delivers) == 1000
        net.absorb("B", out_b)
        net.advance(0.25)
        net.pump()
        table = a.send_table["B"].table
        most = max(most, len(table), table.capacity())
    assert b.counters()["msgs_delivered"] == 100_000
    assert net.delivered["B"][-1].seqno == 100_000
    assert most <= 5000  # at most one second of traffic (plus a round) is kept
    assert 20 <= b.counters()["stables_sent"] <= 26
    net.advance(1.0)
    net.pump()
    assert a.counters()["unacked_msgs"] == 0


# ---------------------------------------------------------------------------------------------------- connections


def test_close_connection_removes_both_sides_at_once() -> None:  # scenario #3
    net = established(5, 3)
    out = Effects()
    net.a.close_connection("B", net.now, out)
    net.absorb("A", out)
    assert net.a.send_table == {} and net.a.recv_table == {}
    states = [(e.fields["side"], e.fields["state"]) for e in net.events["A"] if e.kind == "conn"]
    assert states[-2:] == [("send", "closed"), ("recv", "closed")]
    (final,) = net.take(of(STABLE))  # the receive side acks what it delivered on its way out
    assert final[2].high == 3
    net.deliver([final])
    assert net.b.counters()["unacked_msgs"] == 0
    net.b.close_connection("A", net.now, Effects())
    assert net.b.counters()["send_conns"] == net.b.counters()["recv_conns"] == 0
    net.send("A", "B", b"again")  # scenario #7: both create new entries
    net.pump()
    assert net.delivered["B"][-1].seqno == 1 and net.delivered["B"][-1].conn_id == 322650


def test_unilateral_sender_close_then_new_connection_resets_receiver() -> None:  # scenario #4
    net = established(25)
    old_conn = net.b.recv_table["A"].conn_id
    assert net.a.remove_send_connection("B") and not net.a.remove_send_connection("B")
    net.send_many("A", "B", 3, "new")
    new_conn = net.a.send_conn_id("B")
    assert new_conn != old_conn
    net.pump()
    assert net.payloads("B", conn_id=new_conn) == [b"new1", b"new2", b"new3"]
    entry = net.b.recv_table["A"]
    assert (entry.conn_id, entry.table.hd) == (new_conn, 3)
    assert net.b.counters()["conns_reset"] == 1
    assert ("recv", "closed", old_conn) in [
        (e.fields.get("side"), e.fields.get("state"), e.fields["conn_id"]) for e in net.events["B"]
    ]


def test_unilateral_receiver_close_then_send_first_seqno() -> None:  # scenario #5
    net = established(25)
    assert net.b.remove_receive_connection("A")
    net.advance(0.5, "B")  # the removed connection's last STABLE goes out at the next tick
    net.pump()
    assert net.a.counters()["unacked_msgs"] == 0
    net.send("A", "B", b"26")
    net.pump()
    assert net.b.counters()["dropped_unknown_conn"] == 1
    assert [m.seqno for m in net.sent(SEND_FIRST_SEQNO, "B")] == [26]
    resent = [m for m in net.sent(DATA, "A") if m.seqno == 26]
    assert [(m.first, m.conn_id) for m in resent] == [(False, 0), (True, 322649)]
    net.send("A", "B", b"27")
    net.pump()
    assert net.payloads("B")[25:] == [b"26", b"27"]  # nothing of the old window delivered again
    assert net.b.recv_table["A"].first_seqno == 26


def test_overlapping_partitions_a_alone() -> None:  # scenario #8: A: {A}, B: {A,B}
    net = established(25, 7)
    net.a.remove_connection("B")  # A drops both directions, B keeps its entries for A
    net.advance(0.5)
    net.pump()  # A's last STABLE (its receive side had delivered B's #1..#7) purges B's window
    assert net.b.counters()["unacked_msgs"] == 0
    net.send("A", "B", b"a-new")  # new connection from A: B resets its receive window
    net.send("B", "A", b"b8")  # B's old connection: A has no entry, asks for the first seqno
    net.pump()
    assert net.delivered["B"][-1].payload == b"a-new" and net.delivered["B"][-1].seqno == 1
    assert net.b.counters()["conns_reset"] == 1
    assert net.delivered["A"][-1].payload == b"b8" and net.delivered["A"][-1].seqno == 8
    assert net.a.counters()["send_first_seqno_sent"] == 1
    net.send_many("A", "B", 2, "a")
    net.send_many("B", "A", 2, "b")
    net.pump()
    assert net.payloads("B")[-3:] == [b"a-new", b"a1", b"a2"] and net.payloads("A")[-3:] == [b"b8", b"b1", b"b2"]


def test_overlapping_partitions_b_alone() -> None:  # scenario #9: A: {A,B}, B: {B}
    net = established(25, 7)
    net.advance(60.0)  # periodic STABLEs: both sender windows purged
    net.pump()
    assert net.a.counters()["unacked_msgs"] == net.b.counters()["unacked_msgs"] == 0
    net.b.remove_connection("A")
    net.advance(0.5)
    net.take()  # B's last STABLE is lost in the partition
    net.send("A", "B", b"a26")
    net.pump()
    assert net.b.counters()["dropped_unknown_conn"] == 1
    assert net.delivered["B"][-1].payload == b"a26" and net.b.recv_table["A"].first_seqno == 26
    net.send("B", "A", b"b-new")  # B has a new connection to A: A resets its window (at #7)
    net.pump()
    assert net.delivered["A"][-1].payload == b"b-new" and net.delivered["A"][-1].seqno == 1
    assert net.a.counters()["conns_reset"] == 1
    assert len(net.delivered["B"]) == 26 and len(net.delivered["A"]) == 8


def test_flaw_scenario_6_gap_never_repaired() -> None:
    """A reopens its connection to B and #1 is late: B acks the new #2 as a duplicate of the old #2, A purges it."""
    net = established(25)
    old_conn = net.a.send_conn_id("B")
    net.a.remove_send_connection("B")
    net.send_many("A", "B", 3, "new")
    new_conn = net.a.send_conn_id("B")
    m1, m2, m3 = net.take()
    assert [(m[2].seqno, m[2].conn_id) for m in (m1, m2, m3)] == [(1, new_conn), (2, 0), (3, 0)]

    net.deliver([m2])  # B takes #2 (conn-id 0) for part of the old connection: a duplicate below #25
    assert net.b.recv_table["A"].conn_id == old_conn and net.b.counters()["duplicates_received"] == 1
    (ack,) = net.take(of(STABLE))
    assert (ack[2].high, ack[2].conn_id) == (2, old_conn)  # the old connection's ack ...
    net.deliver([ack])  # ... which A applies to the new one: #2 (and #1) purged
    a_table = net.a.send_table["B"].table
    assert a_table.get(2) is None and 2 not in a_table and len(a_table) == 1

    net.deliver([m1])  # late #1: B creates a new window for the new connection and delivers #1
    net.deliver([m3])  # late #3: stored, not deliverable
    assert net.payloads("B", conn_id=new_conn) == [b"new1"]
    b_entry = net.b.recv_table["A"]
    assert b_entry.conn_id == new_conn
    assert 3 in b_entry.table and 2 not in b_entry.table
    assert b_entry.table.missing() == [(2, 2)]
    assert net.b.counters()["conns_reset"] == 1
    assert not net.wire

    reqs_before = net.b.counters()["xmit_reqs_sent"]
    missing_before = net.a.counters()["xmit_reqs_missing"]
    for run in range(1, 11):
        net.advance(0.5)
        reqs = net.take(of(XMIT_REQ))
        assert [(r[2].conn_id, r[2].ranges) for r in reqs] == [(new_conn, ((2, 2),))]
        net.deliver(reqs)
        assert not net.take(data())  # A has nothing to send back
        assert net.b.counters()["xmit_reqs_sent"] == reqs_before + run
        assert net.a.counters()["xmit_reqs_missing"] == missing_before + run
    assert net.payloads("B", conn_id=new_conn) == [b"new1"]
    assert net.b.counters()["missing_msgs"] == 1 and net.b.counters()["undelivered_msgs"] == 1
    assert net.a.counters()["xmit_rsps_sent"] == 0
    assert not net.b.is_idle()


def test_conn_expiry_reaps_idle_connections() -> None:
    net = established(5, conn_expiry_timeout=10.0)
    net.advance(5.0)
    assert net.a.send_table and net.b.recv_table
    net.advance(5.5)
    assert not net.a.send_table and not net.b.recv_table
    assert net.a.counters()["conns_expired"] == 1 and net.b.counters()["conns_expired"] == 1
    assert [m.high for m in net.sent(STABLE, "B")] == [5]


def test_conn_expiry_off_by_default() -> None:
    net = established(5)
    net.advance(10_000.0)
    assert net.a.send_table and net.b.recv_table


# ---------------------------------------------------------------------------------------------------- properties, stack


def test_props_validate_and_set() -> None:
    p = Unicast2Props()
    assert (p.xmit_interval, p.stable_interval, p.max_bytes, p.conn_expiry_timeout) == (0.5, 60.0, 500_000, 0.0)
    p.set("xmit_interval", "200ms")
    p.set("stable_interval", "2s")
    assert (p.xmit_interval, p.stable_interval) == (0.2, 2.0)
    for name, value in (("xmit_interval", 0), ("max_bytes", 0), ("stable_interval", -1), ("max_stable_msgs", 0)):
        with pytest.raises(ValueError, match=name):
            Unicast2Props().set(name, value)
    with pytest.raises(ValueError, match="unknown property"):
        p.set("timeout", 1)


def test_set_property_reschedules_timers() -> None:
    net = Unicast2Net()
    net.send_many("A", "B", 3)
    net.pump()
    net.b.set_property("stable_interval", "1s")
    net.advance(0.5, "B")  # reschedules
    net.advance(1.0, "B")
    assert [m.high for m in net.sent(STABLE)] == [3]


def test_over_the_wire_through_stacks() -> None:
    a = build_stack("A", "unicast2", {"unicast2": {"xmit_interval": "100ms"}})
    b = build_stack("B", "unicast2")
    assert isinstance(a.unicast, Unicast2) and a.unicast.props.xmit_interval == 0.1
    for i in range(5):
        a.send("B", f"p{i}".encode(), 0.0)
        dgrams = a.drain().datagrams
        if i != 2:  # the third datagram is lost
            for _, d in dgrams:
                b.receive(d, 0.0)
    delivered = [d.payload for d in b.drain().delivers]
    assert delivered == [b"p0", b"p1"]
    b.tick(1.0)
    for _, d in b.drain().datagrams:  # XMIT_REQ
        a.receive(d, 1.0)
    for _, d in a.drain().datagrams:
        b.receive(d, 1.0)
    assert [d.payload for d in b.drain().delivers] == [b"p2", b"p3", b"p4"]
    assert b.counters()["unicast2"]["xmit_reqs_sent"] == 1
