"""Discard rules in JGroups 5's own terms, derived from the one header table of chaos/profiles/jgroups5.py (`HEADERS`):
`UNICAST3.DATA(seqno=6)`, `UNICAST3.DATA(first=1)`, `UNICAST3.ACK()`, `NAKACK2.MSG(seqno=7)`, `NAKACK4.ACK()`,
`GMS.VIEW()`, `MERGE3.INFO()`, `STABLE.GOSSIP()`, `FD_ALL3.HEARTBEAT()`.

A rule names a header type (PROTOCOL.TYPE; the headers without a type by JGroups' class: FD_ALL3.HEARTBEAT,
FRAG2.FRAG) and the integer or boolean fields its body writes before its first field of another kind (an address, a
string): UNICAST3.DATA's seqno, conn_id and first; UNICAST3.ACK's seqno, conn_id and timestamp; NAKACK2.MSG's seqno.
Seqnos, timestamps and FRAG2's numbers are compressed (a length byte, then that many bytes), so the fields after one
sit at an offset that depends on its value: the handler reads them in order, and u32 jumps over each length byte
(chaos/profiles/jgroups5_u32.py). A message matches when ANY of its headers matches (a JGroups message carries one
header per protocol it passed: GMS.VIEW travels as NAKACK2.MSG too). `STABLE.STABLE_GOSSIP` is an alias of
`STABLE.GOSSIP` (the constant's name in STABLE.java).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from chaos.profiles.jgroups5 import HEADERS, HeaderType
from chaos.rules import Match, RuleError, parse_value, split_expr

WIRE = "jgroups-5"
# the rule names of the headers without a type field (JGroups' header classes: HeartbeatHeader, FragHeader)
UNTYPED = {"FD_ALL3": "HEARTBEAT", "FD_ALL": "HEARTBEAT", "FRAG2": "FRAG"}
# TpHeader is on every message: a rule on it is a partition or a loss
NOT_RULES = {"TP": "every message carries TP's TpHeader: use partition or loss"}
ALIASES = {"STABLE.STABLE_GOSSIP": "STABLE.GOSSIP"}

FIXED = {"u8": 1, "bool": 1, "i16": 2, "i32": 4, "i64": 8}
COMPRESSED = {"longc": 64, "intc": 32}
BOUNDS = {
    "u8": (0, 0xFF),
    "bool": (0, 1),
    "i16": (-(1 << 15), (1 << 15) - 1),
    "i32": (-(1 << 31), (1 << 31) - 1),
    "i64": (-(1 << 63), (1 << 63) - 1),
    "intc": (-(1 << 31), (1 << 31) - 1),
    "longc": (-(1 << 63), (1 << 63) - 1),
}


@dataclass(frozen=True)
class FieldSpec:
    """A matchable field: its kind, its place in the body's field sequence (after the type), and where it is:
    `fixed` is its offset from the header's body when every compressed field before it is only its length byte,
    `jumps` the offsets (counted the same way) of those length bytes, whose values add to the offset."""

    name: str
    kind: str
    index: int
    fixed: int
    jumps: tuple[int, ...]


@dataclass(frozen=True)
class RuleSpec:
    """One header type a rule can name: its header class, type code (None: the class has no type field), and its
    matchable fields in wire order (with the kinds of the fields before them, for the handler's reader)."""

    name: str
    header: HeaderType
    type_code: int | None
    fields: tuple[FieldSpec, ...]

    @property
    def key(self) -> int:
        """(protocol id << 16) | magic: how the span walker names a header."""
        return (self.header.id << 16) | self.header.magic

    @property
    def protocol(self) -> str:
        return self.header.protocol

    @property
    def type_size(self) -> int:
        return FIXED[self.header.type_kind] if self.header.type_kind else 0

    def field(self, name: str) -> FieldSpec | None:
        return next((f for f in self.fields if f.name == name), None)


def _rule_spec(h: HeaderType, code: int | None, name: str) -> RuleSpec:
    pos = FIXED[h.type_kind] if h.type_kind else 0
    jumps: list[int] = []
    out: list[FieldSpec] = []
    sequence = (*h.by_type.get(code, ()), *h.fields) if code is not None else h.fields
    for i, (fname, kind) in enumerate(sequence):
        if kind not in FIXED and kind not in COMPRESSED:
            break
        out.append(FieldSpec(fname, kind, i, pos, tuple(jumps)))
        if kind in COMPRESSED:
            jumps.append(pos)
            pos += 1
        else:
            pos += FIXED[kind]
    return RuleSpec(name, h, code, tuple(out))


def _specs() -> dict[str, RuleSpec]:
    out: dict[str, RuleSpec] = {}
    for h in HEADERS:
        if h.protocol in NOT_RULES:
            continue
        if h.type_kind is None:
            name = f"{h.protocol}.{UNTYPED[h.protocol]}"
            out[name] = _rule_spec(h, None, name)
        for code, tname in h.types.items():
            name = f"{h.protocol}.{tname}"
            out[name] = _rule_spec(h, code, name)
    return out


SPECS: dict[str, RuleSpec] = _specs()


def rule_names() -> list[str]:
    """Every header type a rule can name, with its matchable fields: `UNICAST3.DATA(seqno, conn_id, first)`."""
    return [f"{name}({', '.join(f.name for f in s.fields)})" for name, s in sorted(SPECS.items())]


def parse_match(expr: str) -> Match:
    """A rule over JGroups 5's headers (RuleError naming the valid headers or fields when it names none)."""
    proto, header, args = split_expr(expr, example="UNICAST3.DATA(seqno=6)")
    key = ALIASES.get(f"{proto}.{header}", f"{proto}.{header}")
    if proto in NOT_RULES:
        raise RuleError(f"{key}: {NOT_RULES[proto]}")
    spec = SPECS.get(key)
    if spec is None:
        raise RuleError(f"unknown JGroups 5 header {key}; valid headers: {', '.join(sorted(SPECS))}")
    fields: list[tuple[str, int | tuple[int, int]]] = []
    for name, raw in args:
        f = spec.field(name)
        if f is None:
            names = ", ".join(x.name for x in spec.fields) or "(none before its first address or string)"
            raise RuleError(f"{key} has no field {name!r}; its fields: {names}")
        value = parse_value(key, name, raw, "bool" if f.kind == "bool" else "int")
        lo, hi = value if isinstance(value, tuple) else (value, value)
        low, high = BOUNDS[f.kind]
        if lo < low or hi > high:
            raise RuleError(f"{key}.{name}={raw} is outside a {f.kind} field ({low}..{high})")
        if name in dict(fields):
            raise RuleError(f"{key}: field {name!r} given twice")
        fields.append((name, value))
    protocol, _, typ = key.partition(".")
    return Match(protocol, typ, tuple(fields), wire=WIRE)


def spec_of(match: Match) -> RuleSpec:
    return SPECS[f"{match.protocol}.{match.header}"]


# --- the handler's reader --------------------------------------------------------------------------------------------

_FORMATS = {"u8": "B", "bool": "B", "i16": "h", "i32": "i", "i64": "q"}
_STRUCTS = {kind: struct.Struct("!" + c) for kind, c in _FORMATS.items()}
Step = tuple[Callable[[bytes, int], tuple[int, int]], int, int, bool]  # (read, lo, hi, tested)


def _fixed_reader(kind: str) -> Callable[[bytes, int], tuple[int, int]]:
    unpack, size = _STRUCTS[kind].unpack_from, FIXED[kind]

    def read(buf: bytes, p: int) -> tuple[int, int]:
        return unpack(buf, p)[0], p + size

    return read


def _compressed_reader(bits: int) -> Callable[[bytes, int], tuple[int, int]]:
    top, full = 1 << (bits - 1), bits // 8

    def read(buf: bytes, p: int) -> tuple[int, int]:
        n = buf[p]
        if n > full:
            raise ValueError(f"a compressed number of {n} bytes")
        end = p + 1 + n
        if end > len(buf):
            raise ValueError("truncated")
        v = int.from_bytes(buf[p + 1 : end], "little")
        return (v - (top << 1) if n == full and v >= top else v), end

    return read


READERS: dict[str, Callable[[bytes, int], tuple[int, int]]] = {
    **{k: _fixed_reader(k) for k in FIXED},
    **{k: _compressed_reader(b) for k, b in COMPRESSED.items()},
}


def program(match: Match) -> tuple[Step, ...]:
    """What the handler reads of a header body to judge a match, in wire order: the type (if the class has one),
    then each field up to the last one the match tests, each step (reader, lo, hi, tested), tested False for a field
    it only skips."""
    spec = spec_of(match)
    steps: list[Step] = []
    if spec.type_code is not None and spec.header.type_kind is not None:
        steps.append((READERS[spec.header.type_kind], spec.type_code, spec.type_code, True))
    tested = {name: value for name, value in match.fields}
    last = max((f.index for f in spec.fields if f.name in tested), default=-1)
    for f in spec.fields:
        if f.index > last:
            break
        value = tested.get(f.name)
        if value is None:
            steps.append((READERS[f.kind], 0, 0, False))
        else:
            lo, hi = value if isinstance(value, tuple) else (value, value)
            steps.append((READERS[f.kind], lo, hi, True))
    return tuple(steps)
