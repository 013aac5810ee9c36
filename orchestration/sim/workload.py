"""The simulator's workload: single sends and multicasts, and workload tasks (node/workload.py's generator, the
real member's) run on the virtual clock. msg_ids come from node/payload.py, per sender incarnation.

`SimWorkload` is owned by a `Simulation` (orchestration/sim/simulation.py): it runs its tasks as calls on the
simulation's event queue and hands each member whose stack it fed to the simulation's `flush` (which transmits what
the stack produced and reschedules its timer)."""

from __future__ import annotations

import math
from collections.abc import Callable

from node.addresses import make_address
from node.payload import make_msg_id, make_payload
from node.protocols.base import MulticastLayer
from node.stack import PROTOCOLS, STACKS
from node.workload import Progress, Workload
from orchestration.sim.events import EventQueue
from orchestration.sim.member import SimMember, Task, find


class SimWorkload:
    """Sending and workload tasks of a simulation's members. `members` is the simulation's table of running
    incarnations, `names` every member name it knows, `flush(m)` what the simulation does after a member's stack
    was given something to send."""

    def __init__(
        self,
        events: EventQueue,
        members: dict[str, SimMember],
        names: Callable[[], list[str]],
        flush: Callable[[SimMember], None],
        *,
        stack_name: str,
        record: bool,
        sender_poll: float,
    ) -> None:
        self.events = events
        self.members = members
        self.names = names
        self.flush = flush
        self.stack_name = stack_name
        self.record = record
        self.sender_poll = sender_poll
        self.messages_sent = 0
        self._msg_counter: dict[tuple[str, str], int] = {}  # (sender address, dest name or "*") -> last n

    def _next_msg_id(self, m: SimMember, dest: str) -> str:
        key = (m.address, dest)
        n = self._msg_counter.get(key, 0) + 1
        self._msg_counter[key] = n
        return make_msg_id(m.address, dest, n)

    def sent_ids(self, sender: str, dest: str, incarnations: int) -> list[str]:
        """The msg_ids the workload gave sender's first `incarnations` incarnations for dest ("*": multicasts), in
        send order."""
        ids = []
        for inc in range(1, incarnations + 1):
            address = make_address(sender, inc)
            ids += [make_msg_id(address, dest, i) for i in range(1, self._msg_counter.get((address, dest), 0) + 1)]
        return ids

    def _running(self, name: str) -> SimMember:
        m = find(self.members, name)
        if not m.alive:
            raise ValueError(f"member {name} is not running")
        if m.paused:
            raise ValueError(f"member {name} is paused")
        return m

    def send(self, src: str, dst: str, *, size: int = 0, msg_id: str | None = None) -> str:
        """Member src sends one unicast to the current incarnation of dst, now. Returns the msg_id ("A>B#n", or
        "A/2>B#n" from src's second incarnation)."""
        m = self._running(src)
        find(self.members, dst)  # validates the name
        msg_id = self._send(m, dst, m.stack.peer_address(dst, m.announced), size, msg_id)
        self.flush(m)
        return msg_id

    def _send(self, m: SimMember, dst: str, dest: str, size: int, msg_id: str | None = None) -> str:
        if msg_id is None:
            msg_id = self._next_msg_id(m, dst)
        payload = make_payload(msg_id, size)
        seqno = m.stack.send(dest, payload, self.events.now)
        self.messages_sent += 1
        if self.record:
            conn_id = m.stack.unicast.send_conn_id(dest)
            m.history.sent("unicast", dst, conn_id, seqno, msg_id, len(payload), dest_address=dest)
        return msg_id

    def multicast(self, src: str, *, size: int = 0, msg_id: str | None = None) -> str:
        """Member src multicasts one message to the group, now. Returns the msg_id ("A>*#n")."""
        m = self._running(src)
        msg_id = self._multicast(m, size, msg_id)
        self.flush(m)
        return msg_id

    def _multicast(self, m: SimMember, size: int, msg_id: str | None = None) -> str:
        if msg_id is None:
            msg_id = self._next_msg_id(m, "*")
        payload = make_payload(msg_id, size)
        seqno = m.stack.multicast(payload, self.events.now)
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
        names = self.names()
        if src not in names:
            raise KeyError(f"no member {src!r}; members: {', '.join(names)}")
        if kind == "unicast" and (dest not in names or dest == src):
            raise ValueError(f"unknown destination {dest!r}; members: {', '.join(names)}")
        if kind == "multicast" and not any(issubclass(PROTOCOLS[p], MulticastLayer) for p in STACKS[self.stack_name]):
            raise ValueError(f"stack {self.stack_name} has no multicast protocol")
        if start < 0:
            raise ValueError("start must be >= 0")
        now = self.events.now
        work = Workload(kind, dest, count, size=size, rate=rate, start=now + start, granularity=self.sender_poll)
        m = self.members.get(src)
        if m is not None and m.alive:
            task = Task(src, m.incarnation, work)
            m.tasks.append(task)
        elif start > 0:
            task = Task(src, None, work)  # bound to the incarnation running at `start`
        else:
            raise ValueError(f"member {src} is not running")
        self.schedule_task(task)
        return work.progress

    def schedule_task(self, task: Task) -> None:
        wake = task.work.next_wakeup()
        if wake != math.inf:
            self.events.call_at(wake, self._run_task, task)

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
            n = work.due_on(m.stack, self.events.now, dest)
            send = self._send
            size = work.size
            for _ in range(n):
                send(m, dst, dest, size)
        else:
            n = work.due_on(m.stack, self.events.now)
            for _ in range(n):
                self._multicast(m, work.size)
        if n:
            self.flush(m)
        self.schedule_task(task)

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
