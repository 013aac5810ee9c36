"""The member control commands, sans-IO: request validation and reply building in one place.

A request is a JSON object {"cmd": ..., field: value, ...}; the reply is {"ok": true, ...} or {"ok": false, "error":
"..."}. `handle(member, request)` answers one request against any `ControlledMember`: node/control.py (the TCP
endpoint of a real member, which also checks the token and parses the line) and the simulator's control
(orchestration/sim/cluster.py) both call it, so their commands, reply shapes and error texts are the same
by construction.

Commands: ping | stats | view | send (to, count, size, rate) | multicast (count, size, rate) | tasks | close (peer) |
set (protocol, property, value) | incarnation (peer, incarnation) | flush | leave | shutdown
"""

from __future__ import annotations

import resource
from collections.abc import Callable, Collection, Mapping
from typing import NamedTuple, Protocol

from node.stack import Stack
from node.units import float_of, int_of
from node.workload import Progress

Request = Mapping[str, object]  # as json.loads gives it: each command converts and checks the fields it reads
Reply = dict[str, object]  # JSON-encodable


class Usage(NamedTuple):
    """The resources of the process a member runs in (`stats`)."""

    max_rss_kib: int
    cpu_s: float


def process_usage() -> Usage:
    """This process's peak resident memory and CPU time (user + system)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return Usage(usage.ru_maxrss, usage.ru_utime + usage.ru_stime)


class ControlledMember(Protocol):
    """What a member offers its control commands: a running member process (node/control.py) or a simulated
    member (the simulator's adapter)."""

    @property
    def name(self) -> str: ...

    @property
    def address(self) -> str:
        """This incarnation's address ("B", "B/2")."""

    @property
    def incarnation(self) -> int: ...

    @property
    def pid(self) -> int | None:
        """The member's process id (None: it has no process of its own)."""

    @property
    def stack_name(self) -> str: ...

    @property
    def stack(self) -> Stack: ...

    @property
    def peers(self) -> Collection[str]:
        """The names of the cluster's members, this one's included."""

    @property
    def tasks(self) -> dict[int, Progress]:
        """This incarnation's workload tasks by id (1, 2, ...): the registry `send` and `multicast` add to."""

    def counters(self) -> dict[str, object]:
        """The `stats` counters: the stack's per protocol, and what the member adds."""

    def usage(self) -> Usage: ...

    def start_workload(self, kind: str, dest: str | None, count: int, size: int, rate: float | None) -> Progress:
        """Starts a workload task now (node/workload.py): unicasts to member `dest`, or multicasts with dest None;
        returns its progress, updated as it runs."""

    def close_connection(self, peer: str) -> None:
        """Closes the unicast connection to member `peer` (its current address)."""

    def set_property(self, protocol: str, name: str, value: object) -> None: ...

    def announce_incarnation(self, peer: str, incarnation: int) -> None:
        """The orchestrator announces a peer's new incarnation (for stacks without membership)."""

    def flush_history(self) -> int:
        """Writes the buffered history events; returns how many events the history holds (`flush`)."""

    def leave(self) -> None:
        """Leaves the group gracefully."""

    def shutdown(self) -> None:
        """Stops gracefully (its `stop` event is written), as on SIGTERM."""


# --- the commands ---------------------------------------------------------------------------------------------------


def _ping(m: ControlledMember, req: Request) -> Reply:
    return {"member": m.name, "address": m.address, "pid": m.pid, "incarnation": m.incarnation}


def _stats(m: ControlledMember, req: Request) -> Reply:
    usage = m.usage()
    return {"counters": m.counters(), "max_rss_kib": usage.max_rss_kib, "cpu_s": usage.cpu_s}


def _view(m: ControlledMember, req: Request) -> Reply:
    view = m.stack.view
    if view is None:
        return {"view": None}
    return {"view": {"view_id": str(view.view_id), "members": list(view.members), "merge": view.is_merge}}


def _start_task(m: ControlledMember, kind: str, dest: str | None, req: Request) -> Reply:
    count = int_of(req.get("count", 1))
    size = int_of(req.get("size", 0))
    rate_field = req.get("rate")
    rate = float_of(rate_field) if rate_field is not None else None
    if count < 0 or size < 0 or (rate is not None and rate <= 0):
        raise ValueError("count and size must be >= 0, rate > 0")
    progress = m.start_workload(kind, dest, count, size, rate)
    tasks = m.tasks
    task_id = len(tasks) + 1
    tasks[task_id] = progress  # {"kind", "dest", "count", "sent", "done"}, updated as it runs
    return {"task": task_id}


def _send(m: ControlledMember, req: Request) -> Reply:
    dest = req["to"]
    if not isinstance(dest, str) or dest not in m.peers or dest == m.name:
        raise ValueError(f"unknown destination {dest!r}; peers: {', '.join(sorted(m.peers))}")
    return _start_task(m, "unicast", dest, req)


def _multicast(m: ControlledMember, req: Request) -> Reply:
    if m.stack.multicast_protocol is None:
        raise ValueError(f"stack {m.stack_name} has no multicast protocol")
    return _start_task(m, "multicast", None, req)


def _tasks(m: ControlledMember, req: Request) -> Reply:
    return {"tasks": m.tasks}


def _close(m: ControlledMember, req: Request) -> Reply:
    peer = req["peer"]
    if not isinstance(peer, str) or peer not in m.peers:
        raise ValueError(f"unknown peer {peer!r}; peers: {', '.join(sorted(m.peers))}")
    m.close_connection(peer)
    return {}


def _set(m: ControlledMember, req: Request) -> Reply:
    protocol, name = req["protocol"], req["property"]
    if not isinstance(protocol, str) or not isinstance(name, str):
        raise TypeError(f"protocol and property are names, not {protocol!r} and {name!r}")
    m.set_property(protocol, name, req["value"])
    return {}


def _incarnation(m: ControlledMember, req: Request) -> Reply:
    peer, incarnation = req["peer"], int_of(req["incarnation"])
    if not isinstance(peer, str) or peer not in m.peers or incarnation < 1:
        raise ValueError(f"unknown peer {peer!r} or bad incarnation {incarnation}")
    m.announce_incarnation(peer, incarnation)
    return {}


def _flush(m: ControlledMember, req: Request) -> Reply:
    return {"events_written": m.flush_history()}


def _leave(m: ControlledMember, req: Request) -> Reply:
    if m.stack.gms is None:
        raise ValueError(f"stack {m.stack_name} has no membership")
    m.leave()
    return {}


def _shutdown(m: ControlledMember, req: Request) -> Reply:
    m.shutdown()
    return {"bye": True}  # the TCP endpoint closes the connection after this reply


_COMMANDS: dict[str, Callable[[ControlledMember, Request], Reply]] = {
    "ping": _ping,
    "stats": _stats,
    "view": _view,
    "send": _send,
    "multicast": _multicast,
    "tasks": _tasks,
    "close": _close,
    "set": _set,
    "incarnation": _incarnation,
    "flush": _flush,
    "leave": _leave,
    "shutdown": _shutdown,
}
COMMANDS = sorted(_COMMANDS)


def handle(member: ControlledMember, req: Request) -> Reply:
    """The reply to one request: {"ok": True, ...} or {"ok": False, "error": ...} (an unknown command, or a field
    the command refuses: the error names the command)."""
    cmd = req.get("cmd")
    command = _COMMANDS.get(cmd) if isinstance(cmd, str) else None
    if command is None:
        return {"ok": False, "error": f"unknown command {cmd!r}; commands: {', '.join(COMMANDS)}"}
    try:
        result = command(member, req)
    except (KeyError, TypeError, ValueError) as e:
        return {"ok": False, "error": f"{cmd}: {e}"}
    return {"ok": True, **result}
