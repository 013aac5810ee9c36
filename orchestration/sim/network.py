"""The simulator's network: per-link faults, message rules, and how a datagram crosses a link.

Per directed link between member names: base one-way `delay`, uniform `jitter` on top (reorders datagrams sent
closer together than the jitter), `loss`, `duplicate` and `reorder` probabilities (a reordered datagram is held
back by an extra 2 x delay + jitter), and `cut` (one-way: nothing from src reaches dst). Link faults act on whole
datagrams, as on a real network. `MessageRule`s act on single messages inside datagrams and match on the wire
format's fields: "drop the first UNICAST3.ACK(seqno=50) from B to A"; as on netns, they see only what a cut or loss
let through. Bandwidth is not modelled.

`SimNetwork` is owned by a `Simulation` (orchestration/sim/simulation.py): it queues arriving datagrams on the
simulation's event queue, and every random choice comes from the simulation's one `rng`, in the order the datagrams
are sent.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypedDict, Unpack

from node import wire
from node.addresses import name_of
from orchestration.sim.events import EventQueue
from orchestration.sim.member import SimMember

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


class LinkChange(TypedDict, total=False):
    """The fields of `LinkFaults` a `set_link` call changes (its keyword arguments)."""

    delay: float
    jitter: float
    loss: float
    duplicate: float
    reorder: float
    cut: bool


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
    fields: Mapping[str, object] = field(default_factory=dict)
    src: str | None = None
    dst: str | None = None
    action: str = "drop"
    delay: float = 0.0
    count: int | None = None
    probability: float = 1.0
    matched: int = 0
    held: list[tuple[str, str, wire.Message]] = field(default_factory=list)  # (src address, dst address, message)
    seen: list[wire.Message] = field(default_factory=list)

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

    def matches(self, src: str, dst: str, msg: wire.Message) -> bool:
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


class SimNetwork:
    """The links and message rules between the members of a simulation, and datagrams crossing them.

    `members` is the simulation's table of running incarnations (the network reads it, never changes it),
    `names` every member name the simulation knows (running or not), `log_fault` records a fault the way the
    simulation's `faults` list keeps them."""

    def __init__(
        self,
        events: EventQueue,
        members: dict[str, SimMember],
        names: Callable[[], list[str]],
        *,
        rng: random.Random,
        cluster: str,
        default_link: LinkFaults,
        log_fault: Callable[[Mapping[str, object]], None],
    ) -> None:
        default_link.validate()
        self.events = events
        self.members = members
        self.names = names
        self.rng = rng
        self.cluster = cluster
        self.default_link = default_link
        self.log_fault = log_fault
        self.links: dict[tuple[str, str], LinkFaults] = {}
        self.rules: list[MessageRule] = []
        self.datagrams_sent = 0

    def link(self, src: str, dst: str) -> LinkFaults:
        return self.links.get((src, dst), self.default_link)

    def set_link(self, src: str, dst: str, *, duration: float | None = None, **faults: Unpack[LinkChange]) -> None:
        """Changes one directed link, e.g. set_link("A", "B", loss=0.2); with `duration` (seconds) the link goes
        back to the default link after that long, and the fault record says so (`for`, as in scenario files)."""
        current = self.link(src, dst)
        new = dataclasses.replace(current, **faults)
        new.validate()
        self.links[(src, dst)] = new
        record: dict[str, object] = {"kind": "link", "from": src, "to": dst, **faults}
        if duration is not None:
            record["for"] = f"{duration:g}s"
            self.events.call_at(self.events.now + duration, self.reset_link, src, dst)
        self.log_fault(record)

    def reset_link(self, src: str, dst: str) -> None:
        """The directed link goes back to the default link (its faults end)."""
        self.links.pop((src, dst), None)

    def split(self, groups: list[list[str]]) -> None:
        """Partitions the members into groups: two members hear each other iff some group has both (groups may
        overlap; a member in no group is isolated). Other link settings stay; `heal()` ends it."""
        names = self.names()
        unknown = [n for g in groups for n in g if n not in names]
        if unknown:
            raise ValueError(f"unknown members in split: {unknown}")
        together = {(a, b) for g in groups for a in g for b in g}
        for a in names:
            for b in names:
                if a != b and (a, b) not in together:
                    current = self.link(a, b)
                    self.links[(a, b)] = LinkFaults(**{**current.__dict__, "cut": True})
        self.log_fault({"kind": "split", "groups": [list(g) for g in groups]})

    def cut(self, src: str, dst: str, *, one_way: bool = True) -> None:
        self.set_link(src, dst, cut=True)
        if not one_way:
            self.set_link(dst, src, cut=True)

    def heal(self, *, keep_rules: bool = False) -> None:
        """Removes every link fault (back to the default link) and every message rule (unless keep_rules)."""
        self.links.clear()
        if not keep_rules:
            self.rules.clear()
        self.log_fault({"kind": "heal"})

    def add_rule(self, rule: MessageRule) -> MessageRule:
        self.rules.append(rule)
        self.log_fault(
            {"kind": "discard", "rule": f"{rule.protocol}.{rule.header}({rule.fields})", "action": rule.action}
        )
        return rule

    def release(self, rule: MessageRule) -> int:
        """Sends every message a `hold` rule kept back, now; returns how many."""
        held, rule.held = rule.held, []
        for src_addr, dst_addr, msg in held:
            data = wire.encode_datagram(self.cluster, src_addr, dst_addr, [msg])
            self.events.push_datagram(
                self.events.now + self.link(name_of(src_addr), name_of(dst_addr)).delay, dst_addr, data
            )
        return len(held)

    def transmit(self, src: SimMember, dest: str | None, data: bytes) -> None:
        self.datagrams_sent += 1
        if dest is None:  # multicast: every live member, the sender included
            for m in self.members.values():
                self._transmit_one(src, m.name, m.address, data)
        else:
            self._transmit_one(src, name_of(dest), dest, data)

    def _transmit_one(self, src: SimMember, dst_name: str, dst_addr: str, data: bytes) -> None:
        if dst_name not in self.members:
            return  # nobody there: the datagram is lost
        events = self.events
        if dst_name == src.name:
            events.push_datagram(events.now + LOOPBACK_DELAY, dst_addr, data)
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
            judged = self._apply_rules(src, dst_name, dst_addr, data)
            if judged is None:
                return
            data = judged
        at = events.now + link.delay + (rng.random() * link.jitter if link.jitter else 0.0)
        if link.reorder and rng.random() < link.reorder:
            at += 2 * link.delay + link.jitter
        events.push_datagram(at, dst_addr, data)
        if link.duplicate and rng.random() < link.duplicate:
            events.push_datagram(at + link.delay + rng.random() * link.jitter, dst_addr, data)

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
                    at = self.events.now + self.link(src.name, dst_name).delay + rule.delay
                    self.events.push_datagram(at, dst_addr, one)
                    keep = False
                elif rule.action == "reorder":
                    link = self.link(src.name, dst_name)
                    one = wire.encode_datagram(self.cluster, src.address, dst_addr, [msg])
                    self.events.push_datagram(self.events.now + 3 * link.delay + link.jitter, dst_addr, one)
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
