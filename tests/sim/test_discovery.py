"""Discovery of joiners that start a little apart (GMS, node/protocols/gms_join.py).

The case from docker compose: members start 0.2-0.9 s apart with a 2 s discovery timeout. A member whose discovery
hears no coordinator used to count only the FIND_RSPs it got; a FIND from a smaller joiner that started after it
was answered but forgotten, so it became a singleton as well, and the two views joined only through a merge. Now a
FIND heard while discovering counts as a joiner's answer (JGroups' Discovery adds the requester to its responses):
the smallest joiner becomes coordinator, tells the joiners it heard from, and they join it at once.
"""

from __future__ import annotations

import pytest

from orchestration.sim.simulation import Simulation
from tests.sim.test_membership import PROPS, view_events, views_of

pytestmark = pytest.mark.sim

DISCOVERY = 2.0  # compose's discovery_timeout
OFFSETS = (0.0, 0.2, 0.6, 0.9)  # the start times seen under compose
# a join round with no loss: JOIN_REQ, the view installed and acked by the others, JOIN_RSP (a few link delays)
JOIN_ROUND = 0.05
NAMES = ["A", "B", "C", "D"]


def staggered(order: list[str], seed: int, offsets: tuple[float, ...] = OFFSETS) -> Simulation:
    """The members of `order` started at `offsets` (order[i] at offsets[i]), with compose's discovery timeout."""
    props = {**PROPS, "gms": {**PROPS["gms"], "discovery_timeout": DISCOVERY}}
    assert offsets[0] == 0.0
    sim = Simulation(order[:1], seed=seed, stack="unicast3+gms", properties=props)
    for name, t in zip(order[1:], offsets[1:], strict=True):
        sim.start_member(name, at=t)
    return sim


# start orders: the smallest address first, last, and in between; the compose case (B first, A 0.6 s later) first
ORDERS = ["BCAD", "ABCD", "DCBA", "CADB", "BDAC", "DABC"]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("order", ORDERS)
def test_staggered_joiners_form_one_view_without_a_merge(order: str, seed: int) -> None:
    sim = staggered(list(order), seed)
    bound = OFFSETS[order.index("A")] + DISCOVERY + JOIN_ROUND  # the smallest joiner's discovery, then one round
    assert sim.run_until(lambda: len(sim.live()) == len(NAMES) and sim.views_agree(), bound, check_every=0.01), (
        views_of(sim)
    )
    assert sorted(sim.view_names("A")) == NAMES and sim.view_names("A")[0] == "A"  # the smallest joiner coordinates
    singletons = {n: sim.protocol_counters(n, "gms")["singletons"] for n in NAMES}
    assert singletons == {"A": 1, "B": 0, "C": 0, "D": 0}
    sim.run(3.0)  # nothing else happens: no merge, no other view
    events = [v for n in NAMES for v in view_events(sim, n)]
    assert all(v.view_id.startswith("A|") for v in events), events
    assert not any(e["merge"] for n in NAMES for e in sim.history[n] if e["event"] == "view")
    assert sim.views_agree() and sorted(sim.view_names("D")) == NAMES


def test_a_joiner_that_heard_a_smaller_joiner_waits_for_it_instead_of_becoming_a_singleton() -> None:
    """B starts alone; A starts 0.6 s later and its FIND reaches B while B discovers. B's discovery ends first with
    no FIND_RSP at all: it does not become a singleton (A is the smaller joiner) but asks again, and joins A as soon
    as A's discovery ends and A coordinates."""
    sim = staggered(["B", "A"], 0, (0.0, 0.6))
    sim.run(DISCOVERY + 0.1)  # B's first discovery is over, A's is not
    assert sim.view("B") is None and sim.protocol_counters("B", "gms")["finds_received"] == 1
    assert sim.protocol_counters("B", "gms")["join_attempts"] == 2  # asks again
    assert sim.run_until(lambda: sim.views_agree(), 0.6 + DISCOVERY + JOIN_ROUND - sim.now, check_every=0.01)
    assert sim.view_names("B") == ["A", "B"]
    assert sim.protocol_counters("B", "gms")["singletons"] == 0
