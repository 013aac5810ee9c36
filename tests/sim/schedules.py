"""Fault schedules of explore's generator (orchestration/explore/generator.py) in the property tests' own harness.

The property tests draw their schedules with the generator (hypothesis drives its random source: `st.randoms()`),
so there is one source of random schedules; they keep their own simulation (properties, start-up, workload, the
assertions) and put the generated `[[faults]]` tables on it here: the schedule is compiled by the one scheduler's
compile_schedule (orchestration/schedule.py: ids, windows, heals), its network faults are planned on the
simulator's fault table (orchestration/sim/faults.py, switched by the event queue at their instants), and its member
actions are the simulation's own calls at theirs. Regression schedules are read from scenarios/regressions/.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos.faults import TimedFault
from orchestration.explore.case import scenario_of
from orchestration.explore.context import Context, context_of
from orchestration.scenario import Fault
from orchestration.schedule import Schedule, compile_schedule
from orchestration.sim.faults import SimFaultTable
from orchestration.sim.simulation import Simulation

REGRESSIONS = Path(__file__).resolve().parents[2] / "scenarios" / "regressions"

_ACTIONS: dict[str, Callable[[Simulation, dict[str, Any]], None]] = {
    "kill": lambda sim, a: sim.crash(a["member"]),
    "restart": lambda sim, a: sim.restart(a["member"]),
    "pause": lambda sim, a: sim.pause(a["member"]),
    "resume": lambda sim, a: sim.resume(a["member"]),
    "leave": lambda sim, a: sim.leave(a["member"]),
    "close-connection": lambda sim, a: sim.close_connection(a["member"], a["peer"]),
}


@dataclass
class Applied:
    """A schedule put on a simulation: t0 (virtual seconds) and the compiled schedule."""

    t0: float
    schedule: Schedule

    @property
    def last_heal(self) -> float:
        """When the last fault ends (absolute virtual seconds)."""
        ends = [p.end for p in self.schedule.planned if p.end is not None] + [i.at for i in self.schedule.instants]
        return self.t0 + max(ends, default=0.0)

    def cuts(self) -> dict[frozenset[str], list[tuple[float, float]]]:
        """For every pair of members, the intervals in which a link between them (either way) was cut."""
        out: dict[frozenset[str], list[tuple[float, float]]] = {}
        for p in self.schedule.planned:
            if p.record.kind not in ("partition", "split"):
                continue
            end = math.inf if p.end is None else self.t0 + p.end
            for a, b in p.record.links():
                out.setdefault(frozenset((a, b)), []).append((self.t0 + p.start, end))
        return out


def context(names: list[str], stack: str = "unicast3+nakack2", **raw: Any) -> Context:
    """The generator's context for a cluster of `names` (and any other scenario keys, e.g. workload)."""
    return context_of(scenario_of({"cluster": {"members": names, "stack": stack}, **raw}))


def apply_faults(sim: Simulation, faults: list[dict[str, Any]], *, t0: float | None = None) -> Applied:
    """Schedules `faults` (scenario-file tables, `at` counted from t0; default: now) on the simulation."""
    names = sim.names()
    sc = scenario_of({"cluster": {"members": names, "stack": sim.stack_name}, "faults": faults})
    schedule = compile_schedule(sc)
    start = sim.now if t0 is None else t0
    records = [
        TimedFault(p.id, p.record, sim.seed, p.start, p.end)
        for p in schedule.planned
        if p.end is None or p.end > p.start
    ]
    if records:
        SimFaultTable(sim, names, "udp").plan(records, round(start * 1e9))
    for inst in schedule.instants:
        for f in inst.actions:
            sim.at(start + inst.at, _act, sim, f)
    return Applied(start, schedule)


def _act(sim: Simulation, f: Fault) -> None:
    _ACTIONS[f.kind](sim, f.args)


def regression_faults(name: str) -> list[dict[str, Any]]:
    """The `[[faults]]` of scenarios/regressions/<name>.toml."""
    return tomllib.loads((REGRESSIONS / f"{name}.toml").read_text()).get("faults", [])
