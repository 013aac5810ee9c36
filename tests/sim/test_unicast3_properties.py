"""Property: under any random fault schedule on 2-5 members, once the faults stop and the network is quiet, every
unicast is delivered exactly once, in FIFO order per connection, and every sender window has drained."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestration.sim.simulation import Simulation
from tests.sim.util import FAST_U3, assert_exactly_once_in_order, settle

pytestmark = pytest.mark.sim

LINK_FAULTS = {
    "loss": st.floats(0.0, 0.5),
    "duplicate": st.floats(0.0, 0.3),
    "reorder": st.floats(0.0, 0.3),
    "jitter": st.floats(0.0, 0.02),
    "cut": st.just(True),
}


@st.composite
def scenarios(draw: st.DrawFn) -> dict:
    n = draw(st.integers(2, 5))
    names = [chr(ord("A") + i) for i in range(n)]
    pairs = [(s, d) for s in names for d in names if s != d]
    workload = [
        (s, d, draw(st.integers(0, 200)), draw(st.floats(20, 2000)), draw(st.floats(0, 5)))
        for s, d in draw(st.lists(st.sampled_from(pairs), min_size=1, max_size=len(pairs), unique=True))
    ]
    faults = []
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from([*LINK_FAULTS, "close"]))
        src, dst = draw(st.sampled_from(pairs))
        value = draw(LINK_FAULTS[kind]) if kind in LINK_FAULTS else None
        faults.append((kind, src, dst, value, draw(st.floats(0, 8)), draw(st.floats(0.1, 5))))
    return {"names": names, "seed": draw(st.integers(0, 2**32 - 1)), "workload": workload, "faults": faults}


def run(sc: dict) -> Simulation:
    sim = Simulation(sc["names"], seed=sc["seed"], properties=FAST_U3)
    for s, d, count, rate, start in sc["workload"]:
        sim.stream(s, d, count, rate=rate, start=start)
    last = 0.0
    for kind, src, dst, value, start, duration in sc["faults"]:
        if kind == "close":  # graceful close of a connection: pending messages must still be flushed
            member = sim.member(src)
            sim.at(
                start,
                lambda m=member, p=dst: m.stack.unicast.close_connection(sim.member(p).address, sim.now, m.stack.out),
            )
        else:
            sim.at(start, lambda k=kind, s=src, d=dst, v=value, t=duration: sim.set_link(s, d, duration=t, **{k: v}))
        last = max(last, start + duration)
    sim.at(last, sim.heal)
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
