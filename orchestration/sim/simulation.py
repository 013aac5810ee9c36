"""The deterministic simulator: many members in one process, a virtual clock, a seeded network.

Every member runs the real sans-IO stack (node/stack.py) and exchanges real encoded datagrams (node/wire.py); only
time and the network are simulated. One `random.Random(seed)` drives every random choice and the event queue breaks
ties by insertion order, so the same seed and the same calls give the same run, event for event (histories are
byte-identical).

`Simulation` runs the event loop (orchestration/sim/events.py) and the members (member.py), and owns two parts: its
`network` (network.py: links, loss, reordering, exact message rules) and its `workload` (workload.py: sending and
workload tasks). Their operations are also methods of the simulation (`split`, `send`, `stream`, ...), the API that
tests and users drive. `orchestration/sim/cluster.py` puts the Cluster API (and the chaos engine's fault kinds) on
top of this class.

Membership (stacks with GMS, e.g. "unicast3+nakack2"): members start at given virtual times and join by
themselves: `Simulation(names, stagger=0.5)` starts the i-th member at i x 0.5 s, `start_member(name, at=t)` adds
one later. `leave(name)` leaves gracefully (the member stops once GMS is done), `crash`/`restart` (the new
incarnation "B/2" rejoins), `split(groups)` partitions, `view(name)`/`views_agree()` observe. Histories get `view`
events; a graceful leave is a `leave` fault and, like a kill, leaves the member without a `stop` event.

Workload and history are the real member's: `start_workload` runs node/workload.py's generator on the virtual
clock (`stream`/`multicast_stream` are paced wrappers over it), msg_ids come from node/payload.py (per sender
incarnation: "A>B#1", then "A/2>B#1" after a restart) and events are shaped and encoded by node/history.py (a
memory-mode HistoryWriter per member incarnation, t = virtual time in ns), so `write_run` writes the same lines a
real member would. `pause`/`resume` model SIGSTOP/SIGCONT: a paused member runs nothing; what arrives for it waits
in its receive buffer (bounded like the real one) and is read on resume, when its overdue timers and workload run.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TypeVarTuple, Unpack

from chaos.faults import JsonObject
from node.addresses import make_address, name_of
from node.history import HistoryWriter, write_records
from node.payload import msg_id_of
from node.protocols.base import MembershipLayer, Properties, UnicastLayer
from node.runtime import RECV_BUFFER
from node.stack import build_stack, has_membership
from node.wire import View
from node.workload import Progress
from orchestration.fault_log import FILE, FaultLog
from orchestration.sim.events import DATAGRAM, TIMER, EventQueue
from orchestration.sim.member import SimMember, find
from orchestration.sim.network import ACTIONS, LinkChange, LinkFaults, MessageRule, SimNetwork
from orchestration.sim.workload import SimWorkload

__all__ = ["ACTIONS", "TRANSPORT", "LinkFaults", "MessageRule", "SimMember", "Simulation"]

TRANSPORT = "sim"  # the `transport` of the members' start events

Ts = TypeVarTuple("Ts")


class Simulation:
    """A cluster of members in one process on a virtual clock."""

    def __init__(
        self,
        members: Iterable[str] | int = 2,
        *,
        seed: int = 0,
        stack: str = "unicast3",
        properties: Mapping[str, Mapping[str, object]] | None = None,
        link: LinkFaults | None = None,
        cluster: str = "sim",
        record: bool = True,
        stagger: float = 0.0,
        sender_poll: float = 0.0,
    ) -> None:
        """`stagger` > 0 starts the i-th member (0-based) at i x stagger virtual seconds instead of all at 0.
        `sender_poll` > 0 paces workload tasks as the real member's sender loop does (node/runtime.py polls every
        node.workload.POLL = 1 ms: what fell due in between goes out together, in one datagram per destination);
        0 (the default) wakes a paced task for every single message."""
        names = [chr(ord("A") + i) for i in range(members)] if isinstance(members, int) else list(members)
        if not names or len(set(names)) != len(names):
            raise ValueError(f"members must be distinct non-empty names: {names}")
        self.seed = seed
        self.rng = random.Random(seed)
        self.stack_name = stack
        self.properties = properties or {}
        self.cluster = cluster
        self.record = record
        self.events = EventQueue()
        self.members: dict[str, SimMember] = {}  # the running (or last) incarnation of each started member
        self.history: dict[str, list[dict[str, object]]] = {n: [] for n in names}  # every member ever named
        self.fault_log = FaultLog(None)  # faults.jsonl: what this simulation's own API did (write_run)
        self.events_processed = 0
        if stagger < 0:
            raise ValueError("stagger must be >= 0")
        if sender_poll < 0:
            raise ValueError("sender_poll must be >= 0")
        self.sender_poll = sender_poll
        self.network = SimNetwork(
            self.events,
            self.members,
            self.names,
            rng=self.rng,
            cluster=cluster,
            default_link=link or LinkFaults(),
            log_fault=self._fault,
        )
        self.workload = SimWorkload(
            self.events,
            self.members,
            self.names,
            self._flush,
            stack_name=stack,
            record=record,
            sender_poll=sender_poll,
        )
        for i, n in enumerate(names):
            if i == 0 or stagger == 0:
                self._start_member(n, 1)
            else:
                self.at(i * stagger, self._start_member, n, 1)

    # --- members --------------------------------------------------------------------------------------------------

    def _start_member(self, name: str, incarnation: int) -> SimMember:
        address = make_address(name, incarnation)
        conn_id_start = self.rng.randrange(1, 1 << 31)
        # only membership stacks draw a seed: unicast-only runs keep the random sequence they always had
        seed = self.rng.randrange(1 << 31) if has_membership(self.stack_name) else None
        stack = build_stack(
            address, self.stack_name, self.properties, cluster=self.cluster, conn_id_start=conn_id_start, seed=seed
        )
        stack.record_events = self.record  # without a history, the protocols' events are not even made
        history = HistoryWriter(None, name, incarnation, clock=self._t, records=self.history.setdefault(name, []))
        m = SimMember(name, incarnation, stack, history)
        self.members[name] = m
        if self.record:
            history.start(address, self.stack_name, TRANSPORT)
        self._schedule_timer(m)
        return m

    def start_member(self, name: str, at: float | None = None) -> None:
        """Starts a member that is not running yet (a new name) now, or at virtual time `at`; with membership it
        discovers the group and joins."""
        make_address(name)  # validates the name
        if name in self.members:
            raise ValueError(f"member {name} exists; use restart() for a new incarnation")
        self.history.setdefault(name, [])
        if at is None or at <= self.now:
            self._start_member(name, 1)
        else:
            self.at(at, self._start_member, name, 1)

    @property
    def now(self) -> float:
        """Virtual time in seconds."""
        return self.events.now

    def names(self) -> list[str]:
        """Every member name of the simulation, started or not yet, in the order they were named."""
        return list(self.history)

    def member(self, name: str) -> SimMember:
        return find(self.members, name)

    def protocol(self, name: str) -> UnicastLayer[Properties]:
        """The unicast protocol instance of a member (for assertions and unilateral connection operations)."""
        return self.member(name).stack.unicast

    def crash(self, name: str) -> None:
        m = self.member(name)
        self._stopped(m)
        self._fault({"kind": "kill", "member": name})

    def _stopped(self, m: SimMember) -> None:
        """The incarnation stops running (killed, or left): its workload tasks end, its receive buffer is gone."""
        m.alive = False
        m.paused = False
        for task in m.tasks:
            task.work.stop()
        m.inbox.clear()
        m.inbox_bytes = 0
        m.deferred.clear()
        m.waiting.clear()

    def _act(self, m: SimMember, action: Callable[[], None]) -> None:
        """Runs an action on a member now, or, while it is paused, when it resumes (as a control command waits)."""
        if m.paused:
            m.deferred.append(action)
        else:
            action()

    def leave(self, name: str) -> None:
        """The member leaves gracefully; it stops running once its GMS is done (see `Stack.has_left`)."""
        m = self.member(name)
        if not m.alive:
            raise ValueError(f"member {name} is not running")
        self._fault({"kind": "leave", "member": name})

        def act() -> None:
            m.stack.leave(self.now)
            self._flush(m)

        self._act(m, act)

    def stop_member(self, name: str) -> None:
        """A graceful stop, as a real member's on SIGTERM or the `shutdown` control command: it drops the multicasts
        it holds back, writes its `stop` event (its counters) and runs nothing more. Not a fault (not in `faults`)."""
        m = self.member(name)
        if not m.alive:
            raise ValueError(f"member {name} is not running")
        mcast = m.stack.multicast_protocol
        if mcast is not None:
            mcast.close()
        if not m.finished:
            m.finished = True
            m.history.stop(m.stack.counters())
        self._stopped(m)

    def pause(self, name: str) -> None:
        """SIGSTOP: the member runs nothing (no receives, timers, workload or commands) until `resume`. Datagrams
        for it wait in its receive buffer (RECV_BUFFER bytes, as a real member's socket; what does not fit is lost
        and counted in `member(name).buffer_drops`). Not recorded in `faults` (the orchestrator logs faults)."""
        m = self.member(name)
        if not m.alive:
            raise ValueError(f"member {name} is not running")
        m.paused = True

    def resume(self, name: str) -> None:
        """SIGCONT: the member reads what waited in its receive buffer (in arrival order, as one batch), then its
        overdue timers fire, the actions asked for while it was paused run and its workload catches up (a paced
        task sends its backlog at once, as the real generator does). A no-op for a member that is not paused."""
        m = self.member(name)
        if not m.alive:
            raise ValueError(f"member {name} is not running")
        if not m.paused:
            return
        m.paused = False
        inbox, m.inbox, m.inbox_bytes = m.inbox, [], 0
        for data in inbox:
            m.stack.receive(data, self.now)
        self._flush(m)  # sends what the batch produced and schedules the overdue timer (now)
        deferred, m.deferred = m.deferred, []
        for action in deferred:
            if m.alive:
                action()
        waiting, m.waiting = m.waiting, []
        for task in waiting:
            self.workload.schedule_task(task)

    def set_property(self, name: str, protocol: str, prop: str, value: object) -> None:
        """Changes a protocol property of a member at run time (e.g. "nakack2", "xmit_interval", "100ms") and lets
        the member act on it (its timers are rescheduled). A paused member applies it when it resumes. Not recorded
        in `faults`."""
        m = self.member(name)
        if not m.alive:
            raise ValueError(f"member {name} is not running")
        if protocol not in m.stack.by_name:  # a clear error now, even for a paused member
            raise ValueError(f"no protocol {protocol!r} in this stack; it has: {', '.join(m.stack.by_name)}")

        def act() -> None:
            m.stack.set_property(protocol, prop, value)
            self._flush(m)

        self._act(m, act)

    def restart(self, name: str) -> SimMember:
        old = self.member(name)
        if old.alive:
            raise ValueError(f"member {name} is running; crash it first")
        self._fault({"kind": "restart", "member": name})
        new = self._start_member(name, old.incarnation + 1)
        for other in self.members.values():  # as the orchestrator announces it to real members
            if other is not new:
                other.announced[name] = new.incarnation
        return new

    def close_connection(self, member: str, peer: str) -> None:
        """The member closes its unicast connection to peer (graceful: CLOSING, flushed, removed later); a paused
        member does it when it resumes."""
        m = self.member(member)
        self.member(peer)  # validates the name
        peer_address = m.stack.peer_address(peer, m.announced)  # as the real member's `close` resolves it
        self._fault({"kind": "close-connection", "member": member, "peer": peer})

        def act() -> None:
            m.stack.unicast.close_connection(peer_address, self.now, m.stack.out)
            self._flush(m)

        self._act(m, act)

    def at(self, when: float, fn: Callable[[*Ts], object], *args: *Ts) -> None:
        """Runs fn(*args) at virtual time `when`."""
        self.events.call_at(when, fn, *args)

    # --- the network and the workload, as the simulation's API ------------------------------------------------

    @property
    def links(self) -> dict[tuple[str, str], LinkFaults]:
        return self.network.links

    @property
    def rules(self) -> list[MessageRule]:
        return self.network.rules

    @property
    def default_link(self) -> LinkFaults:
        return self.network.default_link

    @property
    def datagrams_sent(self) -> int:
        return self.network.datagrams_sent

    @property
    def messages_sent(self) -> int:
        return self.workload.messages_sent

    def link(self, src: str, dst: str) -> LinkFaults:
        return self.network.link(src, dst)

    def set_link(self, src: str, dst: str, *, duration: float | None = None, **faults: Unpack[LinkChange]) -> None:
        """One directed link changed, e.g. set_link("A", "B", loss=0.2) (SimNetwork.set_link)."""
        self.network.set_link(src, dst, duration=duration, **faults)

    def reset_link(self, src: str, dst: str) -> None:
        self.network.reset_link(src, dst)

    def split(self, groups: list[list[str]]) -> None:
        """Two members hear each other iff some group has both (SimNetwork.split); `heal()` ends it."""
        self.network.split(groups)

    def cut(self, src: str, dst: str, *, one_way: bool = True) -> None:
        self.network.cut(src, dst, one_way=one_way)

    def heal(self, *, keep_rules: bool = False) -> None:
        self.network.heal(keep_rules=keep_rules)

    def add_rule(self, rule: MessageRule) -> MessageRule:
        return self.network.add_rule(rule)

    def release(self, rule: MessageRule) -> int:
        """Sends every message a `hold` rule kept back, now; returns how many."""
        return self.network.release(rule)

    def send(self, src: str, dst: str, *, size: int = 0, msg_id: str | None = None) -> str:
        """One unicast from src to dst's current incarnation, now; returns its msg_id (SimWorkload.send)."""
        return self.workload.send(src, dst, size=size, msg_id=msg_id)

    def multicast(self, src: str, *, size: int = 0, msg_id: str | None = None) -> str:
        """One multicast from src, now; returns its msg_id ("A>*#n")."""
        return self.workload.multicast(src, size=size, msg_id=msg_id)

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
        """A workload task on member src; returns its progress dict (SimWorkload.start_workload)."""
        return self.workload.start_workload(src, kind, dest, count, size=size, rate=rate, start=start)

    def stream(
        self, src: str, dst: str, count: int, *, rate: float = 1000.0, start: float = 0.0, size: int = 0
    ) -> Progress:
        """`count` sends from src to dst at `rate` per second, `start` seconds from now."""
        return self.workload.stream(src, dst, count, rate=rate, start=start, size=size)

    def multicast_stream(
        self, src: str, count: int, *, rate: float = 1000.0, start: float = 0.0, size: int = 0
    ) -> Progress:
        """`count` multicasts from src at `rate` per second, `start` seconds from now."""
        return self.workload.multicast_stream(src, count, rate=rate, start=start, size=size)

    # --- the event loop -------------------------------------------------------------------------------------------

    def _schedule_timer(self, m: SimMember) -> None:
        wake = m.stack.next_wakeup()
        if wake < m.timer_at:
            m.timer_at = max(wake, self.now)
            self.events.push_timer(m.timer_at, m.name, m.incarnation)

    def _flush(self, m: SimMember) -> None:
        stack = m.stack
        out = stack.drain()
        if out.datagrams:
            transmit = self.network.transmit
            for dest, data in out.datagrams:
                transmit(m, dest, data)
        if out.delivers:
            history = m.history if self.record else None
            append = m.deliveries.append
            for d in out.delivers:
                msg_id = history.delivered(d) if history is not None else msg_id_of(d.payload)
                append((d.kind, name_of(d.sender), d.conn_id, d.seqno, msg_id))
        if self.record and out.events:
            m.history.protocol_events(out.events)
        if stack.has_left:
            self._stopped(m)  # left gracefully: stops like a crash, but the group was told
            return
        self._schedule_timer(m)

    def step(self) -> bool:
        """Processes the next event; False when nothing is left."""
        events = self.events
        if not events.heap:
            return False
        event = events.pop()
        at = events.now = event[0]
        self.events_processed += 1
        if event[2] == DATAGRAM:
            dst_addr, payload = event[3]
            m = self.members.get(name_of(dst_addr))
            if m is not None and m.alive:
                if m.paused:
                    if m.inbox_bytes + len(payload) <= RECV_BUFFER:
                        m.inbox.append(payload)
                        m.inbox_bytes += len(payload)
                    else:
                        m.buffer_drops += 1
                else:
                    m.stack.receive(payload, at)
                    self._flush(m)
        elif event[2] == TIMER:
            name, incarnation = event[3]
            m = self.members[name]
            if m.alive and m.incarnation == incarnation and m.timer_at == at:
                m.timer_at = float("inf")
                if not m.paused:  # a paused member's timer fires late, on resume
                    m.stack.tick(at)
                    self._flush(m)
        else:
            fn, args = event[3]
            fn(*args)
        return True

    def run(self, duration: float) -> None:
        """Runs for `duration` virtual seconds from now."""
        events = self.events
        until = events.now + duration
        queue = events.heap
        step = self.step
        while queue and queue[0][0] <= until:
            step()
        events.now = max(events.now, until)

    def run_until(self, condition: Callable[[], bool], timeout: float, *, check_every: float = 0.05) -> bool:
        """Runs until condition() holds (checked every `check_every` virtual seconds) or `timeout` passes."""
        deadline = self.now + timeout
        while True:
            if condition():
                return True
            if self.now >= deadline:
                return False
            self.run(min(check_every, deadline - self.now))

    # --- observations ---------------------------------------------------------------------------------------------

    def quiet(self) -> bool:
        """Nothing in flight or scheduled (datagrams, workload, faults), nothing waiting for a paused member, and
        every live member's protocol idle."""
        if not self.events.only_timers():
            return False
        if any(m.inbox or m.waiting or m.deferred for m in self.members.values()):
            return False
        return all(p.is_idle() for m in self.members.values() if m.alive for p in m.stack.protocols.values())

    def delivered(self, receiver: str, sender: str | None = None, kind: str = "unicast") -> list[str | None]:
        """msg_ids of `kind` the receiver delivered (from sender, if given), in delivery order."""
        return [
            mid for k, s, _, _, mid in self.member(receiver).deliveries if k == kind and (sender is None or s == sender)
        ]

    def sent(self, sender: str, dest: str) -> list[str]:
        """msg_ids of the unicasts the member named sender sent to dest (dest "*" for its multicasts), in send order,
        over all its incarnations (as `delivered` does): "A>B#1", ... then "A/2>B#1", ... (ids given to `send`
        explicitly are not included)."""
        m = self.members.get(sender)
        return self.workload.sent_ids(sender, dest, m.incarnation if m is not None else 1)

    def multicast_sent(self, sender: str) -> list[str]:
        return self.sent(sender, "*")

    def live(self) -> list[str]:
        """Names of the running members, in start order."""
        return [n for n, m in self.members.items() if m.alive]

    def gms(self, name: str) -> MembershipLayer[Properties] | None:
        """The GMS protocol instance of a member (None without membership)."""
        return self.member(name).stack.gms

    def view(self, name: str) -> View | None:
        """The view a member has installed (members are addresses, e.g. "B/2"), None before it joined."""
        return self.member(name).stack.view

    def view_names(self, name: str) -> list[str]:
        """The member names of a member's installed view, coordinator first ([] before it joined)."""
        v = self.view(name)
        return [name_of(a) for a in v.members] if v is not None else []

    def views_agree(self, names: Iterable[str] | None = None) -> bool:
        """True when the given members (default: every running member) have installed the same view (same id)
        and that view's members are exactly their current addresses."""
        ms = [self.member(n) for n in (self.live() if names is None else names)]
        if not ms or not all(m.alive for m in ms):
            return False
        views = [m.stack.view for m in ms]
        first = views[0]
        if first is None or any(v is None or v.view_id != first.view_id for v in views):
            return False
        return sorted(first.members) == sorted(m.address for m in ms)

    def counters(self, name: str) -> dict[str, int]:
        m = self.member(name)
        return m.stack.counters()[m.stack.unicast.NAME]

    def protocol_counters(self, name: str, protocol: str) -> dict[str, int]:
        return self.member(name).stack.counters()[protocol]

    # --- history --------------------------------------------------------------------------------------------------

    def _t(self) -> int:
        """The histories' clock: virtual time in ns."""
        return round(self.now * 1e9)

    @property
    def faults(self) -> list[JsonObject]:
        """The faults.jsonl lines of what this simulation's own API did (kill, leave, split, set_link, ...)."""
        return self.fault_log.events

    def _fault(self, fault: Mapping[str, object]) -> None:
        fields = dict(fault)
        self.fault_log.action(str(fields.pop("kind")), fields, t=self._t(), seed=self.seed)

    def finish(self) -> None:
        """Writes the `stop` event of every live member (docs/scenario-format.md: the end of a run), once."""
        for m in self.members.values():
            if m.alive and not m.finished:
                m.finished = True
                m.history.stop(m.stack.counters())

    def write_histories(self, out_dir: str | Path) -> Path:
        """Writes history/<member>.jsonl under out_dir: the lines a real member's history file would have."""
        out = Path(out_dir)
        (out / "history").mkdir(parents=True, exist_ok=True)
        for name, events in self.history.items():
            write_records(out / "history" / f"{name}.jsonl", events)
        return out

    def write_run(self, out_dir: str | Path) -> Path:
        """Writes history/<member>.jsonl and faults.jsonl in the docs/scenario-format.md format."""
        out = self.write_histories(out_dir)
        self.fault_log.save(out / FILE)
        return out
