"""The fault table of a simulated cluster: the netns engine's fault kinds, arguments and ids (chaos/normalize.py,
Fault.links), applied to the simulation's network. Every change recomputes each directed link and the message rules
from the faults in force, as the netns engine re-renders each namespace's rules; planned faults are switched on and
off by the simulation's event queue at their instants."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from chaos.fault_table import FaultTable, QueueBypass
from chaos.faults import ChaosError, Fault, FaultRecord, TimedFault
from chaos.normalize import normalize
from chaos.rules import parse_match
from node.fault_kinds import KINDS, Category
from orchestration.sim.network import LinkFaults, MessageRule
from orchestration.sim.simulation import Simulation

ACTED = {"drop": "dropped", "delay": "delayed", "duplicate": "duplicated", "reorder": "reordered"}


class SimFaultTable:
    """The fault table of a simulated cluster: the netns engine's fault kinds, arguments and ids."""

    plan_ahead = False  # plan() takes effect in virtual time at once: no dormant install needed

    def __init__(self, sim: Simulation, members: list[str], transport: str) -> None:
        self.sim = sim
        self.members = members
        self.transport = transport
        self.records: list[FaultRecord] = []  # added now, or planned (with a window: in force while it is open)
        self._active: set[str] = set()  # planned faults whose window is open
        self._next = 0
        self._rules: dict[tuple[str, str, str], MessageRule] = {}  # (fault id, src, dst) -> its rule, counts kept
        self._generation = 0  # a new plan() cancels the switches of the previous one

    def normalize(self, kind: str, args: Mapping[str, object]) -> Fault:
        return normalize(kind, args, self.members, self.transport)

    def add(self, kind: str, args: Mapping[str, object], *, seed: int = 0) -> FaultRecord:
        fault = self.normalize(kind, args)
        self._next += 1
        record = FaultRecord(f"f{self._next}", fault, seed)
        self.records.append(record)
        self._apply()
        return record

    def remove(self, ids: Sequence[str]) -> list[FaultRecord]:
        known = {f.id for f in self.records}
        unknown = [i for i in ids if i not in known]
        if unknown:
            raise ChaosError(f"no fault {', '.join(unknown)} in force; in force: {', '.join(sorted(known)) or 'none'}")
        gone = [f for f in self.records if f.id in ids]
        self.records = [f for f in self.records if f.id not in ids]
        self._apply()
        return gone

    def heal(self) -> list[FaultRecord]:
        gone, self.records = self.records, []
        self._active.clear()
        self._apply()
        return gone

    def plan(self, faults: Sequence[TimedFault], t0_ns: int) -> None:
        """Scheduled faults, each switched on at t0 + start and off at t0 + end by the simulation's event queue
        (the netns engine's plan() with the same arguments installs them gated by the kernel's clock)."""
        self._generation += 1
        generation = self._generation
        ids = {f.id for f in faults}
        self.records = [f for f in self.records if f.id not in ids]
        self._active -= ids
        for f in faults:
            record = f.record(t0_ns)
            assert record.window is not None
            self.records.append(record)
            self.sim.at(record.window.start / 1e9, self._switch, generation, f.id, True)
            if record.window.until is not None:
                self.sim.at(record.window.until / 1e9, self._switch, generation, f.id, False)
        self._apply()

    def _switch(self, generation: int, fault_id: str, on: bool) -> None:
        if generation == self._generation:
            (self._active.add if on else self._active.discard)(fault_id)
            self._apply()

    def faults(self, *, stats: bool = True) -> list[FaultRecord]:
        if not stats:
            return list(self.records)
        out = []
        for f in self.records:
            counted = [r for (fid, _, _), r in self._rules.items() if fid == f.id]
            if counted:  # as the NFQUEUE handler names them: dropped, delayed, duplicated, reordered
                f = f.with_handled({ACTED[counted[0].action]: sum(r.matched for r in counted)})
            out.append(f)
        return out

    def clock_offset(self) -> int | None:
        """Virtual time needs no wall clock (the netns engine's plan() reads one)."""
        return None

    def queue_bypass(self) -> dict[str, QueueBypass]:
        """Nothing escapes the rules here: the simulated network judges every message (the netns engine's handlers
        can fall behind)."""
        return {}

    def shutdown(self) -> None:
        self.records = []
        self._active.clear()

    def _apply(self) -> None:
        """Every directed link and message rule, recomputed from the faults in force (as chaos/render.py renders a
        namespace): partitions cut, losses combine, delays add, jitter/reorder/duplicate take the largest."""
        sim = self.sim
        base = sim.default_link
        new_links: dict[tuple[str, str], LinkFaults] = {}
        rules: list[MessageRule] = []
        for record in self.records:
            if record.window is not None and record.id not in self._active:
                continue
            f = record.fault
            for src, dst in f.links():
                if KINDS[f.kind].category is Category.DISCARD:
                    rules.append(self._rule(record, src, dst))
                    continue
                lf = new_links.get((src, dst)) or LinkFaults(**base.__dict__)
                _add_link_fault(lf, f)
                new_links[(src, dst)] = lf
        sim.network.links = new_links
        sim.network.rules = rules

    def _rule(self, record: FaultRecord, src: str, dst: str) -> MessageRule:
        key = (record.id, src, dst)
        rule = self._rules.get(key)
        if rule is None:
            f = record.fault
            m = parse_match(str(f.match))
            rule = MessageRule(
                m.protocol,
                m.header,
                m.predicates(),
                src=src,
                dst=dst,
                action=str(f.action),
                delay=f.delay or 0.0,
                count=f.count,
                probability=1.0 if f.probability is None else f.probability,
            )
            self._rules[key] = rule
        return rule


def _is_a_fault_table(table: SimFaultTable) -> FaultTable:
    return table  # mypy checks that the simulator's table implements the protocol


def _add_link_fault(lf: LinkFaults, f: Fault) -> None:
    """One more fault on a directed link: a cut cuts, losses combine, delays add, the rest take the largest."""
    if f.cuts:
        lf.cut = True
    elif f.kind == "loss":
        lf.loss = 1 - (1 - lf.loss) * (1 - (f.probability or 0.0))
    elif f.kind == "delay":
        lf.delay += f.delay or 0.0
        lf.jitter = max(lf.jitter, f.jitter or 0.0)
    elif f.kind == "reorder":
        lf.reorder = max(lf.reorder, f.probability or 0.0)
    elif f.kind == "duplicate":
        lf.duplicate = max(lf.duplicate, f.probability or 0.0)
