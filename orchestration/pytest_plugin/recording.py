"""A cluster that records its faults: every fault done through the test's cluster (the fault table's add, remove and
heal, kill, restart, pause, resume, leave, the control commands `close` and `set`) is appended to faults.jsonl next
to its histories, so the checker knows who was killed, restarted or left and when the network healed."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import ClassVar, cast

from chaos.fault_table import FaultTable, QueueBypass
from chaos.faults import Fault, FaultRecord, TimedFault
from orchestration.cluster import Cluster, ControlReply
from orchestration.fault_log import FILE, FaultLog


class RecordingFaultTable:
    """A cluster's fault table that appends each fault and heal to the cluster's faults.jsonl (the records of
    `chaosbed fault`, `t` on the cluster's clock); everything else is the inner table's. `inner`: the table it
    records for (the netns engine's own operations, kernel_counters, handler_stats, ..., are there)."""

    def __init__(self, inner: FaultTable, cluster: RecordingCluster) -> None:
        self.inner = inner
        self._cluster = cluster

    @property
    def plan_ahead(self) -> bool:
        return self.inner.plan_ahead

    def normalize(self, kind: str, args: Mapping[str, object]) -> Fault:
        return self.inner.normalize(kind, args)

    def add(self, kind: str, args: Mapping[str, object], *, seed: int | None = None) -> FaultRecord:
        """Applies the fault (with the cluster's seed unless given) and records it; a fault the cluster's system
        cannot take (a discard without a wire profile) is refused as a scenario file's would be."""
        from orchestration.cluster import ClusterError
        from orchestration.systems import system_of
        from orchestration.systems.definition import fault_refusal

        refused = fault_refusal(system_of(self._cluster.spec.system), kind, self._cluster.spec.transport)
        if refused:
            raise ClusterError(refused)
        t = self._cluster.clock.now_ns()  # from before: the fault may act while it is being installed
        record = self.inner.add(kind, args, seed=self._cluster.spec.seed if seed is None else seed)
        self._cluster.fault_log.fault(record, t=t)
        return record

    def remove(self, ids: Sequence[str]) -> list[FaultRecord]:
        gone = self.inner.remove(ids)
        self._cluster.fault_log.heal(ids, t=self._cluster.clock.now_ns(), seed=self._cluster.spec.seed)
        return gone

    def heal(self) -> list[FaultRecord]:
        gone = self.inner.heal()  # `t` from after: the faults ended by then
        self._cluster.fault_log.heal(None, t=self._cluster.clock.now_ns(), seed=self._cluster.spec.seed)
        return gone

    def plan(self, faults: Sequence[TimedFault], t0_ns: int) -> None:
        self.inner.plan(faults, t0_ns)  # the scheduler logs what it plans itself

    def faults(self, *, stats: bool = True) -> list[FaultRecord]:
        return self.inner.faults(stats=stats)

    def clock_offset(self) -> int | None:
        return self.inner.clock_offset()

    def queue_bypass(self) -> Mapping[str, QueueBypass]:
        return self.inner.queue_bypass()

    def shutdown(self) -> None:
        self.inner.shutdown()


def _is_a_fault_table(table: RecordingFaultTable) -> FaultTable:
    return table  # mypy checks that the recording table implements the protocol


class RecordingCluster(Cluster):
    """Mixed in before a backend's class (recording_class): member faults and the fault table's changes go to
    faults.jsonl, so the checker knows who was killed, restarted or left and when the network healed. `backend` is
    the backend's class, which does the work (recording_class sets it)."""

    backend: ClassVar[type[Cluster]]

    @property
    def faults_file(self) -> Path:
        return Path(self.workdir) / FILE

    @property
    def fault_log(self) -> FaultLog:
        return FaultLog(self.faults_file)

    def record_start(self) -> None:
        """The `start` line (docs/scenario-format.md "Fault timing"): the clock, seed and backend of the test's run."""
        self.faults_file.unlink(missing_ok=True)
        self.fault_log.start(t=self.clock.now_ns(), seed=self.spec.seed, backend=self.backend_name)

    def _member_fault(self, kind: str, name: str, action: Callable[[], None]) -> None:
        t = self.clock.now_ns()  # when it started, as the scheduler logs member actions
        action()
        self.fault_log.action(kind, {"member": name}, t=t, seed=self.spec.seed)

    def kill(self, name: str) -> None:
        self._member_fault("kill", name, lambda: self.backend.kill(self, name))

    def restart(self, name: str, timeout: float = 30.0) -> None:
        self._member_fault("restart", name, lambda: self.backend.restart(self, name, timeout))

    def pause(self, name: str) -> None:
        self._member_fault("pause", name, lambda: self.backend.pause(self, name))

    def resume(self, name: str) -> None:
        self._member_fault("resume", name, lambda: self.backend.resume(self, name))

    def leave(self, name: str) -> None:
        self._member_fault("leave", name, lambda: self.backend.leave(self, name))

    def control(self, name: str, cmd: str, *, timeout: float = 10.0, **args: object) -> ControlReply:
        """Closing a connection and setting a property are member faults of scenario files: recorded as such."""
        t = self.clock.now_ns()
        reply = self.backend.control(self, name, cmd, timeout=timeout, **args)
        if cmd == "close":
            self.fault_log.action(
                "close-connection", {"member": name, "peer": args.get("peer")}, t=t, seed=self.spec.seed
            )
        elif cmd == "set":
            prop = f"{args.get('protocol')}.{args.get('property')}"
            fields = {"member": name, "property": prop, "value": args.get("value")}
            self.fault_log.action("set", fields, t=t, seed=self.spec.seed)
        return reply

    @property
    def chaos(self) -> RecordingFaultTable:
        return RecordingFaultTable(super().chaos, self)


@functools.cache
def recording_class(cls: type[Cluster]) -> type[RecordingCluster]:
    """The backend's Cluster class with RecordingCluster mixed in (still an instance of the backend's class)."""
    mixed = type(f"Recording{cls.__name__}", (RecordingCluster, cls), {"__doc__": cls.__doc__, "backend": cls})
    return cast(type[RecordingCluster], mixed)  # a subclass of both
