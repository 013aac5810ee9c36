"""The kernel's fast path for JGroups 5 discards: xt_u32 tests for the datagrams u32 can decide alone, derived from the
rule specs of chaos/profiles/jgroups5_rules.py.

u32 decides a SINGLE datagram whose message's FIRST header is the rule's (a LIST goes to the handler: the 5.x bundlers
send a lone message as a SINGLE, so a LIST always holds several). With UUID addresses the first header is at a fixed
offset: the datagram starts at 28 (IPv4 without options, UDP), then version u16, flags u8, message type i16, leading
u8, flags u16, [dest 1 + 16], src 1 + 16, nhdrs i16: the header at 72 for a unicast (leading 3), at 55 for a
multicast (leading 2); its body 4 bytes later. A field after a compressed one (UNICAST3.DATA's conn_id and first
after the seqno) is reached by u32's `@`, which adds the length byte's value to the offset: `77>>24@80>>24=1` reads
the byte 80 + L bytes in, L being the seqno's length at 77. A compressed value itself is its length byte and that many
bytes, least significant first: `seqno=6` is `77>>24=1` and `78>>24=6`; a range is split by byte length and digit into
a few exact patterns, each one rule (at most MAX_ALTERNATIVES, else the handler decides).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from chaos.profiles.jgroups5 import ADDR_UUID, DEST_SET, HEADERS, LIST, SRC_SET, VERSION_END, VERSION_MIN, HeaderType
from chaos.profiles.jgroups5_rules import COMPRESSED, FIXED, FieldSpec, RuleSpec, spec_of
from chaos.rules import Match

_UDP = 28  # an IPv4 header without options and the UDP header: the datagram starts here
MAX_ALTERNATIVES = 24  # u32 rules one match may become (ranges over compressed numbers split into patterns)


@dataclass(frozen=True)
class Shape:
    """A SINGLE datagram layout with UUID addresses: its leading byte, the offsets of its address flag bytes and of
    the first header."""

    name: str
    leading: int
    uuids: tuple[int, ...]
    first_header: int

    @property
    def body(self) -> int:
        return self.first_header + 4


def _shape(name: str, leading: int) -> Shape:
    at = _UDP + 8  # version, flags, message type, leading, message flags
    uuids = []
    for bit in (DEST_SET, SRC_SET):
        if leading & bit:
            uuids.append(at)
            at += 17
    return Shape(name, leading, tuple(uuids), at + 2)


SHAPES = (_shape("unicast", DEST_SET | SRC_SET), _shape("multicast", SRC_SET))


def location(jumps: tuple[int, ...], offset: int) -> str:
    """The u32 location of the word at `offset` (absolute, counting each compressed value before it as its length
    byte alone) after jumping over the values whose length bytes are at `jumps` (absolute, counted the same way)."""
    if not jumps:
        return str(offset)
    return f"{jumps[0]}>>24" + "".join(f"@{j}>>24" for j in jumps[1:]) + f"@{offset}"


def _byte_test(jumps: tuple[int, ...], offset: int, lo: int, hi: int) -> str:
    return f"{location(jumps, offset)}>>24={lo if lo == hi else f'{lo}:{hi}'}"


def head_tests(shape: Shape, h: HeaderType | None) -> list[str]:
    """The tests that a datagram has this shape (JGroups 5.3.8+, SINGLE, UUID addresses) and, with `h`, that its
    message's first header is of h's class."""
    tests = [
        "0>>24=0x45",
        f"{_UDP}>>16={VERSION_MIN:#x}:{VERSION_END - 1:#x}",
        f"{_UDP + 2}>>24&{LIST:#x}=0",
        f"{_UDP + 5}>>24={shape.leading}",
        *(f"{at}>>24={ADDR_UUID}" for at in shape.uuids),
    ]
    if h is not None:
        tests.append(f"{shape.first_header}={(h.id << 16) | h.magic:#x}")
    return tests


def _fixed_tests(jumps: tuple[int, ...], offset: int, kind: str, lo: int, hi: int) -> list[str] | None:
    """Tests of a fixed-size field; None when u32 cannot say it (a signed range across 0, a 64-bit range across a
    2^32 boundary)."""
    size = FIXED[kind]
    if lo < 0 <= hi:
        return None
    mod = 1 << (8 * size)
    ulo, uhi = lo % mod, hi % mod
    values = str(ulo) if ulo == uhi else f"{ulo}:{uhi}"
    loc = location(jumps, offset)
    if size < 4:
        return [f"{loc}>>{32 - 8 * size}={values}"]
    if size == 4:
        return [f"{loc}={values}"]
    if ulo >> 32 != uhi >> 32:
        return None
    low = uhi & 0xFFFFFFFF if ulo == uhi else None
    tail = str(low) if low is not None else f"{ulo & 0xFFFFFFFF}:{uhi & 0xFFFFFFFF}"
    return [f"{loc}={ulo >> 32}", f"{location(jumps, offset + 4)}={tail}"]


Piece = tuple[int, tuple[tuple[int, int, int], ...]]  # (byte length, ((byte index from the least, lo, hi), ...))


def _digits(lo: int, hi: int, n: int) -> list[tuple[tuple[int, int, int], ...]]:
    """[lo, hi] of n-byte numbers as patterns: equal most significant bytes, then one byte in a range, the rest any."""
    if n == 0:
        return [()]
    shift = 8 * (n - 1)
    full = (1 << shift) - 1
    top_lo, top_hi, rest_lo, rest_hi = lo >> shift, hi >> shift, lo & full, hi & full
    if top_lo == top_hi:
        return [((n - 1, top_lo, top_lo), *p) for p in _digits(rest_lo, rest_hi, n - 1)]
    out: list[tuple[tuple[int, int, int], ...]] = []
    first, last = top_lo, top_hi
    if rest_lo:
        out += [((n - 1, top_lo, top_lo), *p) for p in _digits(rest_lo, full, n - 1)]
        first += 1
    if rest_hi != full:
        last -= 1
    if first <= last:
        out.append(((n - 1, first, last),))
    if rest_hi != full:
        out += [((n - 1, top_hi, top_hi), *p) for p in _digits(0, rest_hi, n - 1)]
    return out


def compressed_pieces(lo: int, hi: int, bits: int) -> list[Piece]:
    """The patterns of a compressed number in [lo, hi] (Bits.writeLongCompressed: the fewest bytes that hold it, a
    negative number in all of them), as (length, byte ranges)."""
    full = bits // 8
    mod = 1 << bits
    out: list[Piece] = []
    if lo < 0:
        ulo, uhi = lo % mod, min(hi, -1) % mod
        out += [(full, p) for p in _digits(ulo, uhi, full)]
        lo = 0
    if hi < lo:
        return out
    if lo == 0:
        out.append((0, ()))
        lo = 1
    for n in range(1, full + 1):
        first, last = 1 << (8 * (n - 1)) if n > 1 else 1, (1 << (8 * n)) - 1
        if n == full:
            last = (1 << (bits - 1)) - 1
        a, b = max(lo, first), min(hi, last)
        if a <= b:
            out += [(n, p) for p in _digits(a, b, n)]
    return out


def _field_alternatives(f: FieldSpec, base: int, lo: int, hi: int) -> list[list[str]] | None:
    """The alternatives (each a list of tests) for one field of a header whose body is at `base`."""
    jumps = tuple(base + j for j in f.jumps)
    at = base + f.fixed
    if f.kind in FIXED:
        tests = _fixed_tests(jumps, at, f.kind, lo, hi)
        return None if tests is None else [tests]
    out = []
    for n, bytes_ in compressed_pieces(lo, hi, COMPRESSED[f.kind]):
        tests = [_byte_test(jumps, at, n, n)]
        tests += [_byte_test(jumps, at + 1 + i, a, b) for i, a, b in sorted(bytes_)]
        out.append(tests)
    return out


@functools.lru_cache(maxsize=1024)
def u32_drop(match: Match) -> tuple[tuple[str, ...], ...]:
    """For each shape u32 can decide and each pattern of the match's values, the tests of a SINGLE datagram whose
    first header matches: the kernel drops exactly those. () when u32 cannot express the match (the handler
    decides)."""
    spec = spec_of(match)
    out: list[tuple[str, ...]] = []
    for shape in SHAPES:
        alternatives = [[*head_tests(shape, spec.header), *_type_tests(spec, shape.body)]]
        for name, value in match.fields:
            f = spec.field(name)
            assert f is not None  # parse_match checked it
            lo, hi = value if isinstance(value, tuple) else (value, value)
            more = _field_alternatives(f, shape.body, lo, hi)
            if more is None:
                return ()
            alternatives = [a + m for a in alternatives for m in more]
            if len(alternatives) * len(SHAPES) > MAX_ALTERNATIVES:
                return ()
        out += [tuple(a) for a in alternatives]
    return tuple(out)


def _type_tests(spec: RuleSpec, body: int) -> list[str]:
    h = spec.header
    if spec.type_code is None or h.type_kind is None:
        return []
    tests = _fixed_tests((), body, h.type_kind, spec.type_code, spec.type_code)
    assert tests is not None
    return tests


def u32_decided(protocols: set[str] | frozenset[str]) -> list[list[str]]:
    """Tests of the SINGLE datagrams whose message's first header belongs to one of `protocols`: when every rule on
    a source names one of them and the kernel decides it, such a datagram is decided by the drop rules (a message has
    one header per protocol), so it need not go to the handler."""
    return [head_tests(shape, h) for shape in SHAPES for h in HEADERS if h.protocol in protocols]


def u32_datagrams() -> list[str]:
    """Tests of every JGroups 5 datagram (IPv4 without options, a version of major 5): what goes to the handler,
    which counts the ones it cannot read (an older 5.x layout, an unknown header) and passes them untouched."""
    return ["0>>24=0x45", f"{_UDP}>>27=5"]
