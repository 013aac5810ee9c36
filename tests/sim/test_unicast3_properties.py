"""Property: under any random fault schedule on 2-5 members, once the faults stop and the network is quiet, every
unicast is delivered exactly once, in FIFO order per connection, and every sender window has drained."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestration.explore.generator import Generator, Shape
from orchestration.sim.simulation import Simulation
from tests.sim.schedules import apply_faults, context
from tests.sim.util import FAST_U3, assert_exactly_once_in_order, settle

pytestmark = pytest.mark.sim

# Faults drawn by explore's generator (the one source of random schedules): 0-8 of them, each starting in the first
# 13 s and lasting 0.1-5 s, overlapping at will: loss, duplication, reordering, delay and jitter, one-way cuts (or
# partitions of random sets) and graceful connection closes (pending messages must still be flushed).
KINDS = ["loss", "duplicate", "reorder", "delay", "partition", "close-connection"]
SHAPE = Shape(moves=(0, 8), duration=(0.1, 5.0), layout="overlap", window=(0.0, 13.0))


@st.composite
def scenarios(draw: st.DrawFn) -> dict:
    n = draw(st.integers(2, 5))
    names = [chr(ord("A") + i) for i in range(n)]
    pairs = [(s, d) for s in names for d in names if s != d]
    workload = [
        (s, d, draw(st.integers(0, 200)), draw(st.floats(20, 2000)), draw(st.floats(0, 5)))
        for s, d in draw(st.lists(st.sampled_from(pairs), min_size=1, max_size=len(pairs), unique=True))
    ]
    ctx = context(names, "unicast3", workload=[{"kind": "unicast", "from": s, "to": d} for s, d, *_ in workload])
    faults = Generator(ctx, KINDS, SHAPE).draw(draw(st.randoms(use_true_random=False)))
    return {"names": names, "seed": draw(st.integers(0, 2**32 - 1)), "workload": workload, "faults": faults}


def run(sc: dict) -> Simulation:
    sim = Simulation(sc["names"], seed=sc["seed"], properties=FAST_U3)
    for s, d, count, rate, start in sc["workload"]:
        sim.stream(s, d, count, rate=rate, start=start)
    apply_faults(sim, sc["faults"], t0=0.0)
    return sim


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_any_fault_schedule_delivers_exactly_once_in_order_and_drains(sc: dict) -> None:
    sim = run(sc)
    settle(sim, timeout=120)
    for s, d, *_ in sc["workload"]:
        assert_exactly_once_in_order(sim, s, d)
    for name in sim.members:
        for peer, entry in sim.protocol(name).send_table.items():
            assert len(entry.table) == 0, f"{name}->{peer}: {len(entry.table)} unacked"
