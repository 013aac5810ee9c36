"""What each receiving namespace must have for a set of faults: kernel rules (chaos/kernel.py), netem shaping
(chaos/netem.py) and the NFQUEUE handler's rules (chaos/nfqueue/), rendered without touching a kernel.

Faults act on the receiver's side, per link (docs/architecture.md): every fault is rendered into the namespace of each
receiver of its links, keyed by the source's address. A planned fault (with a window) is installed ahead of time and
gated by time: partitions and losses as nft rules bounded by `meta time` (CLOCK_REALTIME = monotonic + clock_offset)
where the kernel has time gates, else as link rules of the handler; delay, reorder, duplicate and every discard as
handler rules with active_from_ns/active_until_ns on every kernel (netem cannot be switched by time, and a u32 drop
has no window). A discard is read against the cluster's wire profile (chaos/profiles/), which decides what the
kernel drops alone and what its handler judges.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, NotRequired, TypedDict

from chaos import kernel, netem
from chaos.faults import Fault, FaultRecord, FaultWindow
from chaos.profiles import Discard, profile
from node.fault_kinds import KINDS, Category


@dataclass(frozen=True)
class Endpoint:
    """A member as the netns engine reaches it: its name, address and network namespace."""

    name: str
    ip: str
    ns: str


class HandlerRule(TypedDict):
    """One rule of an NFQUEUE handler (chaos/nfqueue/ `compile_rule`), as its control socket takes it."""

    id: str  # "<fault id>:<source member>"
    sources: list[str]
    match: str | None  # None: every packet of the sources (a link rule)
    wire: NotRequired[str]  # the wire profile the match is read against (absent: chaosbed)
    action: str
    probability: float
    count: int | None
    delay_ms: float
    jitter_ms: float
    seed: int
    active_from_ns: NotRequired[int | None]
    active_until_ns: NotRequired[int | None]


class Rendered(NamedTuple):
    """One receiving namespace's share: its kernel rules, netem shaping, handler rules and the longest delay the
    handler holds packets for (its queue is sized for it)."""

    rules: kernel.NamespaceRules
    shapings: list[netem.Shaping]
    handler_rules: list[HandlerRule]
    max_delay_ms: float


def render(
    members: Mapping[str, Endpoint],
    faults: Sequence[FaultRecord],
    use_netem: bool,
    *,
    time_gates: bool = True,
    clock_offset: int = 0,
    wire: str = "chaosbed",
) -> dict[str, Rendered]:
    """Each member's share of the faults (see the module docstring); discards are read in the `wire` profile (looked
    up only for a discard: a system without a profile, wire "none", still gets every other fault)."""
    out: dict[str, Rendered] = {}
    for name in members:
        rules, handler_rules = kernel.NamespaceRules(), []
        shaping: dict[str, netem.Shaping] = {}
        discards: list[Discard] = []
        max_delay_ms = 0.0
        for record in faults:
            f, window = record.fault, record.window
            category = KINDS[f.kind].category
            for src in (s for s, dst in record.links() if dst == name):
                ip, rule_id = members[src].ip, f"{record.id}:{src}"
                if category is Category.LINK and window and not time_gates:
                    rules.queue_all.add(ip)
                    handler_rules.append(_handler_rule(rule_id, ip, record, None, "drop", name))
                elif f.cuts:
                    if window:
                        rules.timed_blocks.append(kernel.TimedBlock(ip, _real_window(window, clock_offset), record.id))
                    else:
                        rules.blocked.add(ip)
                elif category is Category.LINK:  # loss
                    p = _probability(f)
                    if window:
                        rules.timed_losses.append(
                            kernel.TimedLoss(ip, p, _real_window(window, clock_offset), record.id)
                        )
                    else:
                        rules.losses.append((ip, p))
                elif category is Category.SHAPING and use_netem and not window:
                    shaping[ip] = _merge_shaping(shaping.get(ip, netem.Shaping(ip)), f)
                elif category is Category.SHAPING:
                    rules.queue_all.add(ip)
                    handler_rules.append(_handler_rule(rule_id, ip, record, None, f.kind, name))
                    max_delay_ms = max(max_delay_ms, 1000 * ((f.delay or 0.0) + (f.jitter or 0.0)))
                else:  # discard
                    stateless = f.action == "drop" and f.count is None and not window
                    match = profile(wire).parse_match(str(f.match))
                    discards.append(Discard(ip, match, stateless, _probability(f)))
                    rule = _handler_rule(rule_id, ip, record, f.match, str(f.action), name)
                    if wire != "chaosbed":
                        rule["wire"] = wire
                    handler_rules.append(rule)
                    max_delay_ms = max(max_delay_ms, 1000 * (f.delay or 0.0))
        if discards:
            profile(wire).render(rules, discards)
        out[name] = Rendered(rules, list(shaping.values()), handler_rules, max_delay_ms)
    return out


def _probability(f: Fault) -> float:
    return 1.0 if f.probability is None else f.probability


def _merge_shaping(s: netem.Shaping, f: Fault) -> netem.Shaping:
    kind = f.kind
    return netem.Shaping(
        s.source,
        s.delay_ms + (1000 * (f.delay or 0.0) if kind == "delay" else 0.0),
        max(s.jitter_ms, 1000 * (f.jitter or 0.0)),
        max(s.reorder, _probability(f) if kind == "reorder" else 0.0),
        max(s.duplicate, _probability(f) if kind == "duplicate" else 0.0),
    )


def _real_window(window: FaultWindow, clock_offset: int) -> kernel.Window:
    """A planned fault's window (CLOCK_MONOTONIC ns) on CLOCK_REALTIME, which nft's `meta time` reads."""
    return kernel.Window(window.start + clock_offset, None if window.until is None else window.until + clock_offset)


def _handler_rule(
    rule_id: str, ip: str, record: FaultRecord, match: str | None, action: str, receiver: str
) -> HandlerRule:
    f, window = record.fault, record.window
    rule = HandlerRule(
        id=rule_id,
        sources=[ip],
        match=match,
        action=action,
        probability=_probability(f),
        count=f.count,
        delay_ms=1000 * (f.delay or 0.0),
        jitter_ms=1000 * (f.jitter or 0.0),
        seed=_rule_seed(record.seed, f"{rule_id}>{receiver}"),
    )
    if window is not None:
        rule["active_from_ns"], rule["active_until_ns"] = window.start, window.until
    return rule


def _rule_seed(seed: int, rule_id: str) -> int:
    """Each rule's own random stream, fixed by the run's seed and the rule (fault id and source)."""
    return int.from_bytes(hashlib.sha256(f"{seed}/{rule_id}".encode()).digest()[:8], "big")
