"""The simulator itself: determinism, link faults, exact message rules, crash/restart, history output."""

from __future__ import annotations

import json

import pytest

from orchestration.sim.simulation import LinkFaults, MessageRule, Simulation
from tests.sim.util import FAST_U3, assert_exactly_once_in_order, burst, settle

pytestmark = pytest.mark.sim


def _chaotic_run(seed: int) -> Simulation:
    sim = Simulation(3, seed=seed, properties=FAST_U3, link=LinkFaults(delay=0.002, jitter=0.004, loss=0.1))
    sim.set_link("A", "B", duplicate=0.1, reorder=0.1)
    for s in "ABC":
        for d in "ABC":
            if s != d:
                sim.stream(s, d, 300, rate=500)
    settle(sim)
    sim.finish()
    return sim


def test_same_seed_same_run_event_for_event() -> None:
    a, b, c = _chaotic_run(11), _chaotic_run(11), _chaotic_run(12)
    assert a.history == b.history
    assert a.events_processed == b.events_processed and a.now == b.now
    assert a.history != c.history


def test_link_loss_rate_is_the_configured_probability() -> None:
    # >= 5,000 DATA messages on a link with 30% loss: the fraction received is within 3 points of 70%.
    sim = Simulation(2, seed=5)
    sim.set_link("A", "B", loss=0.3)
    for i in range(5000):
        sim.at(i * 0.01, sim.send, "A", "B")
    settle(sim)
    assert_exactly_once_in_order(sim, "A", "B")
    sender = sim.counters("A")
    transmitted = sender["msgs_sent"] + sender["xmits"]  # first sends and retransmitted DATA messages
    received = sim.counters("B")["msgs_received"]
    assert transmitted >= 5000
    assert 0.67 <= received / transmitted <= 0.73


def test_one_way_cut_blocks_one_direction_only() -> None:
    sim = Simulation(2, seed=1, properties=FAST_U3)
    sim.cut("A", "B")
    burst(sim, "A", "B", 5)
    burst(sim, "B", "A", 5)
    sim.run(2.0)
    assert sim.delivered("B") == []
    assert sim.delivered("A") == sim.sent("B", "A")
    sim.heal()
    settle(sim)
    assert_exactly_once_in_order(sim, "A", "B")


def test_rule_drops_exactly_the_first_matching_message() -> None:
    sim = Simulation(2, seed=1, properties=FAST_U3)
    acks = sim.add_rule(MessageRule("UNICAST3", "ACK", src="B", dst="A", action="pass"))
    rule = sim.add_rule(MessageRule("UNICAST3", "DATA", {"seqno": 3}, src="A", dst="B", count=1))
    burst(sim, "A", "B", 5)
    settle(sim)
    assert rule.matched == 1  # the retransmission of #3 was not dropped
    assert_exactly_once_in_order(sim, "A", "B")
    assert sim.counters("B")["xmit_reqs_sent"] >= 1 and acks.matched >= 1


def test_hold_and_release() -> None:
    sim = Simulation(2, seed=1, properties=FAST_U3)
    rule = sim.add_rule(MessageRule("UNICAST3", "DATA", {"seqno": 1}, src="A", dst="B", action="hold", count=1))
    burst(sim, "A", "B", 1)
    sim.run(0.05)
    assert sim.delivered("B") == [] and len(rule.held) == 1
    assert sim.release(rule) == 1
    sim.run(0.05)
    assert sim.delivered("B") == ["A>B#1"]


def test_rule_with_unknown_header_or_field_names_the_valid_ones() -> None:
    with pytest.raises(KeyError, match=r"UNICAST3\.ACK"):
        MessageRule("UNICAST3", "AKC")
    with pytest.raises(ValueError, match="conn_id, seqno, timestamp"):
        MessageRule("UNICAST3", "ACK", {"seq": 1})
    with pytest.raises(ValueError, match="drop"):
        MessageRule("UNICAST3", "ACK", action="explode")
    with pytest.raises(ValueError, match="probability"):
        Simulation(2).set_link("A", "B", loss=1.5)


def test_crash_and_restart_is_a_new_incarnation() -> None:
    props = {"unicast3": {**FAST_U3["unicast3"], "max_retransmit_time": "3s"}}
    sim = Simulation(2, seed=3, properties=props)
    burst(sim, "A", "B", 10)
    settle(sim)
    sim.crash("B")
    burst(sim, "A", "B", 5)  # to the dead incarnation: never acked
    sim.run(1.0)
    b2 = sim.restart("B")
    assert b2.address == "B/2" and b2.incarnation == 2
    new = burst(sim, "A", "B", 10)
    settle(sim, timeout=30)
    assert sim.delivered("B") == new  # the new incarnation gets only what was sent to it, in order
    a = sim.protocol("A")
    assert "B" not in a.send_table  # the connection to the dead incarnation was given up (max_retransmit_time)
    assert a.c["conns_removed_unacked"] == 1
    assert sim.member("B").stack.counters()["stack"]["wrong_dest"] > 0  # its retransmissions were refused


def test_history_is_written_in_the_scenario_format(tmp_path) -> None:
    sim = Simulation(2, seed=1, properties=FAST_U3)
    burst(sim, "A", "B", 3)
    settle(sim)
    sim.finish()
    out = sim.write_run(tmp_path)
    events = [json.loads(line) for line in (out / "history" / "B.jsonl").read_text().splitlines()]
    delivers = [e for e in events if e["event"] == "deliver"]
    assert [d["msg_id"] for d in delivers] == ["A>B#1", "A>B#2", "A>B#3"]
    assert all(
        {"t", "member", "event", "kind", "sender", "dest", "conn_id", "seqno", "msg_id", "size"} <= d.keys()
        for d in delivers
    )
    assert all(d["sender_address"] == "A" for d in delivers)
    assert events[0] == {
        "t": 0,
        "member": "B",
        "incarnation": 1,
        "event": "start",
        "address": "B",
        "stack": "unicast3",
        "transport": "sim",
    }
    assert events[-1]["event"] == "stop"
    sends = [json.loads(line) for line in (out / "history" / "A.jsonl").read_text().splitlines()]
    assert [s["seqno"] for s in sends if s["event"] == "send"] == [1, 2, 3]
    assert all(e["t"] >= 0 for e in events)
    assert (out / "faults.jsonl").exists()
