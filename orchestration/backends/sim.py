"""The deterministic simulator: many members in one process, a virtual clock, a seeded network.

Every member runs the real sans-IO stack (node/stack.py) and exchanges real encoded datagrams (node/wire.py); only
time and the network are simulated. One `random.Random(seed)` drives every random choice and the event queue breaks
ties by insertion order, so the same seed and the same calls give the same run, event for event (histories are
byte-identical).

Network model, per directed link between member names: base one-way `delay`, uniform `jitter` on top (reorders
datagrams sent closer together than the jitter), `loss`, `duplicate` and `reorder` probabilities (a reordered
datagram is held back by an extra 2 x delay + jitter), and `cut` (one-way: nothing from src reaches dst). Link faults
act on whole datagrams, as on a real network. `MessageRule`s act on single messages inside datagrams and match on
the wire format's fields: "drop the first UNICAST3.ACK(seqno=50) from B to A". Bandwidth is not modelled.

Membership (stacks with GMS, e.g. "unicast3+nakack2"): members start at given virtual times and join by
themselves: `Simulation(names, stagger=0.5)` starts the i-th member at i x 0.5 s, `start_member(name, at=t)` adds
one later. `leave(name)` leaves gracefully (the member stops once GMS is done), `crash`/`restart` (the new
incarnation "B/2" rejoins), `split(groups)` partitions, `view(name)`/`views_agree()` observe. Histories get `view`
events; a graceful leave is a `leave` fault and, like a kill, leaves the member without a `stop` event.
"""

from __future__ import annotations

import heapq
import json
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from node import wire
from node.address import make_address, name_of
from node.payload import make_payload, msg_id_of
from node.stack import Stack, build_stack, has_membership
from node.wire import View

LOOPBACK_DELAY = 1e-6
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
    __slots__ = ("address", "alive", "deliveries", "incarnation", "name", "stack", "timer_at")

    def __init__(self, name: str, incarnation: int, stack: Stack) -> None:
        self.name = name
        self.incarnation = incarnation
        self.address = make_address(name, incarnation)
        self.stack = stack
        self.alive = True
        self.timer_at = float("inf")
        # (kind, sender name, conn_id, seqno, msg_id); kind "unicast" | "multicast"
        self.deliveries: list[tuple[str, str, int | None, int, str | None]] = []


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
        self._msg_counter: dict[tuple[str, str], int] = {}
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
        m = SimMember(name, incarnation, stack)
        self.members[name] = m
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

    def protocol(self, name: str) -> Any:
        """The unicast protocol instance of a member (for assertions and unilateral connection operations)."""
        return self.member(name).stack.unicast

    def crash(self, name: str) -> None:
        m = self.member(name)
        m.alive = False
        self._fault({"kind": "kill", "member": name})

    def leave(self, name: str) -> None:
        """The member leaves gracefully; it stops running once its GMS is done (see `Stack.has_left`)."""
        m = self.member(name)
        if not m.alive:
            raise ValueError(f"member {name} is not running")
        self._fault({"kind": "leave", "member": name})
        m.stack.leave(self.now)
        self._flush(m)

    def restart(self, name: str) -> SimMember:
        old = self.member(name)
        if old.alive:
            raise ValueError(f"member {name} is running; crash it first")
        self._fault({"kind": "restart", "member": name})
        return self._start_member(name, old.incarnation + 1)

    def close_connection(self, member: str, peer: str) -> None:
        """The member closes its unicast connection to peer (graceful: CLOSING, flushed, removed later)."""
        m = self.member(member)
        m.stack.unicast.close_connection(self.member(peer).address, self.now, m.stack.out)
        self._fault({"kind": "close-connection", "member": member, "peer": peer})
        self._flush(m)

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
        if self.rules:
            data = self._apply_rules(src, dst_name, dst_addr, data)
            if data is None:
                return
        link = self.links.get((src.name, dst_name), self.default_link)
        if link.cut:
            return
        rng = self.rng
        if link.loss and rng.random() < link.loss:
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

    def send(self, src: str, dst: str, *, size: int = 0, msg_id: str | None = None) -> str:
        """Member src sends one unicast to the current incarnation of dst, now. Returns the msg_id."""
        m = self.member(src)
        if not m.alive:
            raise ValueError(f"member {src} is not running")
        dest = self.member(dst).address
        if msg_id is None:
            n = self._msg_counter.get((src, dst), 0) + 1
            self._msg_counter[(src, dst)] = n
            msg_id = f"{src}>{dst}#{n}"
        payload = make_payload(msg_id, size)
        seqno = m.stack.send(dest, payload, self.now)
        self.messages_sent += 1
        if self.record:
            self._event(
                m,
                "send",
                kind="unicast",
                sender=src,
                dest=dst,
                conn_id=m.stack.unicast.send_conn_id(dest),
                seqno=seqno,
                msg_id=msg_id,
                size=len(payload),
            )
        self._flush(m)
        return msg_id

    def multicast(self, src: str, *, size: int = 0, msg_id: str | None = None) -> str:
        """Member src multicasts one message to the group, now. Returns the msg_id ("A>*#n")."""
        m = self.member(src)
        if not m.alive:
            raise ValueError(f"member {src} is not running")
        if msg_id is None:
            n = self._msg_counter.get((src, "*"), 0) + 1
            self._msg_counter[(src, "*")] = n
            msg_id = f"{src}>*#{n}"
        payload = make_payload(msg_id, size)
        seqno = m.stack.multicast(payload, self.now)
        self.messages_sent += 1
        if self.record:
            self._event(
                m,
                "send",
                kind="multicast",
                sender=src,
                dest=None,
                conn_id=None,
                seqno=seqno,
                msg_id=msg_id,
                size=len(payload),
            )
        self._flush(m)
        return msg_id

    def multicast_stream(
        self, src: str, count: int, *, rate: float = 1000.0, start: float = 0.0, size: int = 0
    ) -> None:
        """Schedules `count` multicasts from src at `rate` per second, starting `start` seconds from now (skipped
        while src is not running)."""
        if count < 0 or rate <= 0:
            raise ValueError("count must be >= 0 and rate > 0")
        for i in range(count):
            self.at(self.now + start + i / rate, self._multicast_if_alive, src, size)

    def _multicast_if_alive(self, src: str, size: int) -> None:
        m = self.members.get(src)
        if m is not None and m.alive:
            self.multicast(src, size=size)

    def stream(
        self, src: str, dst: str, count: int, *, rate: float = 1000.0, start: float = 0.0, size: int = 0
    ) -> None:
        """Schedules `count` sends from src to dst at `rate` per second, starting `start` seconds from now."""
        if count < 0 or rate <= 0:
            raise ValueError("count must be >= 0 and rate > 0")
        for i in range(count):
            self.at(self.now + start + i / rate, self._send_if_alive, src, dst, size)

    def _send_if_alive(self, src: str, dst: str, size: int) -> None:
        if self.member(src).alive:
            self.send(src, dst, size=size)

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
            for d in out.delivers:
                msg_id = msg_id_of(d.payload)
                sender = name_of(d.sender)
                m.deliveries.append((d.kind, sender, d.conn_id, d.seqno, msg_id))
                if self.record:
                    self._event(
                        m,
                        "deliver",
                        kind=d.kind,
                        sender=sender,
                        dest=m.name if d.kind == "unicast" else None,
                        conn_id=d.conn_id,
                        seqno=d.seqno,
                        msg_id=msg_id,
                        size=len(d.payload),
                    )
        if self.record and out.events:
            for e in out.events:
                if isinstance(e.get("peer"), str):
                    e["peer"] = name_of(e["peer"])
                self._event(m, e.pop("event"), **e)
        if m.stack.has_left:
            m.alive = False  # left gracefully: stops like a crash, but the group was told
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
                m.stack.receive(payload, at)
                self._flush(m)
        elif kind == _TIMER:
            name, incarnation = data
            m = self.members[name]
            if m.alive and m.incarnation == incarnation and m.timer_at == at:
                m.timer_at = float("inf")
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
        """Nothing in flight or scheduled (datagrams, workload, faults) and every live member's protocol idle."""
        if any(kind != _TIMER for _, _, kind, _ in self._queue):
            return False
        return all(p.is_idle() for m in self.members.values() if m.alive for p in m.stack.protocols.values())

    def delivered(self, receiver: str, sender: str | None = None, kind: str = "unicast") -> list[str | None]:
        """msg_ids of `kind` the receiver delivered (from sender, if given), in delivery order."""
        return [
            mid for k, s, _, _, mid in self.member(receiver).deliveries if k == kind and (sender is None or s == sender)
        ]

    def sent(self, sender: str, dest: str) -> list[str]:
        """msg_ids of the unicasts sender sent to dest (dest "*" for its multicasts), in send order."""
        return [f"{sender}>{dest}#{i}" for i in range(1, self._msg_counter.get((sender, dest), 0) + 1)]

    def multicast_sent(self, sender: str) -> list[str]:
        return self.sent(sender, "*")

    def live(self) -> list[str]:
        """Names of the running members, in start order."""
        return [n for n, m in self.members.items() if m.alive]

    def gms(self, name: str) -> Any:
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

    def _event(self, m: SimMember, event: str, **fields: Any) -> None:
        self.history[m.name].append(
            {"t": round(self.now * 1e9), "member": m.name, "incarnation": m.incarnation, "event": event, **fields}
        )

    def _fault(self, fault: dict[str, Any]) -> None:
        self.faults.append({"t": round(self.now * 1e9), "event": "fault", "seed": self.seed, **fault})

    def finish(self) -> None:
        """Writes the `stop` event of every live member (SCENARIO.md: the end of a run)."""
        for m in self.members.values():
            if m.alive:
                self._event(m, "stop", counters=m.stack.counters())

    def write_run(self, out_dir: str | Path) -> Path:
        """Writes history/<member>.jsonl and faults.jsonl in the SCENARIO.md format."""
        out = Path(out_dir)
        (out / "history").mkdir(parents=True, exist_ok=True)
        for name, events in self.history.items():
            with open(out / "history" / f"{name}.jsonl", "w") as f:
                f.writelines(json.dumps(e, separators=(",", ":")) + "\n" for e in events)
        with open(out / "faults.jsonl", "w") as f:
            f.writelines(json.dumps(e, separators=(",", ":")) + "\n" for e in self.faults)
        return out
