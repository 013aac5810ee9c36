"""The deterministic simulator: many members in one process, a virtual clock, a seeded network.

Every member runs the real sans-IO stack (node/stack.py) and exchanges real encoded datagrams (node/wire.py); only
time and the network are simulated. One `random.Random(seed)` drives every random choice and the event queue breaks
ties by insertion order, so the same seed and the same calls give the same run, event for event (histories are
byte-identical).

Network model, per directed link between member names: base one-way `delay`, uniform `jitter` on top (reorders
datagrams sent closer together than the jitter), `loss`, `duplicate` and `reorder` probabilities (a reordered
datagram is held back by an extra 2 x delay + jitter), and `cut` (one-way: nothing from src reaches dst). Link faults
act on whole datagrams, as on a real network. `MessageRule`s act on single messages inside datagrams and match on
the wire format's fields: "drop the first UNICAST3.ACK(seqno=50) from B to A"; as on netns, they see only what a cut
or loss let through. Bandwidth is not modelled. `orchestration/backends/sim_cluster.py` puts the Cluster API (and the
chaos engine's fault kinds) on top of this class.

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

import heapq
import math
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from node import wire
from node.history import HistoryWriter, write_records
from node.payload import make_msg_id, make_payload, msg_id_of
from node.protocols.base import MembershipLayer, MulticastLayer, Properties, UnicastLayer
from node.runtime import RECV_BUFFER
from node.stack import PROTOCOLS, STACKS, Stack, build_stack, has_membership
from node.wire import View, make_address, name_of
from node.workload import Workload

LOOPBACK_DELAY = 1e-6
TRANSPORT = "sim"  # the `transport` of the members' start events
ACTIONS = ("drop", "delay", "duplicate", "reorder", "hold", "pass")


@dataclass
class LinkFaults:
    """Faults and latency of one directed link. Probabilities in [0, 1], times in seconds."""

    delay: float = 0.001
    jitter: float = 0.0
    loss: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    cut: bool = False

    def validate(self) -> None:
        for name in ("loss", "duplicate", "reorder"):
            p = getattr(self, name)
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"link {name} must be a probability in [0, 1], not {p}")
        if self.delay < 0 or self.jitter < 0:
            raise ValueError("link delay and jitter must be >= 0")


@dataclass
class MessageRule:
    """An exact, protocol-aware fault on single messages, e.g. drop the first UNICAST3.ACK(seqno=50) from B to A.

    `src`/`dst` are member names (None = any). `fields` must all be equal on the message (values may also be
    callables taking the field value and returning bool). `count` limits how many matches are acted on (None =
    all); `probability` applies per match. Actions: drop, delay (by `delay` s), duplicate, reorder (sent late enough
    that the link's next datagrams overtake it, as a link's `reorder`), hold (kept until `Simulation.release(rule)`),
    and pass (let through; matches are recorded in `seen`, for observing traffic).
    """

    protocol: str
    header: str
    fields: dict[str, Any] = field(default_factory=dict)
    src: str | None = None
    dst: str | None = None
    action: str = "drop"
    delay: float = 0.0
    count: int | None = None
    probability: float = 1.0
    matched: int = 0
    held: list[tuple[str, str, Any]] = field(default_factory=list)
    seen: list[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.cls = wire.header_class(self.protocol, self.header)  # raises naming the known headers
        known = set(self.cls._fields) - {"payload"}
        bad = set(self.fields) - known
        if bad:
            raise ValueError(
                f"{self.protocol}.{self.header} has no field(s) {', '.join(sorted(bad))}; "
                f"its fields: {', '.join(sorted(known))}"
            )
        if self.action not in ACTIONS:
            raise ValueError(f"unknown rule action {self.action!r}: {' | '.join(ACTIONS)}")

    @property
    def exhausted(self) -> bool:
        return self.count is not None and self.matched >= self.count

    def matches(self, src: str, dst: str, msg: Any) -> bool:
        if type(msg) is not self.cls or self.exhausted:
            return False
        if (self.src is not None and self.src != src) or (self.dst is not None and self.dst != dst):
            return False
        for name, want in self.fields.items():
            have = getattr(msg, name)
            if callable(want):
                if not want(have):
                    return False
            elif have != want:
                return False
        return True


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
        self.tasks: list[_Task] = []  # its workload tasks
        self.waiting: list[_Task] = []  # tasks whose wakeup came while paused
        # peer name -> incarnation as the orchestrator announced it (Stack.peer_address; the real member's
        # `incarnation` control command)
        self.announced: dict[str, int] = {}


class _Task:
    """A workload task of the simulation: the generator, its sender, and the incarnation it belongs to (bound when
    it first runs; the task ends when that incarnation stops)."""

    __slots__ = ("incarnation", "src", "work")

    def __init__(self, src: str, incarnation: int | None, work: Workload) -> None:
        self.src = src
        self.incarnation = incarnation
        self.work = work


_DATAGRAM, _TIMER, _CALL = 0, 1, 2


class Simulation:
    """A cluster of members in one process on a virtual clock."""

    def __init__(
        self,
        members: Iterable[str] | int = 2,
        *,
        seed: int = 0,
        stack: str = "unicast3",
        properties: dict[str, dict[str, Any]] | None = None,
        link: LinkFaults | None = None,
        cluster: str = "sim",
        record: bool = True,
        stagger: float = 0.0,
    ) -> None:
        """`stagger` > 0 starts the i-th member (0-based) at i x stagger virtual seconds instead of all at 0."""
        names = [chr(ord("A") + i) for i in range(members)] if isinstance(members, int) else list(members)
        if not names or len(set(names)) != len(names):
            raise ValueError(f"members must be distinct non-empty names: {names}")
        self.seed = seed
        self.rng = random.Random(seed)
        self.stack_name = stack
        self.properties = properties or {}
        self.cluster = cluster
        self.record = record
        self.now = 0.0
        self._queue: list[tuple[float, int, int, Any]] = []
        self._seq = 0
        self.default_link = link or LinkFaults()
        self.default_link.validate()
        self.links: dict[tuple[str, str], LinkFaults] = {}
        self.rules: list[MessageRule] = []
        self.members: dict[str, SimMember] = {}
        self.history: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
        self.faults: list[dict[str, Any]] = []
        self._msg_counter: dict[tuple[str, str], int] = {}  # (sender address, dest name or "*") -> last n
        self.events_processed = 0
        self.datagrams_sent = 0
        self.messages_sent = 0
        if stagger < 0:
            raise ValueError("stagger must be >= 0")
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

    def member(self, name: str) -> SimMember:
        try:
            return self.members[name]
        except KeyError:
            raise KeyError(f"no member {name!r}; members: {', '.join(self.members)}") from None

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
            self._schedule_task(task)

    def set_property(self, name: str, protocol: str, prop: str, value: Any) -> None:
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

    # --- network --------------------------------------------------------------------------------------------------

    def link(self, src: str, dst: str) -> LinkFaults:
        return self.links.get((src, dst), self.default_link)

    def set_link(self, src: str, dst: str, *, duration: float | None = None, **faults: Any) -> None:
        """Changes one directed link, e.g. set_link("A", "B", loss=0.2); with `duration` (seconds) the link goes
        back to the default link after that long, and the fault record says so (`for`, as in scenario files)."""
        current = self.link(src, dst)
        new = LinkFaults(**{**current.__dict__, **faults})
        new.validate()
        self.links[(src, dst)] = new
        record: dict[str, Any] = {"kind": "link", "from": src, "to": dst, **faults}
        if duration is not None:
            record["for"] = f"{duration:g}s"
            self.at(self.now + duration, self.reset_link, src, dst)
        self._fault(record)

    def reset_link(self, src: str, dst: str) -> None:
        """The directed link goes back to the default link (its faults end)."""
        self.links.pop((src, dst), None)

    def split(self, groups: list[list[str]]) -> None:
        """Partitions the members into groups: two members hear each other iff some group has both (groups may
        overlap; a member in no group is isolated). Other link settings stay; `heal()` ends it."""
        known = [n for g in groups for n in g if n not in self.history]
        if known:
            raise ValueError(f"unknown members in split: {known}")
        names = list(self.history)
        together = {(a, b) for g in groups for a in g for b in g}
        for a in names:
            for b in names:
                if a != b and (a, b) not in together:
                    current = self.link(a, b)
                    self.links[(a, b)] = LinkFaults(**{**current.__dict__, "cut": True})
        self._fault({"kind": "split", "groups": [list(g) for g in groups]})

    def cut(self, src: str, dst: str, *, one_way: bool = True) -> None:
        self.set_link(src, dst, cut=True)
        if not one_way:
            self.set_link(dst, src, cut=True)

    def heal(self, *, keep_rules: bool = False) -> None:
        """Removes every link fault (back to the default link) and every message rule (unless keep_rules)."""
        self.links.clear()
        if not keep_rules:
            self.rules.clear()
        self._fault({"kind": "heal"})

    def add_rule(self, rule: MessageRule) -> MessageRule:
        self.rules.append(rule)
        self._fault({"kind": "discard", "rule": f"{rule.protocol}.{rule.header}({rule.fields})", "action": rule.action})
        return rule

    def release(self, rule: MessageRule) -> int:
        """Sends every message a `hold` rule kept back, now; returns how many."""
        held, rule.held = rule.held, []
        for src_addr, dst_addr, msg in held:
            data = wire.encode_datagram(self.cluster, src_addr, dst_addr, [msg])
            self._push(self.now + self.link(name_of(src_addr), name_of(dst_addr)).delay, _DATAGRAM, (dst_addr, data))
        return len(held)

    def _transmit(self, src: SimMember, dest: str | None, data: bytes) -> None:
        self.datagrams_sent += 1
        if dest is None:  # multicast: every live member, the sender included
            for m in self.members.values():
                self._transmit_one(src, m.name, m.address, data)
        else:
            self._transmit_one(src, name_of(dest), dest, data)

    def _transmit_one(self, src: SimMember, dst_name: str, dst_addr: str, data: bytes) -> None:
        if dst_name not in self.members:
            return  # nobody there: the datagram is lost
        if dst_name == src.name:
            self._push(self.now + LOOPBACK_DELAY, _DATAGRAM, (dst_addr, data))
            return
        # As on netns: partitions and loss (nft) act before message rules (iptables and the NFQUEUE handler), so a
        # datagram that is cut or lost never spends a rule's count.
        link = self.links.get((src.name, dst_name), self.default_link)
        if link.cut:
            return
        rng = self.rng
        if link.loss and rng.random() < link.loss:
            return
        if self.rules:
            data = self._apply_rules(src, dst_name, dst_addr, data)
            if data is None:
                return
        at = self.now + link.delay + (rng.random() * link.jitter if link.jitter else 0.0)
        if link.reorder and rng.random() < link.reorder:
            at += 2 * link.delay + link.jitter
        self._push(at, _DATAGRAM, (dst_addr, data))
        if link.duplicate and rng.random() < link.duplicate:
            self._push(at + link.delay + rng.random() * link.jitter, _DATAGRAM, (dst_addr, data))

    def _apply_rules(self, src: SimMember, dst_name: str, dst_addr: str, data: bytes) -> bytes | None:
        active = [r for r in self.rules if not r.exhausted]
        if not active:
            return data
        dgram = wire.decode_datagram(data)
        kept = []
        changed = False
        for msg in dgram.messages:
            keep = True
            for rule in active:
                if not rule.matches(src.name, dst_name, msg):
                    continue
                if rule.probability < 1.0 and self.rng.random() >= rule.probability:
                    continue
                rule.matched += 1
                if rule.action == "pass":
                    rule.seen.append(msg)
                    continue  # observing does not stop later rules from acting
                changed = True
                if rule.action == "drop":
                    keep = False
                elif rule.action == "hold":
                    rule.held.append((src.address, dst_addr, msg))
                    keep = False
                elif rule.action == "delay":
                    one = wire.encode_datagram(self.cluster, src.address, dst_addr, [msg])
                    self._push(self.now + self.link(src.name, dst_name).delay + rule.delay, _DATAGRAM, (dst_addr, one))
                    keep = False
                elif rule.action == "reorder":
                    link = self.link(src.name, dst_name)
                    one = wire.encode_datagram(self.cluster, src.address, dst_addr, [msg])
                    self._push(self.now + 3 * link.delay + link.jitter, _DATAGRAM, (dst_addr, one))
                    keep = False
                elif rule.action == "duplicate":
                    kept.append(msg)
                break
            if keep:
                kept.append(msg)
        if not changed:
            return data
        if not kept:
            return None
        return wire.encode_datagram(self.cluster, src.address, dst_addr, kept)

    # --- workload -------------------------------------------------------------------------------------------------

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
    ) -> dict[str, Any]:
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
        work = Workload(kind, dest, count, size=size, rate=rate, start=self.now + start)
        m = self.members.get(src)
        if m is not None and m.alive:
            task = _Task(src, m.incarnation, work)
            m.tasks.append(task)
        elif start > 0:
            task = _Task(src, None, work)  # bound to the incarnation running at `start`
        else:
            raise ValueError(f"member {src} is not running")
        self._schedule_task(task)
        return work.progress

    def _schedule_task(self, task: _Task) -> None:
        wake = task.work.next_wakeup()
        if wake != math.inf:
            self.at(wake, self._run_task, task)

    def _run_task(self, task: _Task) -> None:
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
            for _ in range(n):
                self._send(m, dst, dest, work.size)
        else:
            n = work.due_on(m.stack, self.now)
            for _ in range(n):
                self._multicast(m, work.size)
        if n:
            self._flush(m)
        self._schedule_task(task)

    def multicast_stream(
        self, src: str, count: int, *, rate: float = 1000.0, start: float = 0.0, size: int = 0
    ) -> dict[str, Any]:
        """`count` multicasts from src at `rate` per second, starting `start` seconds from now (a paced
        `start_workload`; returns its progress dict)."""
        return self.start_workload(src, "multicast", None, count, size=size, rate=rate, start=start)

    def stream(
        self, src: str, dst: str, count: int, *, rate: float = 1000.0, start: float = 0.0, size: int = 0
    ) -> dict[str, Any]:
        """`count` sends from src to dst at `rate` per second, starting `start` seconds from now (a paced
        `start_workload`; returns its progress dict)."""
        return self.start_workload(src, "unicast", dst, count, size=size, rate=rate, start=start)

    def at(self, when: float, fn: Callable[..., Any], *args: Any) -> None:
        """Runs fn(*args) at virtual time `when`."""
        self._push(max(when, self.now), _CALL, (fn, args))

    # --- the event loop -------------------------------------------------------------------------------------------

    def _push(self, at: float, kind: int, data: Any) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (at, self._seq, kind, data))

    def _schedule_timer(self, m: SimMember) -> None:
        wake = m.stack.next_wakeup()
        if wake < m.timer_at:
            m.timer_at = max(wake, self.now)
            self._push(m.timer_at, _TIMER, (m.name, m.incarnation))

    def _flush(self, m: SimMember) -> None:
        out = m.stack.drain()
        for dest, data in out.datagrams:
            self._transmit(m, dest, data)
        if out.delivers:
            history = m.history if self.record else None
            deliveries = m.deliveries
            for d in out.delivers:
                msg_id = history.delivered(d) if history is not None else msg_id_of(d.payload)
                deliveries.append((d.kind, name_of(d.sender), d.conn_id, d.seqno, msg_id))
        if self.record and out.events:
            m.history.protocol_events(out.events)
        if m.stack.has_left:
            self._stopped(m)  # left gracefully: stops like a crash, but the group was told
            return
        self._schedule_timer(m)

    def step(self) -> bool:
        """Processes the next event; False when nothing is left."""
        if not self._queue:
            return False
        at, _, kind, data = heapq.heappop(self._queue)
        self.now = at
        self.events_processed += 1
        if kind == _DATAGRAM:
            dst_addr, payload = data
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
        elif kind == _TIMER:
            name, incarnation = data
            m = self.members[name]
            if m.alive and m.incarnation == incarnation and m.timer_at == at:
                m.timer_at = float("inf")
                if not m.paused:  # a paused member's timer fires late, on resume
                    m.stack.tick(at)
                    self._flush(m)
        else:
            fn, args = data
            fn(*args)
        return True

    def run(self, duration: float) -> None:
        """Runs for `duration` virtual seconds from now."""
        until = self.now + duration
        while self._queue and self._queue[0][0] <= until:
            self.step()
        self.now = max(self.now, until)

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
        if any(kind != _TIMER for _, _, kind, _ in self._queue):
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
        last = m.incarnation if m is not None else 1
        ids = []
        for inc in range(1, last + 1):
            address = make_address(sender, inc)
            ids += [make_msg_id(address, dest, i) for i in range(1, self._msg_counter.get((address, dest), 0) + 1)]
        return ids

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

    def _fault(self, fault: dict[str, Any]) -> None:
        self.faults.append({"t": self._t(), "event": "fault", "seed": self.seed, **fault})

    def finish(self) -> None:
        """Writes the `stop` event of every live member (SCENARIO.md: the end of a run), once."""
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
        """Writes history/<member>.jsonl and faults.jsonl in the SCENARIO.md format."""
        out = self.write_histories(out_dir)
        write_records(out / "faults.jsonl", self.faults)
        return out
