"""Discard rules in JGroups 2.12's own terms, derived from the one header table of chaos/profiles/jgroups212.py
(`HEADERS`): `UNICAST2.DATA(first=true)`, `UNICAST2.DATA(seqno=6)`, `UNICAST2.STABLE()`, `NAKACK.MSG(seqno=7)`,
`NAKACK.XMIT_REQ(low=7)`, `GMS.VIEW()`, `PING.GET_MBRS_REQ()`, `FD_ALL.HEARTBEAT()`.

A rule names a header type (PROTOCOL.TYPE; the headers without a type by JGroups' class: FD_ALL.HEARTBEAT,
FRAG2.FRAG) and the integer or boolean fields that sit at a fixed offset of its body (those before its first
variable-size field: UNICAST2.DATA's seqno, conn_id and first; NAKACK.XMIT_REQ's range as `low` and `high`). A message
matches when ANY of its headers matches (a JGroups message carries one header per protocol it passed). The aliases
`NAKACK2.MSG`, `NAKACK2.XMIT_REQ`, `NAKACK2.XMIT_RSP` name NAKACK's, so a rule written for chaosbed's NAKACK2 reads
the same on the jar.

Two compilers use the same specs: `u32_drop` (the kernel's fast path, xt_u32 tests, for the shapes where the header
is the first of a SINGLE datagram's message or of a LIST's only message) and chaos/nfqueue (the handler, for the rest:
field tests at offsets from the header's body, which chaos/profiles/jgroups212_spans.py finds).
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass

from chaos.profiles.jgroups212 import ADDR_UUID, BUF_SET, DEST_SET, HEADERS, SRC_SET, VERSION, HeaderType
from chaos.rules import Match, RuleError, parse_value, split_expr

WIRE = "jgroups-2.12"
# the rule names of the headers without a type field (JGroups' header classes: FD_ALL.HeartbeatHeader, FragHeader)
UNTYPED = {"FD_ALL": "HEARTBEAT", "FRAG2": "FRAG"}
# TpHeader (UDP) is on every message: a rule on it is a partition or a loss
NOT_RULES = {"UDP": "every message carries UDP's TpHeader: use partition or loss"}
ALIASES = {"NAKACK2.MSG": "NAKACK.MSG", "NAKACK2.XMIT_REQ": "NAKACK.XMIT_REQ", "NAKACK2.XMIT_RSP": "NAKACK.XMIT_RSP"}

_SIZES = {"u8": 1, "bool": 1, "i16": 2, "i32": 4, "i64": 8}
_BOUNDS = {
    "u8": (0, 0xFF),
    "bool": (0, 1),
    "i16": (-(1 << 15), (1 << 15) - 1),
    "i32": (-(1 << 31), (1 << 31) - 1),
    "i64": (-(1 << 63), (1 << 63) - 1),
}
_FORMATS = {"u8": "B", "bool": "B", "i16": "h", "i32": "i", "i64": "q"}
STRUCTS = {kind: struct.Struct("!" + c) for kind, c in _FORMATS.items()}


@dataclass(frozen=True)
class FieldSpec:
    """A matchable field: its offset from the header's body (after protocol id and magic), its kind, and the offset of
    the presence byte it depends on (a streamable value: 1 = present), if any."""

    name: str
    offset: int
    kind: str
    presence: int | None = None


@dataclass(frozen=True)
class RuleSpec:
    """One header type a rule can name: its header class, type code (None: the class has no type field), the type
    field's kind, the matchable fields, and the body's size when it is fixed (None when it is not)."""

    name: str
    header: HeaderType
    type_code: int | None
    fields: tuple[FieldSpec, ...]
    body_size: int | None

    @property
    def key(self) -> int:
        """(protocol id << 16) | magic: how the span walker names a header."""
        return (self.header.id << 16) | self.header.magic

    def field(self, name: str) -> FieldSpec | None:
        return next((f for f in self.fields if f.name == name), None)


def _rule_spec(h: HeaderType, code: int | None, name: str) -> RuleSpec:
    pos = _SIZES[h.type_kind] if h.type_kind else 0
    fields: list[FieldSpec] = []
    fixed = True
    for fname, kind in (*h.by_type.get(code, ()), *h.fields) if code is not None else h.fields:
        if kind in _SIZES:
            fields.append(FieldSpec(fname, pos, kind))
            pos += _SIZES[kind]
        elif kind == "range?":  # NAKACK's Range: a presence byte, then low and high
            fields += [FieldSpec("low", pos + 1, "i64", pos), FieldSpec("high", pos + 9, "i64", pos)]
            fixed = False  # absent: 1 byte; present: 17
            break
        else:
            fixed = False
            break
    return RuleSpec(name, h, code, tuple(fields), pos if fixed else None)


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
    """Every header type a rule can name, with its matchable fields: `UNICAST2.DATA(seqno, conn_id, first)`."""
    return [f"{name}({', '.join(f.name for f in s.fields)})" for name, s in sorted(SPECS.items())]


def parse_match(expr: str) -> Match:
    """A rule over JGroups 2.12's headers (RuleError naming the valid headers or fields when it names none)."""
    proto, header, args = split_expr(expr, example="UNICAST2.DATA(seqno=6)")
    key = ALIASES.get(f"{proto}.{header}", f"{proto}.{header}")
    if proto in NOT_RULES:
        raise RuleError(f"{key}: {NOT_RULES[proto]}")
    spec = SPECS.get(key)
    if spec is None:
        raise RuleError(f"unknown JGroups 2.12 header {key}; valid headers: {', '.join(sorted(SPECS))}")
    fields: list[tuple[str, int | tuple[int, int]]] = []
    for name, raw in args:
        f = spec.field(name)
        if f is None:
            names = ", ".join(x.name for x in spec.fields) or "(none at a fixed offset)"
            raise RuleError(f"{key} has no field {name!r}; its fields: {names}")
        value = parse_value(key, name, raw, f.kind)
        lo, hi = value if isinstance(value, tuple) else (value, value)
        low, high = _BOUNDS[f.kind]
        if lo < low or hi > high:
            raise RuleError(f"{key}.{name}={raw} is outside a {f.kind} field ({low}..{high})")
        if name in dict(fields):
            raise RuleError(f"{key}: field {name!r} given twice")
        fields.append((name, value))
    protocol, _, typ = key.partition(".")
    return Match(protocol, typ, tuple(fields), wire=WIRE)


def spec_of(match: Match) -> RuleSpec:
    return SPECS[f"{match.protocol}.{match.header}"]


def body_tests(match: Match) -> list[tuple[int, str, int, int]]:
    """(offset from the body, kind, low, high) tests of a message's header that a match needs, in the order they
    can be read: the type first, then each presence byte before the fields that need it."""
    spec = spec_of(match)
    h = spec.header
    tests: list[tuple[int, str, int, int]] = []
    if spec.type_code is not None and h.type_kind is not None:
        tests.append((0, h.type_kind, spec.type_code, spec.type_code))
    for name, value in match.fields:
        f = spec.field(name)
        assert f is not None  # parse_match checked it
        if f.presence is not None and (f.presence, "u8", 1, 1) not in tests:
            tests.append((f.presence, "u8", 1, 1))
        lo, hi = value if isinstance(value, tuple) else (value, value)
        tests.append((f.offset, f.kind, lo, hi))
    return tests


# --- the u32 fast path -----------------------------------------------------------------------------------------------

_UDP = 28  # an IPv4 header without options and the UDP header: the datagram starts here
_TP = (21 << 16) | 56  # UDP's TpHeader: protocol id 21, magic 56, then the cluster name (writeUTF)


@dataclass(frozen=True)
class Shape:
    """Where a message's first header is in one datagram layout, with plain UUID addresses: `head` tests version,
    form and the leading (or LIST's dest) byte, `uuids` the addresses' offsets, `jump` the offset of the i32 payload
    length xt_u32's `@` jumps over (None: no payload), `nhdrs` the offset of the header count (after the jump), and
    for a LIST the offset of its first message's presence byte and leading."""

    name: str
    head: int  # the word at 28 (version u16, flags, leading or dest address flags), compared under HEAD_MASK
    uuids: tuple[int, ...]
    jump: int | None
    nhdrs: int
    list_leading: tuple[int, int] | None = None  # LIST: (offset of the presence byte, leading)

    @property
    def first_header(self) -> int:
        return self.nhdrs + 2

    def loc(self, offset: int) -> str:
        return f"{self.jump}@{offset}" if self.jump is not None else str(offset)


HEAD_MASK = 0xFFFF01FF  # version, the LIST bit of the flags, and the byte after them


def _single(leading: int) -> Shape:
    at = _UDP + 5  # version, flags, leading, message flags
    uuids = []
    for bit in (DEST_SET, SRC_SET):
        if leading & bit:
            uuids.append(at)
            at += 18
    jump = at if leading & BUF_SET else None  # the payload's length: after the jump, nhdrs follows the payload
    nhdrs = at + 4 if jump is not None else at
    return Shape(f"SINGLE leading {leading:02x}", (VERSION << 16) | leading, tuple(uuids), jump, nhdrs)


def _list(leading: int) -> Shape:
    # version, flags, dest NULL (multicast) | src UUID | presence 1, leading, flags | [length, payload] | nhdrs
    presence = _UDP + 4 + 18
    at = presence + 3
    jump = at if leading & BUF_SET else None
    nhdrs = at + 4 if jump is not None else at
    return Shape(f"LIST first message leading {leading:02x}", (VERSION << 16) | 0x0101, (_UDP + 4,), jump, nhdrs,
                 (presence, leading))  # fmt: skip


# SINGLE: unicast (dest and src) or multicast (src), with or without a payload; LIST: a multicast bundle whose first
# message has the bundle's src (leading BUF_SET, or nothing)
SHAPES = (
    *(_single(leading) for leading in (DEST_SET | SRC_SET | BUF_SET, DEST_SET | SRC_SET, SRC_SET | BUF_SET, SRC_SET)),
    *(_list(leading) for leading in (BUF_SET, 0)),
)


def _bytes_tests(pairs: list[tuple[int, int]]) -> list[str]:
    """Byte-equality tests at absolute offsets, packed into as few 32-bit word reads as fit."""
    tests = []
    pairs = sorted(pairs)
    while pairs:
        first = pairs[0][0]
        group = [p for p in pairs if p[0] - first < 4]
        pairs = pairs[len(group) :]
        mask = value = 0
        for off, byte in group:
            shift = 8 * (3 - (off - first))
            mask |= 0xFF << shift
            value |= byte << shift
        tests.append(f"{first}&{mask:#x}={value:#x}")
    return tests


def shape_tests(shape: Shape, spec: RuleSpec | None) -> list[str] | None:
    """The tests that a datagram has this shape with plain UUIDs and that its (first) message's first header is of
    `spec`'s header class; for a LIST, also that the message is the bundle's only one (its headers are `spec`'s fixed
    body and UDP's, then the end of the list), which needs a fixed body size (None otherwise)."""
    h = spec.header if spec is not None else None
    pairs: list[tuple[int, int]] = []
    for at in shape.uuids:
        pairs += [(at, ADDR_UUID), (at + 17, 0)]
    if shape.list_leading is not None:
        presence, leading = shape.list_leading
        pairs += [(presence, 1), (presence + 1, leading)]
    tests = ["0>>24=0x45", f"28&{HEAD_MASK:#x}={shape.head:#x}", *_bytes_tests(pairs)]
    first = shape.first_header
    if h is not None:
        tests.append(f"{shape.loc(first)}={(h.id << 16) | h.magic:#x}")
    if shape.list_leading is not None:
        if spec is None or spec.body_size is None:
            return None
        tp = first + 4 + spec.body_size
        tests += [
            f"{shape.loc(shape.nhdrs)}>>16=2",
            f"{shape.loc(tp)}={_TP:#x}",
            f"{shape.loc(tp + 4)}>>16@{tp + 3}&0xff=0",  # jump over the cluster name: the list's end (presence 0)
        ]
    return tests


def _value_tests(loc: str, kind: str, lo: int, hi: int) -> list[str] | None:
    """Tests of one field whose first byte is at `loc` (a u32 location); None when u32 cannot say it (a signed
    range across 0, a 64-bit range across a 2^32 boundary)."""
    size = _SIZES[kind]
    if lo < 0 <= hi:
        return None
    mod = 1 << (8 * size)
    ulo, uhi = lo % mod, hi % mod
    if size < 4:
        shift = 32 - 8 * size
        return [f"{loc}>>{shift}={_range(ulo, uhi)}"]
    if size == 4:
        return [f"{loc}={_range(ulo, uhi)}"]
    if ulo >> 32 != uhi >> 32:
        return None
    base, _, off = loc.rpartition("@")
    lo_loc = f"{base}@{int(off) + 4}" if base else str(int(off) + 4)
    return [f"{loc}={ulo >> 32}", f"{lo_loc}={_range(ulo & 0xFFFFFFFF, uhi & 0xFFFFFFFF)}"]


def _range(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"{lo}:{hi}"


@functools.lru_cache(maxsize=1024)
def u32_drop(match: Match) -> tuple[tuple[str, ...], ...]:
    """For each shape u32 can decide, the tests of a datagram that carries one message and whose first header
    matches: the kernel drops exactly those. () when no shape can express the match (the handler decides)."""
    spec = spec_of(match)
    out = []
    for shape in SHAPES:
        tests = shape_tests(shape, spec)
        if tests is None:
            continue
        body = shape.first_header + 4
        fields = []
        for off, kind, lo, hi in body_tests(match):
            more = _value_tests(shape.loc(body + off), kind, lo, hi)
            if more is None:
                return ()
            fields += more
        out.append((*tests, *fields))
    return tuple(out)


def u32_decided(protocols: set[str] | frozenset[str]) -> list[list[str]]:
    """Tests of the SINGLE datagrams whose message's first header belongs to one of `protocols`: when every rule on
    a source names one of them, such a datagram is decided by the kernel's drop rules (a message has one header per
    protocol), so it need not go to the handler."""
    out = []
    for shape in SHAPES:
        if shape.list_leading is not None:
            continue
        for h in HEADERS:
            if h.protocol in protocols:
                tests = shape_tests(shape, _header_only(h))
                assert tests is not None
                out.append(tests)
    return out


def _header_only(h: HeaderType) -> RuleSpec:
    return RuleSpec(h.protocol, h, None, (), None)


def u32_datagrams() -> list[str]:
    """Tests of every JGroups 2.12 datagram (IPv4 without options, version 0x1302): what goes to the handler."""
    return ["0>>24=0x45", f"28>>16={VERSION:#x}"]
