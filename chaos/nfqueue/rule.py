"""Handler rules: validation of the JSON rule dicts (see the package docstring) and the compiled Rule with its
state (counters, remaining count, random generator). A rule's `wire` names the wire profile its match is read in
(chaos/profiles/; default chaosbed): a chaosbed message matches by its one (proto, type) and field offsets, a JGroups
2.12 message when any of its headers is the rule's header class with the type and fields (JGroupsRule), a JGroups 5
message likewise, its header's fields read in order (JGroups5Rule)."""

from __future__ import annotations

import ipaddress
import math
import random
import struct
from collections.abc import Callable
from typing import Any

from chaos.nfqueue.spans import Span
from chaos.nfqueue.wires import WIRES
from chaos.profiles import jgroups5_rules, jgroups212_rules, parse_match
from chaos.rules import Match, RuleError
from node import wire

# Verdict kinds returned by Judge.judge.
ACCEPT, DROP, DELAY, DUPLICATE, REORDER = range(5)
ACTIONS = {"drop": DROP, "delay": DELAY, "duplicate": DUPLICATE, "reorder": REORDER}


class RuleValidationError(ValueError):
    """A rule that cannot be compiled; the message names the rule id, the field and the reason."""


_RULE_KEYS = {
    "id",
    "sources",
    "match",
    "action",
    "probability",
    "count",
    "delay_ms",
    "jitter_ms",
    "seed",
    "active_from_ns",
    "active_until_ns",
    "wire",
}
_STRUCT_OF_KIND = {k: struct.Struct("!" + c) for k, c in wire.FIXED_KINDS.items()}
_FIELD_MAX = {"u8": 0xFF, "u16": 0xFFFF, "u32": 0xFFFFFFFF, "u64": (1 << 64) - 1, "bool": 1}


class Rule:
    """A compiled rule plus its state (counters, remaining count, random generator)."""

    __slots__ = (
        "action",
        "active_from",
        "active_until",
        "count",
        "delay_ms",
        "delayed",
        "dropped",
        "duplicated",
        "id",
        "jitter_ms",
        "kind",
        "match",
        "matched",
        "probability",
        "remaining",
        "reordered",
        "rng",
        "seed",
        "sources",
        "spec",
        "tests",
        "type_key",
        "wire",
    )

    def __init__(self, spec: dict[str, Any], match: Match | None, sources: frozenset[bytes]) -> None:
        self.spec = spec
        self.id: str = spec["id"]
        self.sources = sources
        self.match = match
        self.action: str = spec["action"]
        self.kind = ACTIONS[self.action]
        self.probability: float = spec["probability"]
        self.count: int | None = spec["count"]
        self.delay_ms: float = spec["delay_ms"]
        self.jitter_ms: float = spec["jitter_ms"]
        self.seed: int = spec["seed"]
        self.wire: str = spec.get("wire", "chaosbed")
        # The window, CLOCK_MONOTONIC ns: None = unbounded (kept as None so untimed rules cost nothing).
        self.active_from: int | None = spec.get("active_from_ns")
        self.active_until: int | None = spec.get("active_until_ns")
        self.type_key = -1  # link rule
        self.tests: tuple[tuple[int, Callable[..., tuple[Any, ...]], int, int], ...] = ()
        if match is not None:
            self._compile(match)
        self.reset()

    def _compile(self, match: Match) -> None:
        """The (proto, type) key and the field tests at offsets from the message's start."""
        hs = wire.SPECS[f"{match.protocol}.{match.header}"]
        self.type_key = (hs.proto_id << 8) | hs.type_id
        offsets, off = {}, 2
        for f in hs.fields:
            if f.kind not in wire.FIXED_KINDS:
                break
            offsets[f.name] = (off, f.kind)
            off += _STRUCT_OF_KIND[f.kind].size
        tests = []
        for name, value in match.fields:
            o, kind = offsets[name]
            lo, hi = value if isinstance(value, tuple) else (value, value)
            tests.append((o, _STRUCT_OF_KIND[kind].unpack_from, lo, hi))
        self.tests = tuple(tests)

    def reset(self) -> None:
        self.matched = self.dropped = self.delayed = self.duplicated = self.reordered = 0
        self.remaining = self.count
        self.rng = random.Random(self.seed)

    @property
    def link(self) -> bool:
        return self.match is None

    @property
    def timed(self) -> bool:
        return self.active_from is not None or self.active_until is not None

    def active(self, now_ns: int) -> bool:
        """Whether the rule acts at now_ns (CLOCK_MONOTONIC ns): active_from_ns <= now < active_until_ns."""
        return (self.active_from is None or self.active_from <= now_ns) and (
            self.active_until is None or now_ns < self.active_until
        )

    def fires(self) -> bool:
        """Whether a match is acted on: count left, and the rule's own random draw says so."""
        return self.remaining != 0 and (self.probability >= 1.0 or self.rng.random() < self.probability)

    def spend(self) -> None:
        """One action taken: one less of `count`."""
        if self.remaining is not None:
            self.remaining -= 1

    def inherit(self, old: Rule) -> None:
        """Keeps the counters of the rule this one replaces (same id), and its remaining count and random sequence
        unless `count` / `seed` changed."""
        self.matched, self.dropped, self.delayed = old.matched, old.dropped, old.delayed
        self.duplicated, self.reordered = old.duplicated, old.reordered
        if self.count == old.count:
            self.remaining = old.remaining
        if self.seed == old.seed:
            self.rng = old.rng

    def matches(self, buf: bytes, span: Span) -> bool:
        """True if the message at span is this rule's header type with every field equal / in range."""
        start = span[0]
        if (span[2] << 8) | span[3] != self.type_key:
            return False
        for off, unpack, lo, hi in self.tests:
            v = unpack(buf, start + off)[0]
            if v < lo or v > hi:
                return False
        return True

    def stats(self) -> dict[str, int]:
        return {
            "matched": self.matched,
            "dropped": self.dropped,
            "delayed": self.delayed,
            "duplicated": self.duplicated,
            "reordered": self.reordered,
        }

    def __repr__(self) -> str:
        return f"Rule({self.spec!r})"


class JGroupsRule(Rule):
    """A rule on JGroups 2.12's wire: `type_key` is the header class ((protocol id << 16) | magic) and `tests` are
    (offset from the header's body, unpack, lo, hi): the type first, then presence bytes and fields."""

    __slots__ = ()

    def _compile(self, match: Match) -> None:
        self.type_key = jgroups212_rules.spec_of(match).key
        self.tests = tuple(
            (off, jgroups212_rules.STRUCTS[kind].unpack_from, lo, hi)
            for off, kind, lo, hi in jgroups212_rules.body_tests(match)
        )

    def matches(self, buf: bytes, span: Any) -> bool:
        """True if any header of the message at span is this rule's class with every test holding."""
        for key, body in span[3]:
            if key == self.type_key:
                for off, unpack, lo, hi in self.tests:
                    v = unpack(buf, body + off)[0]
                    if v < lo or v > hi:
                        return False
                return True
        return False


class JGroups5Rule(Rule):
    """A rule on JGroups 5's wire: `type_key` is the header class ((protocol id << 16) | magic) and `program` the
    reads of the header's body in wire order (jgroups5_rules.program: the type, then each field up to the last one
    tested; a field after a compressed number has no fixed offset)."""

    __slots__ = ("program",)

    def _compile(self, match: Match) -> None:
        self.type_key = jgroups5_rules.spec_of(match).key
        self.program = jgroups5_rules.program(match)

    def matches(self, buf: bytes, span: Any) -> bool:
        """True if any header of the message at span is this rule's class with every test holding."""
        for key, body in span[2]:
            if key == self.type_key:
                p = body
                try:
                    for read, lo, hi, tested in self.program:
                        v, p = read(buf, p)
                        if tested and (v < lo or v > hi):
                            return False
                except (ValueError, IndexError):
                    return False
                return True
        return False


_RULE_CLASSES: dict[str, type[Rule]] = {jgroups212_rules.WIRE: JGroupsRule, jgroups5_rules.WIRE: JGroups5Rule}


def _number(rid: str, name: str, value: Any, *, lo: float = 0.0, hi: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise RuleValidationError(f"rule {rid!r}: {name} must be a number, not {value!r}")
    if not lo <= value <= hi:
        raise RuleValidationError(f"rule {rid!r}: {name} must be in [{lo}, {hi}], not {value!r}")
    return float(value)


def compile_rule(spec: Any) -> Rule:
    """Validates one rule dict and compiles it. Raises RuleValidationError naming the rule id, field and reason."""
    if not isinstance(spec, dict):
        raise RuleValidationError(f"a rule is a JSON object, not {type(spec).__name__}")
    rid = spec.get("id")
    if not isinstance(rid, str) or not rid:
        raise RuleValidationError(f"rule {rid!r}: id must be a non-empty string")
    unknown = set(spec) - _RULE_KEYS
    if unknown:
        raise RuleValidationError(f"rule {rid!r}: unknown field(s) {sorted(unknown)}; known: {sorted(_RULE_KEYS)}")
    sources = spec.get("sources") or []
    if not isinstance(sources, list):
        raise RuleValidationError(f"rule {rid!r}: sources must be a list of IPv4 addresses, not {sources!r}")
    packed = set()
    for s in sources:
        try:
            packed.add(ipaddress.IPv4Address(s).packed)
        except (ValueError, TypeError):
            raise RuleValidationError(f"rule {rid!r}: sources: {s!r} is not an IPv4 address") from None
    wire_name = spec.get("wire", "chaosbed")
    if wire_name not in WIRES:
        raise RuleValidationError(f"rule {rid!r}: wire must be one of {sorted(WIRES)}, not {wire_name!r}")
    match = _match(rid, spec.get("match"), wire_name)
    action = spec.get("action")
    if action not in ACTIONS:
        raise RuleValidationError(f"rule {rid!r}: action must be one of {sorted(ACTIONS)}, not {action!r}")
    probability = _number(rid, "probability", spec.get("probability", 1.0), hi=1.0)
    count = spec.get("count")
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 0):
        raise RuleValidationError(f"rule {rid!r}: count must be null or an integer >= 0, not {count!r}")
    delay_ms = _number(rid, "delay_ms", spec.get("delay_ms", 0), hi=3_600_000)
    jitter_ms = _number(rid, "jitter_ms", spec.get("jitter_ms", 0), hi=3_600_000)
    if action != "delay" and (delay_ms or jitter_ms):
        raise RuleValidationError(f"rule {rid!r}: delay_ms/jitter_ms only apply to action 'delay', not {action!r}")
    seed = spec.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise RuleValidationError(f"rule {rid!r}: seed must be an integer, not {seed!r}")
    active_from = _instant(rid, "active_from_ns", spec.get("active_from_ns"))
    active_until = _instant(rid, "active_until_ns", spec.get("active_until_ns"))
    if active_from is not None and active_until is not None and active_until < active_from:
        raise RuleValidationError(
            f"rule {rid!r}: active_until_ns ({active_until}) must not be before active_from_ns ({active_from})"
        )
    clean = {
        "id": rid,
        "sources": list(sources),
        "match": spec.get("match"),
        "action": action,
        "probability": probability,
        "count": count,
        "delay_ms": delay_ms,
        "jitter_ms": jitter_ms,
        "seed": seed,
        "active_from_ns": active_from,
        "active_until_ns": active_until,
    }
    if wire_name != "chaosbed":
        clean["wire"] = wire_name
    return _RULE_CLASSES.get(wire_name, Rule)(clean, match, frozenset(packed))


def _match(rid: str, raw_match: Any, wire_name: str) -> Match | None:
    """The rule's match read in its wire profile (None: a link rule)."""
    if raw_match is None:
        return None
    if not isinstance(raw_match, str):
        raise RuleValidationError(f"rule {rid!r}: match must be a string like UNICAST3.ACK(seqno=50) or null")
    try:
        match = parse_match(raw_match, wire_name)
    except RuleError as e:
        raise RuleValidationError(f"rule {rid!r}: match: {e}") from None
    if wire_name == "chaosbed":
        kinds = {f.name: f.kind for f in wire.SPECS[f"{match.protocol}.{match.header}"].fields}
        for name, value in match.fields:
            lo, hi = value if isinstance(value, tuple) else (value, value)
            if lo < 0 or hi > _FIELD_MAX[kinds[name]]:
                raise RuleValidationError(f"rule {rid!r}: match: {name}={value} is outside a {kinds[name]} field")
    return match


def _instant(rid: str, name: str, value: Any) -> int | None:
    """A window bound: null, or CLOCK_MONOTONIC nanoseconds (an integer >= 0)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise RuleValidationError(
            f"rule {rid!r}: {name} must be null or CLOCK_MONOTONIC nanoseconds (an integer >= 0), not {value!r}"
        )
    return value


def compile_rules(specs: Any) -> list[Rule]:
    if not isinstance(specs, list):
        raise RuleValidationError(f"rules must be a list, not {type(specs).__name__}")
    rules = [compile_rule(s) for s in specs]
    ids = [r.id for r in rules]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise RuleValidationError(f"rule {dup[0]!r}: id: used by more than one rule")
    wires = sorted({r.wire for r in rules if r.match is not None})
    if len(wires) > 1:
        first = next(r for r in rules if r.match is not None and r.wire == wires[1])
        raise RuleValidationError(
            f"rule {first.id!r}: wire: the message rules of one handler read one wire, not {' and '.join(wires)}"
        )
    return rules
