"""The membership entries of the known-bug catalogue (scenarios/bugs/gms-*.toml, merge-*.toml) at the protocol level,
in the simulator: each flawed switch really misbehaves, its fix recovers, and nothing is lost either way.

- gms.view_xmit_interval = 0 (gms-leave-view-lost): the leaving coordinator's VIEW to its successor is sent once; if
  it is lost the successor keeps the old view (until failure detection, slower than the test, excludes the member
  that left). With resends it installs the view one view_xmit_interval late.
- gms.reset_subgroup_windows = false (merge-overlapping, JGRP-940): after overlapping views ({A,B,C} at A, {B,C} at B
  and C) A missed multicasts of B that B and C purged; the merge view keeps A's window for B with its gap, and A
  never delivers B's later multicasts. With the fix A restarts B's window at the merge digest.
- gms.merge_ask_listed_members = false (merge-coordinator-left-out, JGRP-1876): the merge leader A never hears C's
  INFO, learns of {C,D} from D only, and merges {A,B} with D: C is left out for good. With the fix A asks C too (it
  is listed in D's answer) and the merge view holds all four.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from node.protocols.gms import GmsProps, State
from orchestration.sim.simulation import MessageRule, Simulation
from tests.sim.test_membership import (
    CONVERGENCE_BOUND,
    FD_TIMEOUT,
    JOIN_BOUND,
    PROPS,
    VIEW_XMIT,
    check_multicast,
    converge,
    views_of,
)

pytestmark = pytest.mark.sim


def group(n: int, seed: int = 1, stack: str = "unicast3+nakack2", **overrides: dict[str, Any]) -> Simulation:
    """A started group with test_membership's fast properties, some of them overridden per protocol."""
    props = copy.deepcopy(PROPS)
    for proto, values in overrides.items():
        props[proto] = {**props.get(proto, {}), **values}
    sim = Simulation(n, seed=seed, stack=stack, properties=props)
    converge(sim, JOIN_BOUND)
    return sim


def multicast_seqnos(sim: Simulation, receiver: str, sender: str) -> list[int]:
    return [int(str(m).rsplit("#", 1)[1]) for m in sim.delivered(receiver, sender, kind="multicast")]


def assert_in_order_no_duplicates(sim: Simulation, receiver: str, sender: str) -> None:
    got = multicast_seqnos(sim, receiver, sender)
    assert got == sorted(set(got)), f"{sender}->{receiver}: duplicates or out of order"


def test_view_xmit_interval_zero_is_valid_and_negative_is_not() -> None:
    GmsProps(view_xmit_interval=0).validate()
    with pytest.raises(ValueError, match="view_xmit_interval"):
        GmsProps(view_xmit_interval=-1).validate()


# --- gms-leave-view-lost: the leaving coordinator's VIEW to the next coordinator is lost ---------------------------

SLOW_FD = {"interval": 1.0, "timeout": 30.0, "timeout_check_interval": 1.0}  # only the VIEW can tell B that A left


def leave_with_lost_view(view_xmit_interval: float, seed: int) -> tuple[Simulation, MessageRule]:
    """A coordinates {A,B,C,D}; B and C multicast, B streams unicasts to C and D; A leaves and its first VIEW to B is
    dropped. Runs 5 s (virtual) after the leave."""
    sim = group(4, seed, fd=SLOW_FD, gms={"view_xmit_interval": view_xmit_interval})
    for s in "BC":
        sim.multicast_stream(s, 300, rate=100)
    for d in "CD":
        sim.stream("B", d, 300, rate=100)
    sim.run(0.5)
    rule = sim.add_rule(MessageRule("GMS", "VIEW", src="A", dst="B", count=1))
    sim.leave("A")
    sim.run(5.0)
    return sim, rule


@pytest.mark.parametrize("seed", [1, 2])
def test_without_view_resends_the_successor_keeps_the_leavers_view(seed: int) -> None:
    sim, rule = leave_with_lost_view(0.0, seed)
    assert rule.matched == 1
    assert not sim.member("A").alive and sim.gms("A").state is State.LEFT
    assert sim.protocol_counters("A", "gms")["view_xmits"] == 0
    assert sim.protocol_counters("A", "gms")["view_ack_timeouts"] == 1  # B never acked
    assert sim.view_names("C") == sim.view_names("D") == ["B", "C", "D"]
    assert sim.view_names("B") == ["A", "B", "C", "D"], views_of(sim)  # the successor never learned it coordinates
    assert not sim.gms("B").is_coord
    assert not sim.views_agree(["B", "C", "D"])
    # nothing is lost meanwhile: the streams between B, C and D go on (B still lists them)
    assert sim.run_until(lambda: all(t.work.done for m in "BC" for t in sim.member(m).tasks), 10.0)
    for r, s in (("C", "B"), ("D", "B"), ("B", "C"), ("D", "C")):
        assert multicast_seqnos(sim, r, s) == list(range(1, 301)), f"{s}->{r}"
    for d in "CD":
        assert sim.delivered(d, "B") == sim.sent("B", d)


@pytest.mark.parametrize("seed", [1, 2])
def test_view_resends_let_the_successor_take_over(seed: int) -> None:
    sim, rule = leave_with_lost_view(VIEW_XMIT, seed)
    assert rule.matched == 1
    assert sim.protocol_counters("A", "gms")["view_xmits"] >= 1
    assert sim.protocol_counters("A", "gms")["view_ack_timeouts"] == 0
    assert sim.views_agree(["B", "C", "D"]), views_of(sim)
    v = sim.view("B")
    assert v is not None and v.members == ("B", "C", "D") and sim.gms("B").is_coord
    leave_t = next(f["t"] for f in sim.faults if f["kind"] == "leave") / 1e9
    b_view_t = [e["t"] / 1e9 for e in sim.history["B"] if e["event"] == "view"][-1]
    assert b_view_t - leave_t <= VIEW_XMIT + 0.05  # one resend later (link delays are 1 ms)
    assert sim.run_until(sim.quiet, 20.0), views_of(sim)
    rep = check_multicast(sim)
    assert not rep.problems, rep.problems[:5]
    for d in "CD":
        assert sim.delivered(d, "B") == sim.sent("B", d)


# --- merge-overlapping: overlapping views, a purged gap, and a merge that keeps the gap (JGRP-940) -----------------


def overlapping_then_merge(reset_subgroup_windows: bool, seed: int) -> tuple[Simulation, float]:
    """B multicasts at 100/s. B and C stop hearing A and install {B,C}; A still hears them and keeps {A,B,C}. Then A
    stops hearing B for 0.6 s (shorter than failure detection): A misses B's multicasts of that time, which STABLE in
    {B,C} purges. Heal; MERGE merges. Returns the simulation and the time A installed the merge view."""
    sim = group(3, seed, gms={"reset_subgroup_windows": reset_subgroup_windows})
    sim.multicast_stream("B", 1500, rate=100)
    sim.run(0.5)
    sim.cut("A", "B")
    sim.cut("A", "C")
    assert sim.run_until(lambda: sim.view_names("B") == sim.view_names("C") == ["B", "C"], 2 * FD_TIMEOUT)
    assert sim.view_names("A") == ["A", "B", "C"]  # overlapping views
    sim.cut("B", "A")
    sim.run(0.6)
    sim.reset_link("B", "A")
    sim.run(1.5)  # STABLE rounds in {B,C} purge what A missed
    assert sim.protocol_counters("B", "nakack2")["stable_purged"] > 0
    sim.heal()
    converge(sim, CONVERGENCE_BOUND)
    assert sim.view("A").is_merge  # type: ignore[union-attr]
    merged_at = [e["t"] / 1e9 for e in sim.history["A"] if e["event"] == "view"][-1]
    return sim, merged_at


def sent_after(sim: Simulation, sender: str, t: float) -> list[str]:
    """msg_ids of the sender's multicasts sent after virtual time t."""
    return [
        e["msg_id"]
        for e in sim.history[sender]
        if e["event"] == "send" and e["kind"] == "multicast" and e["t"] / 1e9 > t
    ]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_without_subgroup_reset_a_keeps_waiting_for_purged_multicasts(seed: int) -> None:
    sim, merged_at = overlapping_then_merge(False, seed)
    assert sim.protocol_counters("A", "gms")["windows_reset"] == 0
    assert not sim.run_until(sim.quiet, 10.0), "quiet although A's window for B has a gap nobody can fill"
    assert sim.member("A").stack.waiting_on().get("B", 0) > 0
    after = set(sent_after(sim, "B", merged_at + 0.1))
    assert len(after) > 50
    assert not after & set(sim.delivered("A", "B", kind="multicast"))  # stuck behind the gap
    assert_in_order_no_duplicates(sim, "A", "B")
    everything = list(range(1, 1501))
    assert sim.run_until(lambda: multicast_seqnos(sim, "C", "B") == everything, 20.0)  # C is not affected
    assert not after & set(sim.delivered("A", "B", kind="multicast"))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_subgroup_reset_restarts_a_window_and_delivers_everything_after_the_merge(seed: int) -> None:
    sim, merged_at = overlapping_then_merge(True, seed)
    assert sim.protocol_counters("A", "gms")["windows_reset"] >= 1
    assert sim.run_until(sim.quiet, 20.0), views_of(sim)
    got = sim.delivered("A", "B", kind="multicast")
    after = sent_after(sim, "B", merged_at)
    assert len(after) > 50 and set(after) <= set(got)
    assert_in_order_no_duplicates(sim, "A", "B")
    assert multicast_seqnos(sim, "C", "B") == list(range(1, 1501))
    rep = check_multicast(sim)
    assert not rep.problems, rep.problems[:5]


# --- merge-coordinator-left-out: the merge leader never hears a subgroup coordinator's INFO (JGRP-1876) -----------


def merge_without_cs_info(ask_listed: bool, seed: int, *, a_deaf_to_c: bool = False) -> tuple[Simulation, MessageRule]:
    """Every member streams unicasts to the others; every MERGE.INFO from C to A is dropped; a split {A,B} | {C,D}
    for 3 s, then heal: A leads the merge and hears of {C,D}'s view only from D. `a_deaf_to_c`: A gets none of C's
    FD heartbeats either (the rule is returned second; remove it from sim.rules to end it)."""
    sim = group(4, seed, stack="unicast3+gms", gms={"merge_ask_listed_members": ask_listed})
    for s in "ABCD":
        for d in "ABCD":
            if s != d:
                sim.stream(s, d, 600, rate=100)
    rule = sim.add_rule(MessageRule("MERGE", "INFO", src="C", dst="A"))
    sim.run(0.5)
    sim.split([["A", "B"], ["C", "D"]])
    sim.run(3.0)
    assert sim.view_names("A") == ["A", "B"] and sim.view_names("D") == ["C", "D"]
    if a_deaf_to_c:
        sim.add_rule(MessageRule("FD", "HEARTBEAT", src="C", dst="A"))
    sim.heal(keep_rules=True)
    return sim, rule


def assert_unicasts_in_order(sim: Simulation) -> None:
    """Each receiver delivered each sender's unicasts without duplicates and in send order (a subsequence)."""
    for s in "ABCD":
        for r in "ABCD":
            if s == r:
                continue
            got, sent = sim.delivered(r, s), sim.sent(s, r)
            pos = [sent.index(m) for m in got]
            assert pos == sorted(set(pos)), f"{s}->{r}: duplicates or out of order"


@pytest.mark.parametrize("seed", [1, 2])
def test_without_asking_listed_members_the_unheard_coordinator_is_left_out(seed: int) -> None:
    sim, rule = merge_without_cs_info(False, seed)
    assert sim.run_until(lambda: bool(sim.view("A").is_merge), CONVERGENCE_BOUND)  # type: ignore[union-attr]
    sim.run(2 * CONVERGENCE_BOUND)  # no later merge takes C in: A, the only leader, never hears C's view id
    assert rule.matched > 0
    assert sim.view_names("A") == sim.view_names("B") == sim.view_names("D") == ["A", "B", "D"], views_of(sim)
    assert sim.view_names("C") == ["C", "D"]
    assert not sim.views_agree()
    assert sim.protocol_counters("A", "gms")["merges_completed"] == 1
    assert_unicasts_in_order(sim)


@pytest.mark.parametrize("seed", [1, 2])
def test_asking_listed_members_takes_the_unheard_coordinator_in(seed: int) -> None:
    sim, rule = merge_without_cs_info(True, seed)
    converge(sim, CONVERGENCE_BOUND)
    assert rule.matched > 0
    v = sim.view("C")
    assert v is not None and v.is_merge and sorted(v.members) == ["A", "B", "C", "D"]
    assert sim.run_until(sim.quiet, 30.0), views_of(sim)
    for s in "ABCD":
        for r in "ABCD":
            if s != r:
                assert sim.delivered(r, s) == sim.sent(s, r), f"{s}->{r}"


@pytest.mark.parametrize("seed", [1, 2])
def test_a_listed_member_not_heard_from_since_the_heal_is_asked_too(seed: int) -> None:
    """On netns the first INFO after a heal comes within merge.other_view_check_delay (0.1 s), before C's first
    heartbeat (every fd.interval), and A's failure detector has not heard from C since the split: C is asked anyway,
    and the merge waits for its answer (up to merge_timeout / 2). Here A gets no heartbeat of C until the merge."""
    sim, rule = merge_without_cs_info(True, seed, a_deaf_to_c=True)
    assert sim.run_until(lambda: bool(sim.view("A").is_merge), CONVERGENCE_BOUND)  # type: ignore[union-attr]
    first = sim.view("A")
    assert first is not None and sorted(first.members) == ["A", "B", "C", "D"], views_of(sim)
    counters = sim.protocol_counters("A", "gms")
    assert counters["merges_completed"] == counters["merge_unheard_asked"] == 1, counters
    assert counters["merge_unheard_left_out"] == 0, counters
    sim.rules[:] = [r for r in sim.rules if r.protocol != "FD"]
    converge(sim, CONVERGENCE_BOUND)
    assert rule.matched > 0 and sim.view("C") == first
    assert sim.run_until(sim.quiet, 30.0), views_of(sim)
    assert_unicasts_in_order(sim)


def test_a_dead_listed_member_delays_the_merge_by_half_merge_timeout_only() -> None:
    """A listed member that never answers (C, killed after the split) is not waited for past merge_timeout / 2: the
    merge of {A,B} and {D} goes on without it, and nothing is abandoned."""
    sim, _ = merge_without_cs_info(True, 1, a_deaf_to_c=True)
    sim.crash("C")
    assert sim.run_until(lambda: bool(sim.view("A").is_merge), CONVERGENCE_BOUND)  # type: ignore[union-attr]
    assert sim.view_names("A") == sim.view_names("D") == ["A", "B", "D"], views_of(sim)
    counters = sim.protocol_counters("A", "gms")
    assert counters["merges_completed"] == 1 and counters["merges_abandoned"] == 0, counters
    assert counters["merge_unheard_asked"] == counters["merge_unheard_left_out"] == 1, counters
