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

from node import commands
from node.workload import POLL, Progress
from orchestration.cluster import Cluster, ClusterError, ClusterSpec, ControlReply, MemberInfo
from orchestration.sim.control import SimControlledMember
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
        self._tasks: dict[str, dict[int, Progress]] = {}  # member -> task id -> progress
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
        """The replies node/control.py gives: node/commands.py answers both, here against the simulated member."""
        self._running(name)
        if self.members[name].paused:
            raise ClusterError(f"member {name} is paused: it does not answer {cmd}")
        member = SimControlledMember(self.sim, name, self.members, self._tasks.setdefault(name, {}))
        reply = commands.handle(member, {"cmd": cmd, **args})
        if not reply["ok"]:
            raise ClusterError(f"member {name}: {reply['error']}")
        return cast(ControlReply, reply)  # the keys node/control.py replies
