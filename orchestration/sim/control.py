"""A simulated member as node/commands.py's ControlledMember: the simulator's control (SimCluster.control) answers
the member control commands with the same implementation as a real member's endpoint (node/control.py)."""

from __future__ import annotations

from collections.abc import Collection

from node.commands import Usage, process_usage
from node.stack import Stack
from node.workload import Progress
from orchestration.sim.member import SimMember
from orchestration.sim.simulation import Simulation


class SimControlledMember:
    """The running incarnation of member `name` of a simulation. `peers` are the cluster's member names, `tasks` the
    registry of this incarnation's workload tasks (the cluster keeps it, and drops it on a restart)."""

    def __init__(self, sim: Simulation, name: str, peers: Collection[str], tasks: dict[int, Progress]) -> None:
        self.sim = sim
        self.name = name
        self.peers = peers
        self.tasks = tasks

    @property
    def _member(self) -> SimMember:
        return self.sim.member(self.name)

    @property
    def address(self) -> str:
        return self._member.address

    @property
    def incarnation(self) -> int:
        return self._member.incarnation

    @property
    def pid(self) -> int | None:
        return None  # the simulated members share the simulator's process

    @property
    def stack_name(self) -> str:
        return self.sim.stack_name

    @property
    def stack(self) -> Stack:
        return self._member.stack

    def counters(self) -> dict[str, object]:
        stack = self._member.stack
        counters: dict[str, object] = dict(stack.counters())
        counters.update(stack.progress())
        return counters

    def usage(self) -> Usage:
        return process_usage()  # the simulator's process, which runs every member

    def start_workload(self, kind: str, dest: str | None, count: int, size: int, rate: float | None) -> Progress:
        return self.sim.start_workload(self.name, kind, dest, count, size=size, rate=rate)

    def close_connection(self, peer: str) -> None:
        self.sim.close_connection(self.name, peer)

    def set_property(self, protocol: str, name: str, value: object) -> None:
        self.sim.set_property(self.name, protocol, name, value)

    def announce_incarnation(self, peer: str, incarnation: int) -> None:
        self._member.announced[peer] = incarnation

    def flush_history(self) -> int:
        return len(self.sim.history[self.name])  # in memory: every event is written as it happens

    def leave(self) -> None:
        self.sim.leave(self.name)

    def shutdown(self) -> None:
        self.sim.stop_member(self.name)
