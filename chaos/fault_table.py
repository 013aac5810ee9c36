"""The fault table of a cluster, as the scheduler, the CLI and the pytest plugin use it: one protocol that the netns
engine (chaos/netns_engine.py), the simulator's table (orchestration/sim/faults.py) and the plugin's recording table
(orchestration/pytest_plugin/recording.py) implement. Here, in chaos/, because chaos/ cannot import orchestration/.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

from chaos.faults import Fault, FaultRecord, TimedFault


class FaultTable(Protocol):
    """Network faults in force on one cluster. Faults are given as a kind and its arguments (node/fault_kinds.py,
    as scenario files and `chaosbed fault` write them), or planned ahead as TimedFaults; records come back typed."""

    @property
    def plan_ahead(self) -> bool:
        """plan() may be slow (the netns engine starts handler processes): the scheduler first installs the plan
        dormant, far in the future, then moves it to the real t0. False: plan() takes effect at once (virtual time)."""
        ...

    def normalize(self, kind: str, args: Mapping[str, object]) -> Fault:
        """The fault these arguments describe on this cluster (ChaosError if they describe none)."""
        ...

    def add(self, kind: str, args: Mapping[str, object], *, seed: int = 0) -> FaultRecord:
        """Applies one fault now; returns its record (with its id)."""
        ...

    def remove(self, ids: Sequence[str]) -> list[FaultRecord]:
        """Removes the faults with these ids (an unknown id is a ChaosError); returns their records."""
        ...

    def heal(self) -> list[FaultRecord]:
        """Removes every fault; returns their records."""
        ...

    def plan(self, faults: Sequence[TimedFault], t0_ns: int) -> None:
        """Installs scheduled faults, each switched on and off by the cluster's clock at its window (seconds after
        t0_ns). Planning the same ids again replaces their windows."""
        ...

    def faults(self, *, stats: bool = True) -> list[FaultRecord]:
        """The faults in force (planned ones included), with what their rules acted on if `stats`."""
        ...

    def clock_offset(self) -> int | None:
        """CLOCK_REALTIME - CLOCK_MONOTONIC as sampled by the last plan() (None: no wall clock involved)."""
        ...

    def queue_bypass(self) -> Mapping[str, QueueBypass]:
        """Per receiving member, the packets its protocol-aware rules did not judge (see QueueBypass)."""
        ...

    def shutdown(self) -> None:
        """Stops whatever the table runs (handler processes), without touching rules. Idempotent."""
        ...


@dataclass(frozen=True)
class QueueBypass:
    """What one member's NFQUEUE handler missed. The queue is fail-open (chaos/nfqueue/netlink.py): a packet that
    finds the queue full (`full_queue`; the kernel counts it nowhere, so it is the queue rules' packet count minus
    what the kernel numbered) or the handler's socket buffer full (`overflowed`, numbered but never read) is
    accepted, not dropped: it escapes every handler rule. `dropped`: a full queue on kernels without fail-open.
    Packets in flight when it is asked (numbered, not yet read) count as overflowed: a handful at most.
    `unknown_shapes`: datagrams of the cluster's wire that the handler judged but could not read (a shape the wire
    profile does not know: another release's layout, an unknown header or object): passed untouched, no message rule
    acted on them."""

    member: str
    queued: int  # packets the queue rules took since they were last installed
    full_queue: int
    overflowed: int
    dropped: int
    faults: list[str]  # the faults with rules at this member
    unknown_shapes: int = 0

    IN_FLIGHT: ClassVar[int] = 16  # numbered but not yet read when asked: below this, overflowed is not a bypass

    @property
    def bypassed(self) -> int:
        return self.full_queue + (self.overflowed if self.overflowed > self.IN_FLIGHT else 0)

    def warning(self) -> str | None:
        """What a run says about it (None: every packet was judged)."""
        faults = ", ".join(self.faults) or "its rules"
        parts = []
        if self.bypassed:
            share = f" ({100 * self.bypassed / self.queued:.1f}%)" if self.queued >= self.bypassed else ""
            parts.append(
                f"the NFQUEUE handler at {self.member} could not keep up: {self.bypassed:,} of {self.queued:,} packets"
                f"{share} bypassed the protocol-aware rules ({faults}; its queue or socket buffer was full, and the "
                "kernel lets such packets through rather than drop them), so those faults acted on fewer packets "
                "than planned. A less busy machine or a lower workload rate avoids it"
            )
        if self.unknown_shapes:
            parts.append(
                f"the NFQUEUE handler at {self.member} could not read {self.unknown_shapes:,} datagrams of a shape "
                f"its wire profile does not know: they passed untouched, judged by no message rule of {faults}"
            )
        if self.dropped:
            parts.append(
                f"the NFQUEUE handler at {self.member} could not keep up: its full queue dropped {self.dropped:,} "
                f"packets that no rule of {faults} dropped (this kernel has no fail-open for queues)"
            )
        return "; ".join(parts) or None
