"""The fault table of a simulated cluster: the netns engine's fault kinds, arguments and ids (chaos/engine.py's
normalize and links), applied to the simulation's network. Every change recomputes each directed link and the
message rules from the faults in force, as the engine re-renders each namespace's rules; planned faults are switched
on and off by the simulation's event queue at their instants."""

from __future__ import annotations

import time
from typing import Any

from chaos.engine import ChaosError, links, normalize, planned_record
from chaos.rules import parse_match
from orchestration.sim.network import LinkFaults, MessageRule
from orchestration.sim.simulation import Simulation

ACTED = {"drop": "dropped", "delay": "delayed", "duplicate": "duplicated", "reorder": "reordered"}


class SimChaos:
    """The fault table of a simulated cluster: the netns engine's fault kinds, arguments and ids."""

    PLAN_AHEAD = False  # plan() takes effect in virtual time at once: no dormant install needed

    def __init__(self, sim: Simulation, members: list[str], transport: str) -> None:
        self.sim = sim
        self.members = members
        self.transport = transport
        self.records: list[dict[str, Any]] = []  # added now, or planned (with a `window`, in force while active)
        self._active: set[str] = set()  # planned faults whose window is open
        self._next = 0
        self._rules: dict[tuple[str, str, str], MessageRule] = {}  # (fault id, src, dst) -> its rule, counts kept
        self._generation = 0  # a new plan() cancels the switches of the previous one

    def normalize(self, kind: str, args: dict[str, Any]) -> dict[str, Any]:
        return normalize(kind, args, self.members, self.transport)

    def add(self, kind: str, args: dict[str, Any], *, seed: int = 0) -> dict[str, Any]:
        record = self.normalize(kind, args)
        self._next += 1
        record = {"id": f"f{self._next}", **record, "seed": seed, "since": time.time()}
        self.records.append(record)
        self._apply()
        return record

    def remove(self, ids: list[str]) -> list[dict[str, Any]]:
        known = {f["id"] for f in self.records}
        unknown = [i for i in ids if i not in known]
        if unknown:
            raise ChaosError(f"no fault {', '.join(unknown)} in force; in force: {', '.join(sorted(known)) or 'none'}")
        gone = [f for f in self.records if f["id"] in ids]
        self.records = [f for f in self.records if f["id"] not in ids]
        self._apply()
        return gone

    def heal(self) -> list[dict[str, Any]]:
        gone, self.records = self.records, []
        self._active.clear()
        self._apply()
        return gone

    def plan(self, faults: list[dict[str, Any]], t0_ns: int) -> None:
        """Scheduled faults, each switched on at t0 + start and off at t0 + end by the simulation's event queue
        (the netns engine's plan() with the same arguments installs them gated by the kernel's clock)."""
        self._generation += 1
        generation = self._generation
        ids = {f["id"] for f in faults}
        self.records = [f for f in self.records if f["id"] not in ids]
        self._active -= ids
        for f in faults:
            record = planned_record(f, t0_ns)
            self.records.append(record)
            start, end = record["window"]["from"], record["window"]["until"]
            self.sim.at(start / 1e9, self._switch, generation, f["id"], True)
            if end is not None:
                self.sim.at(end / 1e9, self._switch, generation, f["id"], False)
        self._apply()

    def _switch(self, generation: int, fault_id: str, on: bool) -> None:
        if generation == self._generation:
            (self._active.add if on else self._active.discard)(fault_id)
            self._apply()

    def faults(self, *, stats: bool = True) -> list[dict[str, Any]]:
        out = [dict(f) for f in self.records]
        if stats:
            for f in out:
                counted = [r for (fid, _, _), r in self._rules.items() if fid == f["id"]]
                if counted:  # as the NFQUEUE handler names them: dropped, delayed, duplicated, reordered
                    f["handled"] = {ACTED[counted[0].action]: sum(r.matched for r in counted)}
        return out

    def clock_offset(self) -> int | None:
        """Virtual time needs no wall clock (the netns engine's plan() reads one)."""
        return None

    def queue_bypass(self) -> dict[str, Any]:
        """Nothing escapes the rules here: the simulated network judges every message (the netns engine's handlers
        can fall behind)."""
        return {}

    def shutdown(self) -> None:
        self.records = []
        self._active.clear()

    def _apply(self) -> None:
        """Every directed link and message rule, recomputed from the faults in force (as chaos/engine.py renders a
        namespace): partitions cut, losses combine, delays add, jitter/reorder/duplicate take the largest."""
        sim = self.sim
        base = sim.default_link
        new_links: dict[tuple[str, str], LinkFaults] = {}
        rules: list[MessageRule] = []
        for f in self.records:
            if "window" in f and f["id"] not in self._active:
                continue
            kind = f["kind"]
            for src, dst in links(f):
                if kind == "discard":
                    rules.append(self._rule(f, src, dst))
                    continue
                lf = new_links.get((src, dst)) or LinkFaults(**base.__dict__)
                if kind in ("partition", "split"):
                    lf.cut = True
                elif kind == "loss":
                    lf.loss = 1 - (1 - lf.loss) * (1 - f["probability"])
                elif kind == "delay":
                    lf.delay += f["delay"]
                    lf.jitter = max(lf.jitter, f.get("jitter", 0.0))
                elif kind == "reorder":
                    lf.reorder = max(lf.reorder, f["probability"])
                elif kind == "duplicate":
                    lf.duplicate = max(lf.duplicate, f["probability"])
                new_links[(src, dst)] = lf
        sim.network.links = new_links
        sim.network.rules = rules

    def _rule(self, f: dict[str, Any], src: str, dst: str) -> MessageRule:
        key = (f["id"], src, dst)
        rule = self._rules.get(key)
        if rule is None:
            m = parse_match(f["match"])
            rule = MessageRule(
                m.protocol,
                m.header,
                m.predicates(),
                src=src,
                dst=dst,
                action=f["action"],
                delay=f.get("delay", 0.0),
                count=f.get("count"),
                probability=f.get("probability", 1.0),
            )
            self._rules[key] = rule
        return rule
