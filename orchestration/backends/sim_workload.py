"""The simulator's workload: single sends and multicasts, and workload tasks (node/workload.py's generator, the
real member's) run on the virtual clock. msg_ids come from node/payload.py, per sender incarnation."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from node.payload import make_msg_id, make_payload
from node.protocols.base import MulticastLayer
from node.stack import PROTOCOLS, STACKS
from node.workload import Progress, Workload
from orchestration.backends.sim_member import SimMember, Task


class SimWorkload:
    """Sending and workload tasks of a `Simulation` (its workload part)."""

    now: float
    record: bool
    stack_name: str
    members: dict[str, SimMember]
    history: dict[str, list[dict[str, Any]]]
    messages_sent: int
    sender_poll: float
    _msg_counter: dict[tuple[str, str], int]

    if TYPE_CHECKING:  # provided by Simulation

        def member(self, name: str) -> SimMember: ...

        def at(self, when: float, fn: Callable[..., Any], *args: Any) -> None: ...

        def _flush(self, m: SimMember) -> None: ...

    def _next_msg_id(self, m: SimMember, dest: str) -> str:
        key = (m.address, dest)
        n = self._msg_counter.get(key, 0) + 1
        self._msg_counter[key] = n
        return make_msg_id(m.address, dest, n)

    def _running(self, name: str) -> SimMember:
        m = self.member(name)
        if not m.alive:
            raise ValueError(f"member {name} is not running")
        if m.paused:
            raise ValueError(f"member {name} is paused")
        return m

    def send(self, src: str, dst: str, *, size: int = 0, msg_id: str | None = None) -> str:
        """Member src sends one unicast to the current incarnation of dst, now. Returns the msg_id ("A>B#n", or
        "A/2>B#n" from src's second incarnation)."""
        m = self._running(src)
        self.member(dst)  # validates the name
        msg_id = self._send(m, dst, m.stack.peer_address(dst, m.announced), size, msg_id)
        self._flush(m)
        return msg_id

    def _send(self, m: SimMember, dst: str, dest: str, size: int, msg_id: str | None = None) -> str:
        if msg_id is None:
            msg_id = self._next_msg_id(m, dst)
        payload = make_payload(msg_id, size)
        seqno = m.stack.send(dest, payload, self.now)
        self.messages_sent += 1
        if self.record:
            conn_id = m.stack.unicast.send_conn_id(dest)
            m.history.sent("unicast", dst, conn_id, seqno, msg_id, len(payload), dest_address=dest)
        return msg_id

    def multicast(self, src: str, *, size: int = 0, msg_id: str | None = None) -> str:
        """Member src multicasts one message to the group, now. Returns the msg_id ("A>*#n")."""
        m = self._running(src)
        msg_id = self._multicast(m, size, msg_id)
        self._flush(m)
        return msg_id

    def _multicast(self, m: SimMember, size: int, msg_id: str | None = None) -> str:
        if msg_id is None:
            msg_id = self._next_msg_id(m, "*")
        payload = make_payload(msg_id, size)
        seqno = m.stack.multicast(payload, self.now)
        self.messages_sent += 1
        if self.record:
            m.history.sent("multicast", None, None, seqno, msg_id, len(payload))
        return msg_id

    def start_workload(
        self,
        src: str,
        kind: str,
        dest: str | None,
        count: int,
        *,
        size: int = 0,
        rate: float | None = None,
        start: float = 0.0,
    ) -> Progress:
        """Starts a workload task on member src (node/workload.py, the real member's generator): `count` messages of
        `kind` (unicast to member `dest`, or multicast with dest None) of `size` payload bytes, at `rate`/s (message
        i at start + i/rate) or, with rate None, in bursts as fast as src's flow control allows, beginning `start`
        seconds from now. Returns the task's progress dict {"kind", "dest", "count", "sent", "done"}, updated as the
        task runs. The task belongs to the incarnation of src running when it starts (now, or at `start` if src is
        not running yet) and ends (done, sent < count) when that incarnation stops; while src is paused it waits."""
        if src not in self.history:
            raise KeyError(f"no member {src!r}; members: {', '.join(self.history)}")
        if kind == "unicast" and (dest not in self.history or dest == src):
            raise ValueError(f"unknown destination {dest!r}; members: {', '.join(self.history)}")
        if kind == "multicast" and not any(issubclass(PROTOCOLS[p], MulticastLayer) for p in STACKS[self.stack_name]):
            raise ValueError(f"stack {self.stack_name} has no multicast protocol")
        if start < 0:
            raise ValueError("start must be >= 0")
        work = Workload(kind, dest, count, size=size, rate=rate, start=self.now + start, granularity=self.sender_poll)
        m = self.members.get(src)
        if m is not None and m.alive:
            task = Task(src, m.incarnation, work)
            m.tasks.append(task)
        elif start > 0:
            task = Task(src, None, work)  # bound to the incarnation running at `start`
        else:
            raise ValueError(f"member {src} is not running")
        self._schedule_task(task)
        return work.progress

    def _schedule_task(self, task: Task) -> None:
        wake = task.work.next_wakeup()
        if wake != math.inf:
            self.at(wake, self._run_task, task)

    def _run_task(self, task: Task) -> None:
        work = task.work
        if work.done:
            return
        m = self.members.get(task.src)
        if task.incarnation is None and m is not None and m.alive:
            task.incarnation = m.incarnation
            m.tasks.append(task)
        if m is None or not m.alive or m.incarnation != task.incarnation:
            work.stop()
            return
        if m.paused:
            m.waiting.append(task)  # runs again on resume
            return
        if work.kind == "unicast":
            dst = work.dest
            assert dst is not None
            dest = m.stack.peer_address(dst, m.announced)  # as the real member resolves it
            n = work.due_on(m.stack, self.now, dest)
            send = self._send
            size = work.size
            for _ in range(n):
                send(m, dst, dest, size)
        else:
            n = work.due_on(m.stack, self.now)
            for _ in range(n):
                self._multicast(m, work.size)
        if n:
            self._flush(m)
        self._schedule_task(task)

    def multicast_stream(
        self, src: str, count: int, *, rate: float = 1000.0, start: float = 0.0, size: int = 0
    ) -> Progress:
        """`count` multicasts from src at `rate` per second, starting `start` seconds from now (a paced
        `start_workload`; returns its progress dict)."""
        return self.start_workload(src, "multicast", None, count, size=size, rate=rate, start=start)

    def stream(
        self, src: str, dst: str, count: int, *, rate: float = 1000.0, start: float = 0.0, size: int = 0
    ) -> Progress:
        """`count` sends from src to dst at `rate` per second, starting `start` seconds from now (a paced
        `start_workload`; returns its progress dict)."""
        return self.start_workload(src, "unicast", dst, count, size=size, rate=rate, start=start)
