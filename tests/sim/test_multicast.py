"""NAKACK2 and MCAST in the simulator, with membership: FIFO under loss, lost last messages, large gaps, and MCAST's
window (blocking, resuming, unblocked by a view change, spurious ACKs)."""

from __future__ import annotations

import pytest

from node import wire
from orchestration.sim.simulation import MessageRule, Simulation

pytestmark = pytest.mark.sim

STACKS = ["unicast3+nakack2", "unicast3+mcast"]
XMIT = {
    "nakack2": {"xmit_interval": "100ms"},
    "mcast": {"xmit_interval": "100ms"},
    "stable": {"desired_avg_gossip": "500ms"},
}


def cluster(stack: str, n: int = 4, seed: int = 1, **props: dict) -> Simulation:
    proto = stack.split("+")[1]
    properties = {proto: {**XMIT[proto], **props.pop(proto, {})}, **props}
    if proto == "nakack2":
        properties.setdefault("stable", XMIT["stable"])
    sim = Simulation(n, seed=seed, stack=stack, properties=properties)
    assert sim.run_until(lambda: sim.views_agree() and len(sim.view("A").members) == n, 30), "no common view"
    return sim


def settle(sim: Simulation, timeout: float = 60) -> None:
    assert sim.run_until(sim.quiet, timeout), "not quiet"


def assert_all_delivered_in_order(sim: Simulation, senders: list[str]) -> None:
    for s in senders:
        sent = sim.multicast_sent(s)
        for r in sim.live():
            assert sim.delivered(r, s, kind="multicast") == sent, f"{s}->{r}"


@pytest.mark.parametrize("stack", STACKS)
def test_per_sender_fifo_with_loss_reordering_and_duplication(stack: str) -> None:
    sim = cluster(stack)
    for a in "ABCD":
        for b in "ABCD":
            if a != b:
                sim.set_link(a, b, loss=0.2, duplicate=0.1, reorder=0.1, jitter=0.003)
    for m in "ABCD":
        sim.multicast_stream(m, 300, rate=1000)
    sim.run(1.0)
    sim.heal()
    settle(sim)
    assert_all_delivered_in_order(sim, list("ABCD"))


@pytest.mark.parametrize("stack", STACKS)
def test_last_multicast_dropped(stack: str) -> None:
    sim = cluster(stack)
    proto = stack.split("+")[1].upper()
    rule = sim.add_rule(MessageRule(proto, "MSG", {"seqno": 50}, src="A", dst="B", count=1))
    for _ in range(50):
        sim.multicast("A")
    settle(sim)
    assert rule.matched == 1
    assert_all_delivered_in_order(sim, ["A"])


def test_last_multicast_and_its_highest_seqno_dropped() -> None:
    sim = cluster("unicast3+nakack2")
    msg = sim.add_rule(MessageRule("NAKACK2", "MSG", {"seqno": 50}, src="A", dst="B", count=1))
    hs = sim.add_rule(MessageRule("NAKACK2", "HIGHEST_SEQNO", src="A", dst="B"))  # every one of them
    for _ in range(50):
        sim.multicast("A")
    # No member can see this loss coming (B does not know #50 exists, and every HIGHEST_SEQNO to B is lost):
    # STABLE's digests (highest received, gossiped every 500 ms) reveal it; 5 s is ten gossip rounds.
    sim.run(5.0)
    assert msg.matched == 1 and hs.matched >= 1
    assert_all_delivered_in_order(sim, ["A"])


@pytest.mark.parametrize("stack", STACKS)
def test_every_other_multicast_dropped(stack: str) -> None:
    sim = cluster(stack)
    proto = stack.split("+")[1].upper()
    dropped: set[int] = set()

    def even_first_time(seqno: int) -> bool:
        if seqno % 2 or seqno in dropped:
            return False
        dropped.add(seqno)
        return True

    sim.add_rule(MessageRule(proto, "MSG", {"seqno": even_first_time}, src="A", dst="C"))
    reqs = sim.add_rule(MessageRule(proto, "XMIT_REQ", src="C", action="pass"))
    for _ in range(400):
        sim.multicast("A")
    settle(sim)
    assert len(dropped) == 200
    assert max(len(r.ranges) for r in reqs.seen) >= 50
    assert_all_delivered_in_order(sim, ["A"])


def test_mcast_sender_blocks_on_a_full_window_and_resumes_on_acks() -> None:
    sim = cluster("unicast3+mcast", 3, mcast={"capacity": 16})
    a = sim.member("A").stack.multicast_protocol
    sim.cut("C", "A")  # C receives A's multicasts but its ACKs do not reach A
    for _ in range(40):
        sim.multicast("A")
    sim.run(0.5)
    assert a.blocked and a.pending() == 40 - 16
    sim.heal()
    settle(sim)
    assert not a.blocked
    assert_all_delivered_in_order(sim, ["A"])


def test_mcast_blocked_sender_is_released_by_a_view_change_and_ignores_foreign_acks() -> None:
    sim = cluster(
        "unicast3+mcast",
        3,
        mcast={"capacity": 16},
        fd={"interval": "0.2s", "timeout": "1s", "timeout_check_interval": "0.2s"},
    )
    a = sim.member("A").stack
    sim.split([["A", "B"], ["C"]])  # C hears nothing and is heard by nobody: it will be excluded
    for _ in range(40):
        sim.multicast("A")
    sim.run(0.3)
    assert a.multicast_protocol.blocked
    # an ACK from a non-member (it claims everything was delivered) neither unblocks nor corrupts anything
    spoof = wire.encode_datagram(sim.cluster, "Z", a.local, [wire.header_class("MCAST", "ACK")(10_000)])
    a.receive(spoof, sim.now)
    assert a.multicast_protocol.blocked and a.multicast_protocol.c["acks_from_non_members"] >= 1
    assert sim.run_until(lambda: "C" not in sim.view("A").members, 10), "C was not excluded"
    assert sim.run_until(lambda: not a.multicast_protocol.blocked, 5), "the view change did not unblock A"
    settle(sim)
    for r in ("A", "B"):
        assert sim.delivered(r, "A", kind="multicast") == sim.multicast_sent("A")


def test_mcast_memory_is_bounded_by_capacity() -> None:
    sim = cluster("unicast3+mcast", 3, mcast={"capacity": 64})
    for m in "ABC":
        sim.multicast_stream(m, 3000, rate=20_000)
    peak = 0
    for _ in range(100):
        sim.run(0.01)
        peak = max(peak, max(len(w) for w in [sim.member(n).stack.multicast_protocol.send_window for n in "ABC"]))
    settle(sim)
    assert peak <= 64
    assert_all_delivered_in_order(sim, list("ABC"))


@pytest.mark.parametrize(("unbounded_without_xmit", "stuck"), [(False, True), (True, False)])
def test_the_joiner_of_the_design_note(unbounded_without_xmit: bool, stuck: bool) -> None:
    """design/NAKACK2-no-retransmission.txt: xmit_interval <= 0 (TCP), C joins {A, B}; B multicasts 70 messages
    after the digest was taken and before C becomes a server. A bounded (50) become-server queue drops the oldest
    20 and C is stuck behind the gap for good; the fix (unbounded queue without retransmission) delivers all."""
    props = {
        "nakack2": {"xmit_interval": 0, "become_server_queue_unbounded_without_xmit": unbounded_without_xmit},
        "stable": {"desired_avg_gossip": 0},
    }
    sim = Simulation(["A", "B"], seed=2, stack="unicast3+nakack2", properties=props)
    assert sim.run_until(lambda: sim.views_agree() and len(sim.view("A").members) == 2, 30)
    for _ in range(100):
        sim.multicast("B")  # B's highest seqno is 100 when C joins
    sim.run(0.1)
    join_rsp = sim.add_rule(MessageRule("GMS", "JOIN_RSP", dst="C", action="hold"))
    sim.start_member("C")
    assert sim.run_until(lambda: bool(join_rsp.held), 30), "C's join response never came"
    sim.rules.remove(join_rsp)
    for _ in range(70):
        sim.multicast("B")  # 101-170: C receives them before it is a member
    sim.run(0.1)
    sim.release(join_rsp)
    assert sim.run_until(lambda: sim.views_agree() and len(sim.view("A").members) == 3, 30)
    for _ in range(30):
        sim.multicast("B")  # 171-200, after C joined
    sim.run(2.0)
    got = [int(m.rsplit("#", 1)[1]) for m in sim.delivered("C", "B", kind="multicast")]
    window = sim.member("C").stack.multicast_protocol.windows[sim.member("B").address]
    if stuck:
        # the digest said 100; the queue kept 121-170 and dropped 101-120; nothing past the gap is delivered
        assert got == []
        assert (window.table.hd, window.table.hr, window.table.missing()) == (100, 200, [(101, 120)])
        assert len(window.table) == 80  # 121-200 wait forever (and the window only grows)
        assert sim.protocol_counters("C", "nakack2")["become_server_dropped"] == 20
    else:
        assert got == list(range(101, 201))
        assert window.table.num_missing() == 0
