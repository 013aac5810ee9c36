"""The simulator as a Cluster backend: the deterministic Simulation (orchestration/sim/simulation.py) behind the same
API as the process and netns backends, so one scheduler and one runner drive all three.

Time is the simulation's virtual time: `clock.sleep_until(t)` runs the simulation up to t, so waiting for a view or
for quiet costs no real time. Control commands are answered from the simulated members' stacks (the same replies as
node/control.py), member faults act on the simulated members, and the fault table (`chaos`) takes the same fault
kinds and arguments as the netns engine (chaos/normalize.py, Fault.links): every change recomputes each
directed link and the message rules from the faults in force, as the engine re-renders each namespace's rules.
Histories are written to `<workdir>/history/` when the members stop or the cluster goes down.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

from node.workload import POLL
from orchestration.cluster import Cluster, ClusterError, ClusterSpec, ControlReply, MemberInfo
from orchestration.sim.faults import SimFaultTable
from orchestration.sim.member import SimMember
from orchestration.sim.simulation import Simulation


class SimClock:
    """The simulation's virtual time in ns; sleeping runs the simulation."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim

    def now_ns(self) -> int:
        return round(self.sim.now * 1e9)

    def sleep_until(self, t_ns: int) -> None:
        self.sim.run(max(0.0, t_ns / 1e9 - self.sim.now))


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
        self._chaos = SimFaultTable(self.sim, list(spec.members), spec.transport)
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
    def chaos(self) -> SimFaultTable:
        return self._chaos

    # --- control ------------------------------------------------------------------------------------------------

    def control(self, name: str, cmd: str, *, timeout: float = 10.0, **args: object) -> ControlReply:
        """The replies node/control.py gives, computed from the simulated member."""
        m = self._running(name)
        if self.members[name].paused:
            raise ClusterError(f"member {name} is paused: it does not answer {cmd}")
        handler = getattr(self, f"_cmd_{cmd}", None)
        if handler is None:
            raise ClusterError(f"member {name}: unknown command {cmd!r}")
        try:
            return cast(ControlReply, {"ok": True, **handler(name, m, **args)})  # the keys node/control.py replies
        except (KeyError, TypeError, ValueError) as e:
            raise ClusterError(f"member {name}: {cmd}: {e}") from None

    def _cmd_ping(self, name: str, m: SimMember) -> dict[str, object]:
        return {"member": name, "address": m.address, "pid": None, "incarnation": m.incarnation}

    def _cmd_stats(self, name: str, m: SimMember) -> dict[str, object]:
        counters: dict[str, object] = dict(m.stack.counters())
        counters["unacked_by_peer"] = m.stack.unacked_by_peer()
        counters["waiting_on"] = m.stack.waiting_on()
        counters["multicast_heard"] = m.stack.multicast_heard()
        return {"counters": counters}

    def _cmd_view(self, name: str, m: SimMember) -> dict[str, object]:
        view = m.stack.view
        if view is None:
            return {"view": None}
        return {"view": {"view_id": str(view.view_id), "members": list(view.members), "merge": view.is_merge}}

    def _start(
        self, name: str, kind: str, dest: str | None, count: int, size: int, rate: float | None
    ) -> dict[str, object]:
        tasks = self._tasks.setdefault(name, {})
        progress = self.sim.start_workload(name, kind, dest, int(count), size=int(size), rate=rate)
        task_id = len(tasks) + 1
        tasks[task_id] = progress
        return {"task": task_id}

    def _cmd_send(
        self, name: str, m: SimMember, *, to: str, count: int = 1, size: int = 0, rate: float | None = None
    ) -> dict[str, object]:
        if to not in self.members or to == name:
            raise ValueError(f"unknown destination {to!r}; peers: {', '.join(sorted(self.members))}")
        return self._start(name, "unicast", to, count, size, rate)

    def _cmd_multicast(
        self, name: str, m: SimMember, *, count: int = 1, size: int = 0, rate: float | None = None
    ) -> dict[str, object]:
        if m.stack.multicast_protocol is None:
            raise ValueError(f"stack {self.spec.stack} has no multicast protocol")
        return self._start(name, "multicast", None, count, size, rate)

    def _cmd_tasks(self, name: str, m: SimMember) -> dict[str, object]:
        return {"tasks": self._tasks.get(name, {})}

    def _cmd_close(self, name: str, m: SimMember, *, peer: str) -> dict[str, object]:
        self.sim.close_connection(name, peer)
        return {}

    def _cmd_set(self, name: str, m: SimMember, *, protocol: str, property: str, value: object) -> dict[str, object]:
        self.sim.set_property(name, protocol, property, value)
        return {}

    def _cmd_incarnation(self, name: str, m: SimMember, *, peer: str, incarnation: int) -> dict[str, object]:
        if peer not in self.members or int(incarnation) < 1:
            raise ValueError(f"unknown peer {peer!r} or bad incarnation {incarnation}")
        m.announced[peer] = int(incarnation)
        return {}

    def _cmd_leave(self, name: str, m: SimMember) -> dict[str, object]:
        if m.stack.gms is None:
            raise ValueError(f"stack {self.spec.stack} has no membership")
        self.sim.leave(name)
        return {}

    def _cmd_flush(self, name: str, m: SimMember) -> dict[str, object]:
        return {"events_written": len(self.sim.history[name])}
