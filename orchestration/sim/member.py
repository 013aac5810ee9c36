"""The simulator's members: one incarnation's state (its stack, history writer, receive buffer while paused,
deferred actions) and its workload tasks. orchestration/sim/simulation.py drives them."""

from __future__ import annotations

from collections.abc import Callable

from node.addresses import make_address
from node.history import HistoryWriter
from node.stack import Stack
from node.workload import Workload


class SimMember:
    """One member incarnation of a simulation."""

    __slots__ = (
        "address",
        "alive",
        "announced",
        "buffer_drops",
        "deferred",
        "deliveries",
        "finished",
        "history",
        "inbox",
        "inbox_bytes",
        "incarnation",
        "name",
        "paused",
        "stack",
        "tasks",
        "timer_at",
        "waiting",
    )

    def __init__(self, name: str, incarnation: int, stack: Stack, history: HistoryWriter) -> None:
        self.name = name
        self.incarnation = incarnation
        self.address = make_address(name, incarnation)
        self.stack = stack
        self.history = history
        self.alive = True
        self.finished = False  # its stop event is written
        self.timer_at = float("inf")
        # (kind, sender name, conn_id, seqno, msg_id); kind "unicast" | "multicast"
        self.deliveries: list[tuple[str, str, int | None, int, str | None]] = []
        self.paused = False
        self.inbox: list[bytes] = []  # datagrams that arrived while paused: its socket's receive buffer
        self.inbox_bytes = 0
        self.buffer_drops = 0  # datagrams lost while paused because that buffer was full
        self.deferred: list[Callable[[], None]] = []  # actions asked for while paused: they run on resume
        self.tasks: list[Task] = []  # its workload tasks
        self.waiting: list[Task] = []  # tasks whose wakeup came while paused
        # peer name -> incarnation as the orchestrator announced it (Stack.peer_address; the real member's
        # `incarnation` control command)
        self.announced: dict[str, int] = {}


class Task:
    """A workload task of the simulation: the generator, its sender, and the incarnation it belongs to (bound when
    it first runs; the task ends when that incarnation stops)."""

    __slots__ = ("incarnation", "src", "work")

    def __init__(self, src: str, incarnation: int | None, work: Workload) -> None:
        self.src = src
        self.incarnation = incarnation
        self.work = work


def find(members: dict[str, SimMember], name: str) -> SimMember:
    """The member incarnation called `name` (KeyError naming the members when there is none)."""
    try:
        return members[name]
    except KeyError:
        raise KeyError(f"no member {name!r}; members: {', '.join(members)}") from None
