"""A network fault's arguments, checked against a cluster and normalised into a `Fault`: member lists written out
(missing `from`/`to`: every member), durations in seconds, probabilities in 0..1, a discard's match parsed against the
cluster's wire profile (chaos/profiles/: chaosbed's own by default, e.g. jgroups-2.12 for the JGroups jar). The kinds
and their keys are node/fault_kinds.py's; what they mean for a cluster (its names, its transport) is decided here.
Keys a kind does not have are ignored, as they always were by the fault tables (a scenario file refuses them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from chaos.faults import ChaosError, Fault
from chaos.profiles import parse_match
from chaos.rules import RuleError
from node.fault_kinds import DISCARD_ACTIONS, KINDS, NETWORK
from node.units import parse_duration


def normalize(
    kind: str, args: Mapping[str, object], names: Sequence[str], transport: str = "udp", wire: str = "chaosbed"
) -> Fault:
    """Checks a fault's arguments against the members; returns the fault (ChaosError says what is wrong)."""
    if kind not in NETWORK:
        raise ChaosError(f"unknown network fault {kind!r}; network faults: {', '.join(NETWORK)}")
    names = list(names)
    if kind == "split":
        return Fault(kind, groups=_groups(args.get("groups"), names))
    sources, receivers = _links(kind, args, "from", names), _links(kind, args, "to", names)
    one_way = bool(args.get("one_way", False)) if kind == "partition" else None
    fault = Fault(kind, sources, receivers, one_way=one_way, probability=_probability(kind, args))
    if kind == "delay":
        delay, jitter = _seconds(args.get("delay"), "delay: delay"), _seconds(args.get("jitter", 0.0), "delay: jitter")
        return replace(fault, delay=delay, jitter=jitter)
    if kind == "discard":
        return _discard(fault, args, transport, wire)
    return fault


def member_list_of(value: object, names: Sequence[str], what: str) -> list[str]:
    """A member or a list of members, each one of names."""
    items = _items(value)
    bad = [m for m in items if m not in names]
    if bad or not items:
        raise ChaosError(f"{what}: unknown members {bad or '(none)'}; members: {', '.join(names)}")
    return [str(m) for m in items]


def _links(kind: str, args: Mapping[str, object], key: str, names: list[str]) -> tuple[str, ...]:
    value = args.get(key)
    if value is None or value == "*" or value == ["*"]:
        return tuple(names)
    items = _items(value)
    bad = [m for m in items if m not in names]
    if bad or not items:
        raise ChaosError(f"{kind}: {key} names unknown members {bad or '(none)'}; members: {', '.join(names)}")
    return tuple(str(m) for m in items)


def _items(value: object) -> list[object]:
    """A name, or a collection of names, as a list (any other value: itself, which names no member)."""
    if isinstance(value, str):
        return [value]
    if not value:
        return []
    return list(value) if isinstance(value, list | tuple | set | frozenset) else [value]


def _groups(value: object, names: list[str]) -> tuple[tuple[str, ...], ...]:
    groups = [member_list_of(g, names, "split: groups") for g in (value if isinstance(value, list | tuple) else [])]
    if len(groups) < 2:
        raise ChaosError("split: give at least two groups, e.g. A,B C,D")
    seen: set[str] = set()
    for g in groups:
        if seen & set(g):
            raise ChaosError(f"split: {sorted(seen & set(g))} in more than one group")
        seen |= set(g)
    return tuple(tuple(g) for g in groups)


def _probability(kind: str, args: Mapping[str, object]) -> float | None:
    """Required for the kinds that declare it (loss, reorder, duplicate); taken by any kind that is given one."""
    spec = KINDS[kind].key("probability")
    if not (spec is not None and spec.required) and "probability" not in args:
        return None
    given = args.get("probability", 1.0 if kind == "discard" else -1)
    try:
        p = float(given) if isinstance(given, int | float | str) else -1.0
    except ValueError:
        p = -1.0
    if not 0.0 <= p <= 1.0:
        raise ChaosError(f"{kind}: probability must be within 0..1 (20% = 0.2), not {args.get('probability')}")
    return p


def _discard(fault: Fault, args: Mapping[str, object], transport: str, wire: str) -> Fault:
    if transport != "udp":
        raise ChaosError(
            "discard rules act on datagrams; this cluster uses transport tcp, where the kernel retransmits a "
            "dropped segment. Use partition, loss or delay, or transport udp"
        )
    try:
        match = str(parse_match(str(args.get("match", "")), wire))
    except RuleError as e:
        raise ChaosError(f"discard: {e}") from None
    action = args.get("action", "drop")
    if action not in DISCARD_ACTIONS:
        raise ChaosError(f"discard: action must be one of {', '.join(DISCARD_ACTIONS)}, not {action!r}")
    count = args.get("count")
    if count is not None and (not isinstance(count, int) or isinstance(count, bool) or count < 1):
        raise ChaosError(f"discard: count must be a whole number >= 1, not {count!r}")
    delay = None
    if action == "delay":
        delay = _seconds(args.get("delay", 0.0), "discard: delay")
        if delay <= 0:
            raise ChaosError("discard: action delay needs a delay, e.g. 50ms")
    elif args.get("delay"):
        raise ChaosError(f"discard: a delay goes with action delay, not {action}")
    return replace(fault, match=match, action=str(action), count=count, delay=delay)


def _seconds(value: object, what: str) -> float:
    return parse_duration(value, what, non_negative=True, error=ChaosError)
