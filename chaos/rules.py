"""DISCARD rule expressions over the wire format: `UNICAST3.ACK(seqno=50)`, `UNICAST3.DATA(first=1)`,
`UNICAST3.DATA(seqno=10..20)`, `NAKACK2.XMIT_REQ()`.

Names are checked against node/wire.py's header table; a bad name is rejected with the list of valid ones.
(The scapy layers and the kernel/NFQUEUE compilers of the chaos engine build on the same parsed form.) The syntax
(`split_expr`, `parse_value`) is shared by the wire profiles of other systems (chaos/profiles/), whose `Match`es
carry their profile's name in `wire`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from node import wire

_EXPR = re.compile(r"^\s*(?P<proto>\w+)\.(?P<header>\w+)\s*(?:\((?P<args>[^()]*)\))?\s*$")
_RANGE = re.compile(r"^(-?\d+)\s*\.\.\s*(-?\d+)$")


class RuleError(ValueError):
    """A rule that cannot be parsed or names an unknown header or field."""


@dataclass(frozen=True)
class Match:
    protocol: str
    header: str
    fields: tuple[tuple[str, int | tuple[int, int]], ...]  # value, or an inclusive (low, high) range
    wire: str = "chaosbed"  # the wire profile whose header table names it (chaos/profiles/)

    def predicates(self) -> dict[str, Any]:
        """Field tests for the simulator's MessageRule: plain values, or callables for ranges."""
        out: dict[str, Any] = {}
        for name, value in self.fields:
            if isinstance(value, tuple):
                lo, hi = value
                out[name] = _in_range(lo, hi)
            else:
                out[name] = value
        return out

    def __str__(self) -> str:
        args = ", ".join(f"{n}={v[0]}..{v[1]}" if isinstance(v, tuple) else f"{n}={v}" for n, v in self.fields)
        return f"{self.protocol}.{self.header}({args})"


def _in_range(lo: int, hi: int) -> Callable[[int], bool]:
    return lambda v: lo <= v <= hi


def split_expr(expr: str, example: str = "UNICAST3.ACK(seqno=50)") -> tuple[str, str, list[tuple[str, str]]]:
    """PROTOCOL.HEADER(field=value, ...) as (PROTOCOL, HEADER, [(field, raw value), ...]), names upper-cased."""
    m = _EXPR.match(expr)
    if not m:
        raise RuleError(f"cannot parse {expr!r}: write PROTOCOL.HEADER(field=value, ...), e.g. {example}")
    proto, header = m["proto"].upper(), m["header"].upper()
    args = []
    for part in filter(None, (p.strip() for p in (m["args"] or "").split(","))):
        name, eq, raw = (s.strip() for s in part.partition("="))
        if not eq or not raw:
            raise RuleError(f"{proto}.{header}: {part!r} is not field=value")
        args.append((name, raw))
    return proto, header, args


def parse_match(expr: str) -> Match:
    proto, header, args = split_expr(expr)
    key = f"{proto}.{header}"
    spec = wire.SPECS.get(key)
    if spec is None:
        raise RuleError(f"unknown header {key}; valid headers: {', '.join(sorted(wire.SPECS))}")
    kinds = {f.name: f.kind for f in spec.fields}
    fields: list[tuple[str, int | tuple[int, int]]] = []
    for name, raw in args:
        if name not in kinds:
            raise RuleError(f"{key} has no field {name!r}; its fields: {', '.join(kinds) or '(none)'}")
        if kinds[name] not in wire.FIXED_KINDS:
            raise RuleError(f"{key}.{name} is a {kinds[name]} field; only integer and bool fields can be matched")
        fields.append((name, parse_value(key, name, raw, kinds[name])))
    return Match(proto, header, tuple(fields))


def rule_names() -> list[str]:
    """Every header a rule can name, with its matchable fields: `UNICAST3.ACK(seqno, conn_id, timestamp)`."""
    out = []
    for key, spec in sorted(wire.SPECS.items()):
        names = [f.name for f in spec.fields if f.kind in wire.FIXED_KINDS]
        out.append(f"{key}({', '.join(names)})")
    return out


def parse_value(key: str, name: str, raw: str, kind: str) -> int | tuple[int, int]:
    """A field's value as written: true/false or 1/0 for a bool, an integer (any base) or a range lo..hi."""
    if kind == "bool":
        low = raw.lower()
        if low in ("1", "true"):
            return 1
        if low in ("0", "false"):
            return 0
        raise RuleError(f"{key}.{name} is a bool: use 1/0 or true/false, not {raw!r}")
    r = _RANGE.match(raw)
    if r:
        lo, hi = int(r[1]), int(r[2])
        if lo > hi:
            raise RuleError(f"{key}.{name}: empty range {raw}")
        return (lo, hi)
    try:
        return int(raw, 0)
    except ValueError:
        raise RuleError(f"{key}.{name} takes an integer or a range like 10..20, not {raw!r}") from None
