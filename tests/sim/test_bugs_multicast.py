"""The multicast entries of the known-bug catalogue (scenarios/bugs/nakack2-*.toml, mcast-*.toml) at the protocol
level, in the simulator: each flawed switch really misbehaves, its fix recovers, and nothing is lost either way
(what the flawed variant delivers is a prefix of what was sent, in order)."""

from __future__ import annotations

from typing import Any

import pytest

from orchestration.sim.simulation import MessageRule, Simulation

pytestmark = pytest.mark.sim

STABLE_EVERY = 3.0  # seconds between stability rounds (STABLE.desired_avg_gossip)
FAST_MEMBERSHIP: dict[str, dict[str, Any]] = {
    "fd": {"interval": "0.3s", "timeout": "1s", "timeout_check_interval": "0.3s"},
    "gms": {"join_timeout": "2s", "discovery_timeout": "1s"},
    # reports expire before failure detection removes a member: its last INFO does not start a merge with it
    "merge": {"min_interval": "0.25s", "max_interval": "0.5s", "check_interval": "0.8s"},
}


def group(stack: str, n: int, properties: dict[str, dict[str, Any]], seed: int = 1) -> Simulation:
    sim = Simulation(n, seed=seed, stack=stack, properties=properties)
    assert sim.run_until(lambda: sim.views_agree() and len(sim.view("A").members) == n, 30), "no common view"
    return sim


def seqnos(sim: Simulation, receiver: str, sender: str) -> list[int]:
    """The multicast seqnos (from the msg_ids "B>*#17") the receiver's current incarnation delivered from sender."""
    return [int(str(m).rsplit("#", 1)[1]) for m in sim.delivered(receiver, sender, kind="multicast")]


def assert_prefix_in_order(sim: Simulation, receiver: str, sender: str) -> None:
    got = sim.delivered(receiver, sender, kind="multicast")
    assert got == sim.multicast_sent(sender)[: len(got)], f"{sender}->{receiver}: not a prefix of what was sent"


def seconds_until_all_delivered(sim: Simulation, receiver: str, sender: str, timeout: float) -> float | None:
    """Virtual seconds until the receiver delivered everything the sender multicast (None: not within timeout)."""
    start = sim.now

    def done() -> bool:
        return sim.delivered(receiver, sender, kind="multicast") == sim.multicast_sent(sender)

    return sim.now - start if sim.run_until(done, timeout, check_every=0.01) else None


# --- NAKACK2: the last multicast lost (JGRP-1904) and its HIGHEST_SEQNO lost too (JGRP-2167) ---------------------


def nakack2_group(**nakack2: Any) -> Simulation:
    sim = group(
        "unicast3+nakack2",
        3,
        {"nakack2": {"xmit_interval": "200ms", **nakack2}, "stable": {"desired_avg_gossip": f"{STABLE_EVERY}s"}},
    )
    for m in "ABC":  # setting the interval gossips at once: the next stability round is STABLE_EVERY away
        sim.set_property(m, "stable", "desired_avg_gossip", f"{STABLE_EVERY}s")
    sim.run(0.1)
    return sim


@pytest.mark.parametrize("resend_last_seqno", [False, True])
def test_a_lost_last_multicast_waits_for_the_next_stable_round_without_resend_last_seqno(
    resend_last_seqno: bool,
) -> None:
    sim = nakack2_group(resend_last_seqno=resend_last_seqno)
    lost = sim.add_rule(MessageRule("NAKACK2", "MSG", {"seqno": 20}, src="A", dst="B", count=1))
    for _ in range(20):
        sim.multicast("A")
    took = seconds_until_all_delivered(sim, "B", "A", 2 * STABLE_EVERY)
    assert lost.matched == 1
    assert took is not None, f"B never got #20: {seqnos(sim, 'B', 'A')[-3:]}"  # repaired either way: nothing lost
    announced = sim.protocol_counters("A", "nakack2")["highest_seqno_sent"]
    if resend_last_seqno:
        assert announced >= 1 and took < 1.0, (announced, took)
    else:  # B did not know #20 existed until STABLE's digest said so
        assert announced == 0 and took >= STABLE_EVERY - 0.5, took
    assert seqnos(sim, "B", "A") == list(range(1, 21))


@pytest.mark.parametrize("max_times", [1, 3])
def test_a_lost_last_multicast_and_its_lost_announcement_wait_for_stable_unless_announced_again(
    max_times: int,
) -> None:
    sim = nakack2_group(resend_last_seqno_max_times=max_times)
    lost = sim.add_rule(MessageRule("NAKACK2", "MSG", {"seqno": 20}, src="A", dst="B", count=1))
    lost_hs = sim.add_rule(MessageRule("NAKACK2", "HIGHEST_SEQNO", {"seqno": 20}, src="A", dst="B", count=1))
    for _ in range(20):
        sim.multicast("A")
    took = seconds_until_all_delivered(sim, "B", "A", 2 * STABLE_EVERY)
    assert lost.matched == 1 and lost_hs.matched == 1
    assert took is not None, "B never got #20"
    hs_received = sim.protocol_counters("B", "nakack2")["highest_seqno_received"]
    if max_times > 1:  # the second HIGHEST_SEQNO(20) reaches B
        assert hs_received >= 1 and took < 1.5, (hs_received, took)
    else:  # the only announcement was lost: STABLE finds the gap
        assert hs_received == 0 and took >= STABLE_EVERY - 0.5, took
    assert seqnos(sim, "B", "A") == list(range(1, 21))


# --- NAKACK2 without retransmission: a joiner's bounded become-server queue (JGRP-2675) ----------------------------


@pytest.mark.parametrize("unbounded_without_xmit", [False, True])
def test_a_new_incarnation_joining_during_a_stream_without_retransmission(unbounded_without_xmit: bool) -> None:
    """C is killed and restarted while B streams; A's JOIN_RSP (with its digest) reaches C/2 half a second late, so
    ~150 of B's multicasts above the digest wait in C/2's become-server queue. Bounded (50), it drops the oldest:
    C/2 is stuck behind that gap for good (no retransmission). Unbounded (the fix), C/2 delivers all of them."""
    props = {
        "nakack2": {
            "xmit_interval": 0,
            "become_server_queue_size": 50,
            "become_server_queue_unbounded_without_xmit": unbounded_without_xmit,
        },
        **FAST_MEMBERSHIP,
    }
    sim = group("unicast3+nakack2", 3, props, seed=3)
    stream = sim.multicast_stream("B", 900, rate=300)
    sim.run(1.0)
    sim.crash("C")
    sim.run(0.5)
    sim.set_link("A", "C", delay=0.5, duration=3.0)
    new_c = sim.restart("C")
    assert sim.run_until(lambda: new_c.address in sim.view("A").members and sim.views_agree(), 10), "C/2 never joined"
    assert sim.run_until(lambda: bool(stream["done"]), 10)
    sim.run(2.0)
    nak = new_c.stack.multicast_protocol
    window = nak.windows[sim.member("B").address]
    got = seqnos(sim, "C", "B")
    dropped = sim.protocol_counters("C", "nakack2")["become_server_dropped"]
    if unbounded_without_xmit:
        assert dropped == 0 and window.table.num_missing() == 0
        assert got and got == list(range(got[0], 901)), f"C/2 delivered {got[:3]}..{got[-3:]}"
        assert got[0] == window.table.hd - len(got) + 1  # from right after the digest on
    else:
        assert dropped > 0
        assert got == [] and window.table.num_missing() > 0
        hd = window.table.hd
        sim.run(5.0)  # no retransmission, no repair: the window only grows
        assert window.table.hd == hd and seqnos(sim, "C", "B") == []
        assert len(window.table) > 0 and not sim.quiet()
    assert_prefix_in_order(sim, "A", "B")


# --- MCAST: a full send window while two members stop acking and are removed (JGRP-2853/2875) ----------------------


@pytest.mark.parametrize("purge_on_view_change", [False, True])
def test_mcast_sender_blocked_by_two_members_that_stop_acking_and_are_removed(purge_on_view_change: bool) -> None:
    props = {"mcast": {"capacity": 32, "xmit_interval": "100ms", "purge_on_view_change": purge_on_view_change}}
    sim = group("unicast3+mcast", 4, {**props, **FAST_MEMBERSHIP})
    a = sim.member("A").stack.multicast_protocol
    stream = sim.multicast_stream("A", 600, rate=200)
    sim.run(0.5)
    sim.pause("D")
    assert sim.run_until(lambda: a.blocked, 2), "D's missing ACKs did not fill A's window"
    assert sim.run_until(lambda: "D" not in sim.view_names("A"), 5), "D was not removed"
    if purge_on_view_change:
        assert sim.run_until(lambda: not a.blocked, 1), "removing D did not release A"
    sim.pause("C")
    assert sim.run_until(lambda: "C" not in sim.view_names("A"), 5), "C was not removed"
    assert list(a.acks) == [sim.member("B").address]  # the ack map follows the view either way
    if purge_on_view_change:
        assert sim.run_until(lambda: bool(stream["done"]) and not a.blocked, 10), "A did not finish its stream"
        assert seconds_until_all_delivered(sim, "B", "A", 5) is not None, "B did not get A's stream"
    else:  # B acked all A sent and sends no more ACKs: nothing frees A's window
        sim.run(5.0)
        assert a.blocked and a.pending() > 0
        assert a.send_window.low < a.acks[sim.member("B").address] == a.send_window.hr
        assert len(sim.delivered("B", "A", kind="multicast")) < len(sim.multicast_sent("A"))
    assert_prefix_in_order(sim, "B", "A")
