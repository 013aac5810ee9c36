"""Property: under repeated random splits and heals (full, overlapping, one-way, isolated members, a split with a
member deaf to one of its own side) of 3-6 members running a multicast workload, after the last heal

1. every live member installs the same view, of all of them, within CONVERGENCE_BOUND (6.6 s with the properties
   of test_membership.py; the derivation is there; measured over 800 random schedules: p99 1.5 s, max 1.9 s), and
   that view stays put;
2. multicast delivery is complete and FIFO across views and merges: every multicast "sent while connected" (see
   test_membership.connected_sends: sender and receiver had the same view when it was sent, and for
   DELIVERY_WINDOW = 2 s after it no link between them was cut and neither dropped the other from its view) is
   delivered, and every receiver delivers each sender's multicasts exactly once and in seqno order.

Not vacuous: at least 10% of all (message, receiver) pairs must be required (asserted; measured minimum over 800
random schedules: 15%, typical 40-70%); schedules whose partitions outlast the failure detector produce merge views,
and most of them required deliveries on both sides of a merge (reported with `pytest --hypothesis-show-statistics`;
test_membership.py asserts it for each merge scenario).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from orchestration.sim.simulation import Simulation
from tests.sim.test_membership import (
    CONVERGENCE_BOUND,
    FD_TIMEOUT,
    JOIN_BOUND,
    MULTICAST_STACKS,
    MulticastReport,
    check_multicast,
    converge,
    make,
    views_of,
)

pytestmark = pytest.mark.sim

RATE = 10.0  # multicasts per second per member
STREAM_AFTER_HEAL = 3.0  # the workload goes on this long after the last heal


@st.composite
def faults(draw: st.DrawFn, names: list[str]) -> tuple:
    kind = draw(st.sampled_from(["split", "split", "overlap", "isolate", "one_way", "split_and_cut"]))
    if kind == "split_and_cut":  # a split, and one member deaf to another of its own group (it will suspect it)
        side = [draw(st.integers(0, 1)) for _ in names]
        pairs = [(a, b) for i, a in enumerate(names) for j, b in enumerate(names) if side[i] != side[j]]
        inside = [(a, b) for i, a in enumerate(names) for j, b in enumerate(names) if a != b and side[i] == side[j]]
        if inside:
            pairs.append(draw(st.sampled_from(inside)))
        return ("one_way", pairs)
    if kind in ("split", "overlap"):
        k = draw(st.integers(2, 3))
        groups: list[list[str]] = [[] for _ in range(k)]
        for n in names:
            groups[draw(st.integers(0, k - 1))].append(n)
        if kind == "overlap":  # one member is in two groups: it hears both, they do not hear each other
            n = draw(st.sampled_from(names))
            for g in groups:
                if n not in g:
                    g.append(n)
                    break
        return ("split", [g for g in groups if g])
    if kind == "isolate":
        n = draw(st.sampled_from(names))
        return ("split", [[n], [m for m in names if m != n]])
    pairs = [(a, b) for a in names for b in names if a != b]
    return ("one_way", draw(st.lists(st.sampled_from(pairs), min_size=1, max_size=len(names), unique=True)))


@st.composite
def schedules(draw: st.DrawFn) -> dict:
    names = [chr(ord("A") + i) for i in range(draw(st.integers(3, 6)))]
    steps = []
    for _ in range(draw(st.integers(1, 4))):
        # (fault, how long it holds, how long the network is whole before the next one; 0: back to back)
        steps.append((draw(faults(names)), draw(st.floats(0.2, 4.0)), draw(st.sampled_from([0.0, 0.3, 1.0, 3.0]))))
    return {"names": names, "seed": draw(st.integers(0, 2**32 - 1)), "steps": steps}


def scheduled(sc: dict, stack: str) -> tuple[Simulation, float]:
    """A formed group of the schedule's members with its faults and heals scheduled (nothing run yet); returns the
    simulation and when the last heal happens."""
    sim = make(sc["names"], stack=stack, seed=sc["seed"])
    converge(sim, JOIN_BOUND)
    sim.run(0.5)
    t = sim.now
    for (kind, arg), duration, gap in sc["steps"]:
        if kind == "split":
            sim.at(t, sim.split, arg)
        else:
            for a, b in arg:
                sim.at(t, sim.cut, a, b)
        t += duration
        sim.at(t, sim.heal)
        t += gap
    return sim, t - sc["steps"][-1][2]


def run(sc: dict, stack: str) -> tuple[Simulation, float]:
    """Runs the schedule; returns the simulation and when the last heal happened."""
    sim, last_heal = scheduled(sc, stack)
    for n in sc["names"]:  # until the views have converged (or nearly): messages on both sides of the last merge
        sim.multicast_stream(n, int((last_heal + STREAM_AFTER_HEAL - sim.now) * RATE), rate=RATE)
    sim.run(last_heal - sim.now)
    return sim, last_heal


def check(sc: dict, stack: str) -> MulticastReport:
    sim, last_heal = run(sc, stack)
    sim.run(CONVERGENCE_BOUND + 2 * FD_TIMEOUT)
    # 1. one view of all members, installed by everyone within the bound, unchanged since
    assert sim.views_agree(), views_of(sim)
    last_view = max(e["t"] / 1e9 for h in sim.history.values() for e in h if e["event"] == "view")
    assert last_view - last_heal <= CONVERGENCE_BOUND, f"last view {last_view - last_heal:.2f}s after the heal"
    # 2. complete and FIFO for what was sent while connected; exactly once for everything
    assert sim.run_until(sim.quiet, 30.0), f"multicast not drained: {views_of(sim)}"
    rep = check_multicast(sim)
    assert not rep.problems, rep.problems[:10]
    assert rep.checked >= 0.1 * rep.total, f"vacuous: {rep.checked} of {rep.total}"
    return rep


@pytest.mark.parametrize("stack", MULTICAST_STACKS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sc=schedules())
# MCAST never drained: E dropped C from its view and purged what C had not acked, C never dropped E; a merge C never
# installed took them back together, and C's window for E waited for purged messages (now: the next merge digest
# skips them, test_mcast.py::test_merge_digest_skips_messages_the_sender_purged_after_dropping_the_receiver)
@example(
    sc={
        "names": ["A", "B", "C", "D", "E", "F"],
        "seed": 0,
        "steps": [
            (("split", [["B", "D", "E", "F"], ["A", "C", "D"]]), 1.0, 0.0),
            (("split", [["A"], ["B", "C", "D", "E", "F"]]), 1.0, 0.0),
        ],
    }
)
def test_views_converge_and_multicast_is_complete_and_fifo_across_merges(stack: str, sc: dict) -> None:
    rep = check(sc, stack)
    event(f"required deliveries on both sides of a merge: {rep.across_merge > 0}")


UNICAST_RATE = 50.0  # unicasts per second on every ordered pair


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sc=schedules())
def test_unicasts_across_splits_and_merges_are_complete_once_and_fifo(sc: dict) -> None:
    """The same schedules with UNICAST3 streams on every ordered pair instead of multicasts (membership changes the
    unicast side too: a member outside the view is not asked from the retransmit task, the message that ends a
    silence asks at once, a merge view asks whoever it brings back): after the last heal the views converge, the
    cluster drains, and every receiver delivers every unicast of every sender exactly once and in send order
    (nobody is killed, and no connection is old enough for max_retransmit_time to drop it)."""
    names = sc["names"]
    sim, last_heal = scheduled(sc, "unicast3+nakack2")
    t = last_heal + sc["steps"][-1][2]  # the end of the schedule: the last heal and the gap after it
    for s in names:
        for d in names:
            if s != d:
                sim.stream(s, d, int((t + STREAM_AFTER_HEAL - sim.now) * UNICAST_RATE), rate=UNICAST_RATE)
    sim.run(t - sim.now + CONVERGENCE_BOUND + 2 * FD_TIMEOUT)
    assert sim.views_agree(), views_of(sim)
    assert sim.run_until(sim.quiet, 30.0), f"unicasts not drained: {views_of(sim)}"
    for s in names:
        for r in names:
            if s != r:
                assert sim.delivered(r, s) == sim.sent(s, r), f"{s}->{r}"


# Schedules that broke earlier versions (found by the property test, kept because they are rare draws):
REGRESSIONS = {
    # a takeover view made in one partition reached a member that had moved on to a view of the other: installing
    # it paired members whose messages it had missed (a view is now taken only from a member of our own view)
    "foreign-takeover-view": {
        "names": ["A", "B", "C", "D"],
        "seed": 31225254,
        "steps": [
            (("split", [["A", "B", "C", "D"]]), 3.9767746615594297, 3.0),
            (("split", [["B"], ["A", "C", "D"]]), 1.9, 1.0),
            (("split", [["C"], ["A", "B", "D"]]), 1.2154158093615595, 3.0),
            (("split", [["A", "C", "D"], ["B"]]), 3.0602586579286584, 3.0),
        ],
    },
    "foreign-takeover-view-waits-forever": {
        "names": ["A", "B", "C", "D", "E", "F"],
        "seed": 117,
        "steps": [
            (("split", [["A"], ["B", "C", "D", "E", "F"]]), 3.041512474481344, 3.0),
            (("split", [["B"], ["A", "C", "D", "E", "F"]]), 1.0, 0.0),
            (
                ("one_way", [("B", "F"), ("C", "F"), ("E", "C"), ("D", "A"), ("E", "B"), ("A", "B")]),
                2.628275330628631,
                1.0,
            ),
        ],
    },
    # the merge leader, alone in its view, multicast between answering its own merge and installing the view;
    # MCAST purged it at once (no acks to wait for) and the others waited for it forever (now: held back)
    "send-during-merge-handshake": {
        "names": ["A", "B", "C", "D", "E", "F"],
        "seed": 3,
        "steps": [
            (("split", [["B", "E", "F"], ["A", "C", "D"]]), 0.2, 3.0),
            (("split", [["F"], ["C", "D", "E"], ["A", "B"]]), 1.0, 0.3),
            (("split", [["A", "B", "C"], ["D"], ["E", "F"]]), 1.762771700028969, 3.0),
            (("split", [["A", "B", "C"], ["D"], ["E", "F"]]), 0.2, 0.0),
        ],
    },
    # D answered A's MERGE_REQ, then installed its own coordinator B's view [B, D] (found by the property test in
    # CI, 11-26): that ended D's hold on its multicasts, B and D acknowledged and purged D's next one, and the merge
    # view restarted A's and C's windows for D at the digest D had answered: they waited for it forever (now: only
    # a merge view ends the hold; a regular view keeps it until the merge view or merge_timeout)
    "view-change-between-merge-rsp-and-merge-view": {
        "names": ["A", "B", "C", "D"],
        "seed": 0,
        "steps": [
            (("split", [["A", "C"], ["B", "D"]]), 1.125, 0.0),
            (("split", [["A", "C", "D"], ["B"]]), 0.25, 0.0),
        ],
    },
    # the same race through a takeover (found by a search of schedules shaped like the one above, 11-26: 13 of 80
    # failed): D, deaf to its coordinator B, answered A's MERGE_REQ, then suspected B and took over with view [D].
    # The takeover ended D's hold; alone in its view, D purged its next multicast at once, and the merge view
    # restarted A's and C's windows for D below it (now: a takeover keeps the hold too)
    "takeover-between-merge-rsp-and-merge-view": {
        "names": ["A", "B", "C", "D"],
        "seed": 1946950245,
        "steps": [
            (("split", [["A", "C"], ["B", "D"]]), 1.3957104447207676, 0.0),
            (
                (
                    "one_way",  # the split above, and D deaf to B
                    [
                        ("A", "B"),
                        ("A", "D"),
                        ("C", "B"),
                        ("C", "D"),
                        ("B", "A"),
                        ("D", "A"),
                        ("B", "C"),
                        ("D", "C"),
                        ("B", "D"),
                    ],
                ),
                0.5709353159160471,
                0.0,
            ),
            (("split", [["A", "C", "D"], ["B"]]), 1.3869536387076575, 0.0),
        ],
    },
    # one-way cuts left C alone in a view whose coordinator B had moved on: every merge round was rejected by
    # whoever was still locked by the previous, abandoned round (now: a retry by the same leader is answered)
    "merge-rounds-rejected-forever": {
        "names": ["A", "B", "C", "D"],
        "seed": 0,
        "steps": [
            (("one_way", [("B", "D"), ("A", "B")]), 1.5, 0.0),
            (("one_way", [("C", "A")]), 1.0, 0.3),
            (("one_way", [("B", "D"), ("A", "B")]), 2.0, 0.0),
        ],
    },
}


@pytest.mark.parametrize("stack", MULTICAST_STACKS)
@pytest.mark.parametrize("name", list(REGRESSIONS))
def test_regression_schedules(name: str, stack: str) -> None:
    check(REGRESSIONS[name], stack)
