"""A cluster that records its faults: every fault done through the test's cluster (the fault table's add, remove and
heal, kill, restart, pause, resume, leave, the control commands `close` and `set`) is appended to faults.jsonl next
to its histories, so the checker knows who was killed, restarted or left and when the network healed."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestration.cluster import Cluster

FAULTS_FILE = "faults.jsonl"


class RecordingChaos:
    """A cluster's fault table that appends each fault and heal to the cluster's faults.jsonl (the records of
    `chaosbed fault`: chaos.engine.fault_event / heal_event, `t` on the cluster's clock)."""

    def __init__(self, inner: Any, cluster: Any) -> None:
        self._inner = inner
        self._cluster = cluster

    def add(self, kind: str, args: dict[str, Any], *, seed: int | None = None) -> dict[str, Any]:
        from chaos.engine import fault_event
        from orchestration.cluster import ClusterError
        from orchestration.systems import system_of
        from orchestration.systems.definition import fault_refusal

        refused = fault_refusal(system_of(self._cluster.spec.system), kind)  # as a scenario file would be
        if refused:
            raise ClusterError(refused)
        t = self._cluster.clock.now_ns()  # from before: the fault may act while it is being installed
        record = self._inner.add(kind, args, seed=self._cluster.spec.seed if seed is None else seed)
        self._cluster.record_fault({**fault_event(record), "t": t})
        return record

    def remove(self, ids: list[str]) -> list[dict[str, Any]]:
        from chaos.engine import heal_event

        gone = self._inner.remove(ids)
        seed, t = self._cluster.spec.seed, self._cluster.clock.now_ns()
        self._cluster.record_fault({**heal_event(list(ids), seed), "t": t})
        return gone

    def heal(self) -> list[dict[str, Any]]:
        from chaos.engine import heal_event

        gone = self._inner.heal()  # `t` from after: the faults ended by then
        self._cluster.record_fault({**heal_event(None, self._cluster.spec.seed), "t": self._cluster.clock.now_ns()})
        return gone

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class RecordingCluster(Cluster):
    """Mixed in before a backend's class (recording_class): member faults and the fault table's changes go to
    faults.jsonl, so the checker knows who was killed, restarted or left and when the network healed."""

    @property
    def faults_file(self) -> Path:
        return Path(self.workdir) / FAULTS_FILE

    def record_fault(self, event: dict[str, Any]) -> None:
        from chaos.engine import append_log

        append_log(self.faults_file, event)

    def record_start(self) -> None:
        """The `start` line (SCENARIO.md "Fault timing"): the clock, seed and backend of the test's run."""
        self.faults_file.unlink(missing_ok=True)
        self.record_fault(
            {"event": "start", "t": self.clock.now_ns(), "seed": self.spec.seed, "backend": self.backend_name}
        )

    def _member_fault(self, kind: str, name: str, action: Callable[[], None]) -> None:
        t = self.clock.now_ns()  # when it started, as the scheduler logs member actions
        action()
        self.record_fault({"t": t, "event": "fault", "seed": self.spec.seed, "kind": kind, "member": name})

    def kill(self, name: str) -> None:
        self._member_fault("kill", name, lambda: super(RecordingCluster, self).kill(name))

    def restart(self, name: str, timeout: float = 30.0) -> None:
        self._member_fault("restart", name, lambda: super(RecordingCluster, self).restart(name, timeout))

    def pause(self, name: str) -> None:
        self._member_fault("pause", name, lambda: super(RecordingCluster, self).pause(name))

    def resume(self, name: str) -> None:
        self._member_fault("resume", name, lambda: super(RecordingCluster, self).resume(name))

    def leave(self, name: str) -> None:
        self._member_fault("leave", name, lambda: super(RecordingCluster, self).leave(name))

    def control(self, name: str, cmd: str, *, timeout: float = 10.0, **args: Any) -> dict[str, Any]:
        """Closing a connection and setting a property are member faults of scenario files: recorded as such."""
        t = self.clock.now_ns()
        reply = super().control(name, cmd, timeout=timeout, **args)
        fault: dict[str, Any] | None = None
        if cmd == "close":
            fault = {"kind": "close-connection", "member": name, "peer": args.get("peer")}
        elif cmd == "set":
            prop = f"{args.get('protocol')}.{args.get('property')}"
            fault = {"kind": "set", "member": name, "property": prop, "value": args.get("value")}
        if fault is not None:
            self.record_fault({"t": t, "event": "fault", "seed": self.spec.seed, **fault})
        return reply

    @property
    def chaos(self) -> RecordingChaos:
        return RecordingChaos(super().chaos, self)


@functools.cache
def recording_class(cls: type) -> type:
    """The backend's Cluster class with RecordingCluster mixed in (still an instance of the backend's class)."""
    return type(f"Recording{cls.__name__}", (RecordingCluster, cls), {"__doc__": cls.__doc__})
