"""UNICAST3 connection management and loss cases, after JGroups' own UNICAST connection tests, plus the two
receiver-sync problems of design/UNICAST3-sync.txt (JGRP-1873 stale ACKs, JGRP-1874 SEND_FIRST_SEQNO storms)."""

from __future__ import annotations

import pytest

from orchestration.sim.simulation import LinkFaults, MessageRule, Simulation
from tests.sim.util import FAST_U3, assert_exactly_once_in_order, burst, settle

pytestmark = pytest.mark.sim


def u3(seed: int = 1, link: LinkFaults | None = None, members: int = 2, **props: object) -> Simulation:
    return Simulation(members, seed=seed, properties={"unicast3": {**FAST_U3["unicast3"], **props}}, link=link)


def test_graceful_close_flushes_then_closes_and_a_send_reopens() -> None:
    sim = u3(conn_close_timeout="2s", conn_expiry_timeout="0s")
    lost = sim.add_rule(MessageRule("UNICAST3", "DATA", {"seqno": 3}, src="A", dst="B", count=1))
    burst(sim, "A", "B", 3)
    a = sim.protocol("A")
    sim.close_connection("A", "B")
    conn = a.send_table["B"].conn_id
    settle(sim)  # the CLOSING entry still retransmits: #3 arrives
    assert lost.matched == 1 and sim.delivered("B") == sim.sent("A", "B")
    # a send on a CLOSING connection reopens it with the same conn-id
    sim.close_connection("A", "B")
    sim.send("A", "B")
    assert a.send_table["B"].state.value == "open" and a.send_table["B"].conn_id == conn
    settle(sim)
    # closed and idle: after conn_close_timeout A removes it and sends CLOSE; B drops its receiver entry
    sim.close_connection("A", "B")
    assert sim.run_until(lambda: "B" not in a.send_table and "A" not in sim.protocol("B").recv_table, 5.0)
    assert a.c["close_sent"] == 1 and sim.protocol("B").c["close_received"] == 1
    burst(sim, "A", "B", 2)  # a new connection, new conn-id
    settle(sim)
    assert a.send_table["B"].conn_id != conn
    assert_exactly_once_in_order(sim, "A", "B")


def test_a_closing_entry_outlives_conn_close_timeout_until_its_unacked_messages_are_acked() -> None:
    """CLOSING flushes: an entry whose messages are still unacked when conn_close_timeout runs out stays (and keeps
    resending) until they are acked, then goes with its CLOSE (explore's unicast3-closing-entry-removed-*)."""
    sim = u3(conn_close_timeout="0.5s", conn_expiry_timeout="0s")
    cut = sim.add_rule(MessageRule("UNICAST3", "DATA", {"seqno": 3}, src="A", dst="B"))  # every copy, for now
    burst(sim, "A", "B", 3)
    a = sim.protocol("A")
    sim.close_connection("A", "B")
    sim.run(2.0)  # four conn_close_timeouts, #3 still unacked
    assert "B" in a.send_table and a.send_table["B"].state.value == "closing" and a.c["close_sent"] == 0
    sim.rules.remove(cut)  # the drop ends
    assert sim.run_until(lambda: "B" not in a.send_table, 5.0)
    assert a.c["close_sent"] == 1 and sim.delivered("B") == sim.sent("A", "B")


def test_idle_connections_expire_and_are_removed() -> None:
    sim = u3(conn_expiry_timeout="3s", conn_close_timeout="2s")
    burst(sim, "A", "B", 3)
    settle(sim)
    a, b = sim.protocol("A"), sim.protocol("B")
    assert sim.run_until(lambda: not a.send_table and not b.recv_table, 10.0)
    assert a.c["conns_expired"] == 1 and b.c["conns_expired"] == 1 and a.c["close_sent"] == 1
    burst(sim, "A", "B", 3)
    settle(sim)
    assert_exactly_once_in_order(sim, "A", "B")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_concurrent_resets_with_different_conn_ids(seed: int) -> None:
    sim = u3(seed=seed, link=LinkFaults(delay=0.001, jitter=0.003))
    conn_ids = set()
    for _round in range(5):
        for me, peer in (("A", "B"), ("B", "A")):
            sim.protocol(me).remove_connection(peer)
        # both reopen at the same instant, with traffic in flight both ways
        burst(sim, "A", "B", 20)
        burst(sim, "B", "A", 20)
        conn_ids.add(sim.protocol("A").send_table["B"].conn_id)
        conn_ids.add(sim.protocol("B").send_table["A"].conn_id)
        settle(sim)
    assert len(conn_ids) == 10
    assert_exactly_once_in_order(sim, "A", "B")
    assert_exactly_once_in_order(sim, "B", "A")


def test_sending_to_a_non_existent_member_does_not_cause_endless_traffic() -> None:
    sim = u3(max_retransmit_time="5s")
    a = sim.member("A")
    for _ in range(5):
        a.stack.send("Z", b"to nobody\0", sim.now)
    sim._flush(a)
    sim.run(6.0)
    assert "Z" not in a.stack.unicast.send_table
    assert a.stack.unicast.c["conns_removed_unacked"] == 1
    sent = a.stack.c["datagrams_sent"]
    sim.run(30.0)
    assert a.stack.c["datagrams_sent"] == sent  # silence afterwards


def test_first_message_dropped() -> None:
    sim = u3()
    rule = sim.add_rule(MessageRule("UNICAST3", "DATA", {"seqno": 1}, src="A", dst="B", count=1))
    burst(sim, "A", "B", 10)
    settle(sim)
    assert rule.matched == 1
    assert_exactly_once_in_order(sim, "A", "B")
    assert sim.protocol("B").c["send_first_seqno_sent"] == 1  # #2.. arrived on an unknown connection


def test_last_message_dropped() -> None:
    sim = u3()
    rule = sim.add_rule(MessageRule("UNICAST3", "DATA", {"seqno": 10}, src="A", dst="B", count=1))
    burst(sim, "A", "B", 10)
    settle(sim)
    assert rule.matched == 1
    assert_exactly_once_in_order(sim, "A", "B")
    assert sim.protocol("A").c["xmits"] >= 1  # the sender resent its highest-sent message


def test_dropped_ack_causes_no_endless_retransmission() -> None:
    sim = u3()
    acks = sim.add_rule(MessageRule("UNICAST3", "ACK", src="B", dst="A", count=3))
    burst(sim, "A", "B", 10)
    settle(sim)
    assert acks.matched == 3
    assert_exactly_once_in_order(sim, "A", "B")
    a = sim.protocol("A")
    assert a.c["xmits"] >= 1 and sim.protocol("B").c["duplicates_received"] >= 1
    xmits = a.c["xmits"]
    sim.run(30.0)
    assert a.c["xmits"] == xmits


def test_every_other_message_dropped_gives_a_large_xmit_req() -> None:
    sim = u3()
    dropped: set[int] = set()

    def even_and_first_time(seqno: int) -> bool:
        if seqno % 2 or seqno in dropped:
            return False
        dropped.add(seqno)
        return True

    sim.add_rule(MessageRule("UNICAST3", "DATA", {"seqno": even_and_first_time}, src="A", dst="B"))
    reqs = sim.add_rule(MessageRule("UNICAST3", "XMIT_REQ", src="B", dst="A", action="pass"))
    burst(sim, "A", "B", 2000)
    settle(sim)
    assert len(dropped) == 1000
    assert_exactly_once_in_order(sim, "A", "B")
    assert max(len(r.ranges) for r in reqs.seen) >= 999  # one request names (almost) every gap


def _stale_ack_case(sync_timestamps: bool) -> Simulation:
    """JGRP-1873: B acks #5, the ACK is held in the network; B drops its receiver window; A sends #6-#10, B asks
    for the first seqno and A restarts it at #1 (and resends #10); then the old ACK(5) arrives at A, before B's
    request for #2-#9 (held in the network too, or A would repair the gap first)."""
    sim = u3(sync_timestamps=sync_timestamps)
    old_ack = sim.add_rule(MessageRule("UNICAST3", "ACK", src="B", dst="A", action="hold"))
    burst(sim, "A", "B", 5)
    sim.run(0.05)
    assert old_ack.held and old_ack.held[-1][2].seqno == 5
    sim.rules.remove(old_ack)
    b = sim.protocol("B")
    assert b.remove_receive_connection("A")
    xmit_reqs = sim.add_rule(MessageRule("UNICAST3", "XMIT_REQ", src="B", dst="A", action="hold"))
    burst(sim, "A", "B", 5)  # #6-#10: dropped by B (unknown connection), which asks for the first seqno
    a = sim.protocol("A")
    assert sim.run_until(lambda: a.c["send_first_seqno_received"] >= 1 and b.c["acks_sent"] >= 2, 5.0)
    assert sim.release(old_ack) >= 1  # the delayed ACK(5) of before arrives now
    sim.run(0.01)
    sim.rules.remove(xmit_reqs)
    assert sim.release(xmit_reqs) >= 1
    return sim


def test_delayed_stale_ack_with_timestamps_does_not_purge_unseen_messages() -> None:
    sim = _stale_ack_case(sync_timestamps=True)
    settle(sim, timeout=30)
    delivered = sim.delivered("B", "A")
    new = sim.sent("A", "B")[5:]
    assert [m for m in delivered if m in new] == new  # #6-#10 exactly once, in order
    assert sim.protocol("A").c["stale_acks_dropped"] >= 1


def test_delayed_stale_ack_without_timestamps_reproduces_jgrp_1873() -> None:
    sim = _stale_ack_case(sync_timestamps=False)
    a, b = sim.protocol("A"), sim.protocol("B")
    sim.run(2.0)
    reqs = b.c["xmit_reqs_sent"]
    sim.run(10.0)
    new = sim.sent("A", "B")[5:]
    assert not set(new) & set(sim.delivered("B", "A"))  # #6-#10 are never delivered
    window = b.recv_table["A"].table
    assert window.missing() and window.missing()[0][0] == 2  # B is stuck behind a gap starting at #2...
    assert a.send_table["B"].table.get(2) is None  # ...that A purged on the stale ACK
    assert b.c["xmit_reqs_sent"] - reqs >= 50  # and asks for it endlessly
    assert a.c["stale_acks_dropped"] == 0


@pytest.mark.parametrize(("sync_min_interval", "bound"), [("2s", (4, 6)), ("0s", (19, 21))])
def test_send_first_seqno_traffic_is_bounded(sync_min_interval: str, bound: tuple[int, int]) -> None:
    """JGRP-1874: 10 s of traffic on a connection the receiver does not know, while the receiver's SEND_FIRST_SEQNOs
    cannot reach the sender: with sync_min_interval=2s at most one every 2 s goes out (4-6 in 10 s, depending on
    where the retransmit runs fall); without it one per retransmit run (xmit_interval 500 ms: 19-21)."""
    sim = u3(xmit_interval="500ms", sync_min_interval=sync_min_interval)
    burst(sim, "A", "B", 3)
    settle(sim)
    b = sim.protocol("B")
    b.remove_receive_connection("A")
    sim.cut("B", "A")
    sim.stream("A", "B", 2000, rate=200)
    sim.run(10.0)
    lo, hi = bound
    assert b.c["dropped_unknown_conn"] >= 1900
    assert lo <= b.c["send_first_seqno_sent"] <= hi
    sim.heal()
    settle(sim, timeout=30)
    new = sim.sent("A", "B")[3:]
    assert [m for m in sim.delivered("B", "A") if m in new] == new


def test_acks_are_batched_and_rate_limited() -> None:
    sim = u3(ack_threshold=100, min_time_between_acks="50ms", xmit_interval="500ms")
    sim.stream("A", "B", 1000, rate=1000)  # 1 s of one message per ms
    settle(sim)
    acks = sim.protocol("B").c["acks_sent"]
    assert 15 <= acks <= 25  # about one per 50 ms, not one per message
    sim2 = u3(ack_threshold=1)
    sim2.stream("A", "B", 1000, rate=1000)
    settle(sim2)
    assert sim2.protocol("B").c["acks_sent"] >= 1000  # ack_threshold=1: every message acked at once
    assert_exactly_once_in_order(sim, "A", "B")
    assert_exactly_once_in_order(sim2, "A", "B")


def test_sender_and_receiver_memory_is_bounded_by_the_window() -> None:
    """50,000 messages at 20,000/s with 5% loss: a gap holds the sender window until the receiver's XMIT_REQ (two
    retransmit runs of 100 ms) fills it, so the window is about 0.3 s of traffic (6,000), never the 50,000 sent."""
    sim = u3(link=LinkFaults(delay=0.001, loss=0.05))
    sim.stream("A", "B", 50_000, rate=20_000)
    peak_items = peak_slots = 0
    a = sim.protocol("A")
    while sim.now < 3.0:
        sim.run(0.02)
        if "B" in a.send_table:
            table = a.send_table["B"].table
            peak_items, peak_slots = max(peak_items, len(table)), max(peak_slots, table.capacity())
    settle(sim)
    assert_exactly_once_in_order(sim, "A", "B")
    assert 1_000 < peak_items < 10_000
    assert peak_slots < 2 * 10_000
    assert len(a.send_table["B"].table) == 0 and len(sim.protocol("B").recv_table["A"].table) == 0


def test_malformed_seqno_far_ahead_is_dropped_without_allocating() -> None:
    sim = u3()
    burst(sim, "A", "B", 2)
    settle(sim)
    b = sim.member("B")
    conn = sim.protocol("A").send_table["B"].conn_id
    from node import wire

    data = wire.encode_datagram("sim", "A", "B", [wire.header_class("UNICAST3", "DATA")(1 << 62, conn, False, b"")])
    b.stack.receive(data, sim.now)
    assert b.stack.unicast.c["dropped_out_of_window"] == 1
    assert b.stack.unicast.recv_table["A"].table.capacity() < 1000
