"""The Cluster API that every backend implements: sim (in-process, virtual time), process (loopback), netns
(namespaces). The scheduler (orchestration/schedule.py), the runner, the CLI and tests talk to a cluster only
through it, so a scenario means the same thing on every backend.

A cluster has members (names), a clock (virtual in the simulator, CLOCK_MONOTONIC on real backends: the clock of
the histories), control commands per member (the JSON-lines commands of node/control.py: send, multicast, tasks,
stats, view, close, set, incarnation, ...), member faults (kill, restart, pause, resume) and, where the backend has a
network of its own, a fault table (`chaos`: add, remove, heal, faults, plan). Real backends label everything they
create (`cb` + 6 hex digits) and keep their state under STATE_ROOT/<label>/ so `chaosbed down --all` can reap it.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypedDict

from node.addresses import name_of

if TYPE_CHECKING:
    from chaos.fault_table import FaultTable

STATE_ROOT = Path(os.environ.get("CHAOSBED_STATE", "/run/chaosbed" if os.geteuid() == 0 else "/tmp/chaosbed"))
LABEL_PREFIX = "cb"
STATE_FORMAT = 2  # of state.json (orchestration/backends/state_file.py reads it); files without `format` are 1


Properties = dict[str, dict[str, object]]  # protocol name -> property -> value (a scenario's [cluster.properties])
Counters = dict[str, dict[str, float]]  # a member's `stats` counters: section (a protocol, "stack", ...) -> counters


class ClusterError(RuntimeError):
    """A cluster operation failed; the message says what and what to do."""


class MemberNotRunning(ClusterError):
    """A request to a member whose process is not running (killed, left, exited)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"member {name} is not running (killed, left or exited): `chaosbed restart {name}` starts it")
        self.name = name


class ViewInfo(TypedDict):
    """A member's current view, as its `view` command reports it."""

    view_id: str
    members: list[str]  # addresses ("B", "B/2"), coordinator first
    merge: bool


class TaskProgress(TypedDict):
    """One workload task of a member (node/workload.py's progress), as its `tasks` command reports it."""

    kind: str  # unicast | multicast
    dest: str | None
    count: int
    sent: int
    done: bool


class ControlReply(TypedDict, total=False):
    """A member's reply to a control command (node/control.py; docs/scenario-format.md's control contract): `ok`, and
    the keys of the command that was asked."""

    ok: bool
    error: str
    member: str  # ping
    address: str  # ping
    pid: int | None  # ping
    incarnation: int  # ping
    counters: Counters  # stats
    max_rss_kib: int  # stats (a real member)
    cpu_s: float  # stats (a real member)
    view: ViewInfo | None  # view
    task: int  # send, multicast
    tasks: dict[str, TaskProgress]  # tasks, by task id
    events_written: int  # flush
    bye: bool  # shutdown


@dataclass
class MemberInfo:
    name: str
    ip: str
    port: int
    incarnation: int = 1
    pid: int | None = None
    netns: str | None = None
    config: str = ""
    history: str = ""
    paused: bool = False

    @property
    def control_port(self) -> int:
        return self.port + 1


@dataclass
class ClusterSpec:
    members: list[str]
    stack: str = "unicast3"
    transport: str = "udp"
    properties: Properties = field(default_factory=dict)
    backend: str = "process"
    seed: int = 0  # the simulator's seed (network and member randomness); real backends ignore it
    system: dict[str, object] | None = None  # a foreign system (orchestration/systems/: System.to_dict()), or chaosbed


def new_label() -> str:
    return LABEL_PREFIX + secrets.token_hex(3)


def member_names(n: int) -> list[str]:
    if not 1 <= n <= 26:
        raise ClusterError(f"a cluster has 1..26 members, not {n}")
    return [chr(ord("A") + i) for i in range(n)]


# --- clocks ---------------------------------------------------------------------------------------------------------


class Clock(Protocol):
    """The time of a cluster: histories, faults.jsonl and the schedule all read it."""

    def now_ns(self) -> int: ...

    def sleep_until(self, t_ns: int) -> None: ...


class RealClock:
    """CLOCK_MONOTONIC, the clock the members write their histories with."""

    SPIN_NS = 2_000_000  # the last 2 ms are slept in 0.2 ms steps, so an action starts within ~0.3 ms of its time

    def now_ns(self) -> int:
        return time.monotonic_ns()

    def sleep_until(self, t_ns: int) -> None:
        while (left := t_ns - time.monotonic_ns()) > 0:
            time.sleep((left - self.SPIN_NS) / 1e9 if left > self.SPIN_NS else 0.0002)


# --- the API --------------------------------------------------------------------------------------------------------


class Cluster(ABC):
    """A cluster on some backend. Subclasses implement the abstract methods; the waiting helpers are shared."""

    backend_name = "base"
    clock: Clock

    def __init__(self, spec: ClusterSpec, *, label: str | None = None, workdir: Path | None = None) -> None:
        self.spec = spec
        self.label = label or new_label()
        self.state_dir = STATE_ROOT / self.label
        self.workdir = Path(workdir) if workdir else self.state_dir
        self.members: dict[str, MemberInfo] = {}

    @abstractmethod
    def start(self, timeout: float = 30.0) -> Cluster:
        """Starts every member; returns self once each answers its control commands."""

    def _write_state(self, token: str, network: Mapping[str, object]) -> None:
        """state.json in the state folder (written atomically), which orchestration.backends.attach reads back: the
        spec, the control token, the members and what the backend keeps of its network."""
        state = {
            "format": STATE_FORMAT,
            "label": self.label,
            "backend": self.backend_name,
            "spec": asdict(self.spec),
            "token": token,
            "workdir": str(self.workdir),
            "members": {n: asdict(m) for n, m in self.members.items()},
            "network": dict(network),
        }
        tmp = self.state_dir / "state.json.tmp"
        tmp.write_text(json.dumps(state, indent=1))
        tmp.replace(self.state_dir / "state.json")

    @abstractmethod
    def down(self) -> None:
        """Stops every member and removes everything the cluster created (histories stay). Idempotent."""

    @abstractmethod
    def kill(self, name: str) -> None:
        """The member stops at once, without a `stop` event (SIGKILL)."""

    @abstractmethod
    def restart(self, name: str, timeout: float = 30.0) -> None:
        """Starts a killed member again as a new incarnation (address "B/2")."""

    @abstractmethod
    def pause(self, name: str) -> None:
        """SIGSTOP: the member neither runs nor reads until resumed; what arrives waits in its receive buffer."""

    @abstractmethod
    def resume(self, name: str) -> None: ...

    def leave(self, name: str) -> None:
        """The member leaves the group gracefully (LEAVE_REQ, or installs the next view if it is the coordinator);
        once its membership protocol is done it stops by itself (the real member exits after its `stop` event), as
        a JGroups member disconnects. Returns at once: the leave takes protocol time, like any fault."""
        if name not in self.running():
            raise ClusterError(f"member {name} is not running")
        self.control(name, "leave")

    @abstractmethod
    def control(self, name: str, cmd: str, *, timeout: float = 10.0, **args: object) -> ControlReply:
        """One control command (node/control.py) to a member; returns the reply (ClusterError if not ok)."""

    @abstractmethod
    def running(self) -> list[str]:
        """Names of the members that are running (paused ones included)."""

    @abstractmethod
    def stop_members(self) -> None:
        """Graceful end: every running member writes its `stop` event and stops."""

    @property
    def chaos(self) -> FaultTable:
        """The cluster's network fault table (chaos/fault_table.py: add, remove, heal, faults, plan, ...). ClusterError
        on backends without a network of their own."""
        sim = ", or --backend sim" if self.spec.system is None else ""  # the simulator runs chaosbed's own only
        raise ClusterError(
            f"the {self.backend_name} backend has no network faults (its members share the host's loopback): use "
            f"--backend netns (as root) for partitions, loss, delay and discard rules{sim}"
        )

    def host_clocks(self) -> dict[str, dict[str, object]] | None:
        """Per host of a cluster spread over several (swarm), its clock against the orchestrator's, for faults.jsonl;
        None on one machine's one clock."""
        return None

    # --- shared -----------------------------------------------------------------------------------------------------

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def sleep(self, seconds: float) -> None:
        """Lets `seconds` pass on the cluster's clock (the simulator runs that long)."""
        self.clock.sleep_until(self.clock.now_ns() + round(seconds * 1e9))

    def wait_until(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        """Polls condition every 50 ms of the cluster's clock until it holds; ClusterError at the deadline."""
        deadline = self.clock.now_ns() + round(timeout * 1e9)
        while self.clock.now_ns() < deadline:
            if condition():
                return
            self.sleep(0.05)
        if condition():
            return
        raise ClusterError(f"timed out after {timeout:g}s waiting for {what}")

    def views(self) -> dict[str, ViewInfo | None]:
        """Each running (not paused) member's current view: {"view_id", "members", "merge"}, or None."""
        return {n: self.control(n, "view")["view"] for n in self.running() if not self.members[n].paused}

    def wait_for_view(self, members: list[str] | None = None, timeout: float = 30.0) -> ViewInfo:
        """Waits until every running member has installed the same view, with exactly `members` (names; default:
        the running members); returns it. Raises ClusterError at the deadline, naming what each member has."""
        want = set(members) if members is not None else set(self.running())
        seen: dict[str, ViewInfo | None] = {}

        def agreed() -> bool:
            seen.clear()
            seen.update(self.views())
            ids = {v["view_id"] if v else None for v in seen.values()}
            return len(ids) == 1 and all(
                v is not None and {name_of(m) for m in v["members"]} == want for v in seen.values()
            )

        try:
            self.wait_until(agreed, timeout, f"one view of {sorted(want)}")
        except ClusterError:
            have = ", ".join(f"{n}: {v['view_id'] if v else None} {v['members'] if v else ''}" for n, v in seen.items())
            raise ClusterError(f"no common view of {sorted(want)} within {timeout:g}s; views: {have}") from None
        view = next(iter(seen.values()))
        assert view is not None  # agreed: every member has it
        return view


# --- the clusters of this state root ----------------------------------------------------------------------------------


def list_clusters() -> list[str]:
    if not STATE_ROOT.exists():
        return []
    return sorted(p.name for p in STATE_ROOT.iterdir() if p.name.startswith(LABEL_PREFIX) and p.is_dir())
