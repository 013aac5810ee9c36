"""The simulator's fast paths keep behaviour: record=False drops only the history events (deliveries, counters and
the event count are those of a recording run), the wire's cached datagram heads decode and reject exactly as a fresh
decode does, and `sender_poll` paces a workload as the real member's 1 ms sender loop (same messages, in order,
several per datagram)."""

from __future__ import annotations

import pytest

from node import wire
from node.protocols.base import Effects, EventlessEffects
from node.workload import POLL
from orchestration.sim.simulation import LinkFaults, Simulation

pytestmark = [pytest.mark.sim]

FAULTY = LinkFaults(delay=0.001, jitter=0.001, loss=0.2, duplicate=0.05, reorder=0.05)


def _streamed(record: bool, sender_poll: float = 0.0, link: LinkFaults = FAULTY) -> Simulation:
    sim = Simulation(
        3,
        seed=7,
        properties={"unicast3": {"xmit_interval": "100ms"}},
        link=link,
        record=record,
        sender_poll=sender_poll,
    )
    for s in sim.members:
        for d in sim.members:
            if s != d:
                sim.stream(s, d, 400, rate=5000)
    assert sim.run_until(sim.quiet, 60)
    return sim


def test_record_false_changes_nothing_but_the_history() -> None:
    with_history, without = _streamed(True), _streamed(False)
    assert without.events_processed == with_history.events_processed
    assert without.datagrams_sent == with_history.datagrams_sent
    for name in with_history.members:
        assert without.member(name).deliveries == with_history.member(name).deliveries
        assert without.member(name).stack.counters() == with_history.member(name).stack.counters()
    assert any(e["event"] == "ack" for e in with_history.history["A"])
    assert without.history["A"] == []


def test_eventless_effects_keep_sends_and_deliveries() -> None:
    out = EventlessEffects()
    msg = wire.header_class("UNICAST3", "ACK")(5, 1, 0)
    out.send("B", msg)
    out.event("ack", peer="B", seqno=5)
    assert out.sends == [("B", msg)] and out.events == []
    assert isinstance(out, Effects)


def test_cached_heads_decode_and_reject_as_fresh_ones() -> None:
    ack = wire.header_class("UNICAST3", "ACK")(5, 1, 0)
    good = wire.encode_datagram("c", "A", "B", [ack, ack])
    first, again = wire.decode_datagram(good), wire.decode_datagram(memoryview(good))  # the second hits the cache
    assert first == again == wire.Datagram("c", "A", "B", [ack, ack])
    for bad, error in (
        (good[:-1], "truncated"),  # same head, cut message
        (good + b"\0", "trailing"),
    ):
        with pytest.raises(wire.WireError, match=error):
            wire.decode_datagram(bad)
    mcast_flag_with_dest = bytes([good[0], good[1], wire.FLAG_MULTICAST]) + good[3:]
    with pytest.raises(wire.WireError, match="multicast flag"):
        wire.decode_datagram(mcast_flag_with_dest)
    with pytest.raises(wire.WireError, match="too short"):
        wire.decode_datagram(good[:2])


def test_sender_poll_sends_what_fell_due_together_in_one_datagram() -> None:
    clean = LinkFaults(delay=0.001)
    each, polled = _streamed(False, 0.0, clean), _streamed(False, POLL, clean)
    for name in each.members:
        for sender in each.members:  # the same messages from each sender, in the same order
            assert polled.delivered(name, sender) == each.delivered(name, sender)
        assert len(each.delivered(name)) == 2 * 400
    # 5,000/s with a 1 ms poll: about 5 messages per wakeup, one datagram per destination and wakeup
    assert each.datagrams_sent >= 6 * 400
    assert polled.datagrams_sent <= 6 * 400 / 3
    assert polled.events_processed < each.events_processed / 3


def test_sender_poll_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="sender_poll"):
        Simulation(2, sender_poll=-1.0)


def test_the_scenario_backend_paces_workloads_as_a_real_member(tmp_path) -> None:
    """`--backend sim` (SimCluster) sends what fell due within the real member's 1 ms sender poll together: at
    5,000/s about 5 unicasts per datagram, as node/runtime.py does, not one datagram per message."""
    from orchestration.cluster import ClusterSpec
    from orchestration.sim.cluster import SimCluster

    cluster = SimCluster(ClusterSpec(["A", "B"], backend="sim", seed=3), workdir=tmp_path)
    cluster.start()
    assert cluster.sim.sender_poll == POLL
    cluster.control("A", "send", to="B", count=1000, rate=5000)
    assert cluster.sim.run_until(lambda: len(cluster.sim.delivered("B", "A")) == 1000, 10)
    a_sent = cluster.control("A", "stats")["counters"]["stack"]["datagrams_sent"]
    assert a_sent <= 1000 / 3, f"{a_sent} datagrams for 1,000 unicasts"
    cluster.down()
