"""The simulator as a Cluster backend: the deterministic Simulation (orchestration/backends/sim.py) behind the same
API as the process and netns backends, so one scheduler and one runner drive all three.

Time is the simulation's virtual time: `clock.sleep_until(t)` runs the simulation up to t, so waiting for a view or
for quiet costs no real time. Control commands are answered from the simulated members' stacks (the same replies as
node/control.py), member faults act on the simulated members, and the fault table (`chaos`) takes the same fault
kinds and arguments as the netns engine (chaos/engine.py's normalize and links): every change recomputes each
directed link and the message rules from the faults in force, as the engine re-renders each namespace's rules.
Histories are written to `<workdir>/history/` when the members stop or the cluster goes down.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from chaos.engine import ChaosError, links, normalize, planned_record
from chaos.rules import parse_match
from node import commands
from node.workload import POLL
from orchestration.backends.sim import LinkFaults, MessageRule, Simulation
from orchestration.backends.sim_control import SimControlledMember
from orchestration.backends.sim_member import SimMember
from orchestration.cluster import Cluster, ClusterError, ClusterSpec, MemberInfo

ACTED = {"drop": "dropped", "delay": "delayed", "duplicate": "duplicated", "reorder": "reordered"}


class SimClock:
    """The simulation's virtual time in ns; sleeping runs the simulation."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim

    def now_ns(self) -> int:
        return round(self.sim.now * 1e9)

    def sleep_until(self, t_ns: int) -> None:
        self.sim.run(max(0.0, t_ns / 1e9 - self.sim.now))


class SimChaos:
    """The fault table of a simulated cluster: the netns engine's fault kinds, arguments and ids."""

    PLAN_AHEAD = False  # plan() takes effect in virtual time at once: no dormant install needed

    def __init__(self, cluster: SimCluster) -> None:
        self.cluster = cluster
        self.records: list[dict[str, Any]] = []  # added now, or planned (with a `window`, in force while active)
        self._active: set[str] = set()  # planned faults whose window is open
        self._next = 0
        self._rules: dict[tuple[str, str, str], MessageRule] = {}  # (fault id, src, dst) -> its rule, counts kept
        self._generation = 0  # a new plan() cancels the switches of the previous one

    @property
    def sim(self) -> Simulation:
        return self.cluster.sim

    def normalize(self, kind: str, args: dict[str, Any]) -> dict[str, Any]:
        return normalize(kind, args, list(self.cluster.members), self.cluster.spec.transport)

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
        sim.links = new_links
        sim.rules = rules

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


class SimCluster(Cluster):
    backend_name = "sim"

    def __init__(self, spec: ClusterSpec, *, label: str | None = None, workdir: Path | None = None) -> None:
        super().__init__(spec, label=label, workdir=workdir)
        self.sim = Simulation(
            spec.members,
            seed=spec.seed,
            stack=spec.stack,
            properties=spec.properties,
            cluster="sim",
            sender_poll=POLL,  # paced as a real member's sender loop: what fell due within 1 ms goes out together
        )
        self.clock = SimClock(self.sim)
        self._chaos = SimChaos(self)
        self._tasks: dict[str, dict[int, dict[str, object]]] = {}  # member -> task id -> progress
        self._written = False
        for name in spec.members:
            self.members[name] = MemberInfo(name, "sim", 0, history=str(self.workdir / "history" / f"{name}.jsonl"))

    def start(self, timeout: float = 30.0) -> SimCluster:
        (self.workdir / "history").mkdir(parents=True, exist_ok=True)
        return self

    def down(self) -> None:
        self._write_histories()
        self._chaos.shutdown()

    def _write_histories(self) -> None:
        if not self._written:
            self._written = True
            self.sim.write_histories(self.workdir)

    def _member(self, name: str) -> SimMember:
        if name not in self.members:
            raise ClusterError(f"no member {name!r}; members: {', '.join(self.members)}")
        return self.sim.member(name)

    def _running(self, name: str) -> SimMember:
        m = self._member(name)
        if not m.alive:
            raise ClusterError(f"member {name} is not running")
        return m

    # --- member faults ------------------------------------------------------------------------------------------------

    def kill(self, name: str) -> None:
        self._running(name)
        self.sim.crash(name)
        self.members[name].paused = False

    def restart(self, name: str, timeout: float = 30.0) -> None:
        if self._member(name).alive:
            raise ClusterError(f"member {name} is running; kill it first")
        m = self.sim.restart(name)
        self.members[name].incarnation = m.incarnation
        self._tasks.pop(name, None)

    def pause(self, name: str) -> None:
        self._running(name)
        self.sim.pause(name)
        self.members[name].paused = True

    def resume(self, name: str) -> None:
        self._running(name)
        self.sim.resume(name)
        self.members[name].paused = False

    def running(self) -> list[str]:
        return self.sim.live()

    def stop_members(self) -> None:
        self.sim.finish()
        self._write_histories()

    @property
    def chaos(self) -> SimChaos:
        return self._chaos

    # --- control ------------------------------------------------------------------------------------------------

    def control(self, name: str, cmd: str, *, timeout: float = 10.0, **args: Any) -> dict[str, Any]:
        """The replies node/control.py gives: node/commands.py answers both, here against the simulated member."""
        self._running(name)
        if self.members[name].paused:
            raise ClusterError(f"member {name} is paused: it does not answer {cmd}")
        member = SimControlledMember(self.sim, name, self.members, self._tasks.setdefault(name, {}))
        reply = commands.handle(member, {"cmd": cmd, **args})
        if not reply["ok"]:
            raise ClusterError(f"member {name}: {reply['error']}")
        return reply
