"""Message spans of a JGroups 5 datagram at struct speed, for the NFQUEUE handler's hot path: where each message
starts and ends, each header's key and body offset, and where a LIST keeps its count, found by skipping fields with
the one header table (chaos/profiles/jgroups5.py's HEADERS), never decoding them.

A header whose body for its type is a run of fixed-size and compressed numbers (UNICAST3, UNICAST4, NAKACK2's MSG,
XMIT_RSP and HIGHEST_SEQNO, NAKACK4, FD_ALL3, UFC/MFC, FRAG2, STABLE without a view id) is skipped by arithmetic,
TpHeader too (a length-prefixed cluster name, a flag, an index when flagged); the rest (GMS, MERGE3, PING,
VERIFY_SUSPECT2, FD_SOCK2, STABLE with its view id: addresses and strings) by the decoder's own reader, slower but
rare. Payloads: BYTES, FRAG and NIO by their length, EMPTY none; an OBJECT (a SeqnoList, a Digest) and LONG by the
decoder's reader. Anything that cannot be walked (another version, an unknown magic, another address class or object,
a truncated datagram) raises `CannotSkip`: the datagram must pass untouched.
"""

from __future__ import annotations

import struct

from chaos.profiles.jgroups5 import (
    ADDR_NULL,
    ADDR_UUID,
    BYTES,
    DEST_SET,
    EMPTY,
    FRAG,
    HEADERS,
    LIST,
    NIO,
    SRC_SET,
    VERSION_END,
    VERSION_MIN,
    CannotSkip,
    Message,
    Reader,
    address_end,
    header_end,
    read_payload,
)

_FIXED = {"u8": 1, "bool": 1, "i16": 2, "i32": 4, "i64": 8}
_TYPE = {None: None, "u8": struct.Struct("!B"), "i16": struct.Struct("!h")}
_HM = struct.Struct("!HH")
_H = struct.Struct("!h")
_I = struct.Struct("!i")
_VMIN, _VEND = VERSION_MIN, VERSION_END
TP_MAGIC = 60

# A header's body after its type: a tuple of field sizes (0: a compressed number, its length byte tells), or None
# (walked by the decoder's reader)
Plan = tuple[int, ...] | None


def _plan(fields: tuple[tuple[str, str], ...]) -> Plan:
    out = []
    for _, kind in fields:
        if kind in _FIXED:
            out.append(_FIXED[kind])
        elif kind in ("longc", "intc"):
            out.append(0)
        else:
            return None
    return tuple(out)


# magic -> (type reader, type size, {type code: plan}, plan of a type the table does not list / of an untyped class)
_LAYOUTS: dict[int, tuple[struct.Struct | None, int, dict[int, Plan], Plan]] = {}
for _h in HEADERS:
    if _h.magic in _LAYOUTS or _h.magic == TP_MAGIC:
        continue
    _reader = _TYPE[_h.type_kind]
    _by_code = {code: _plan((*_h.by_type.get(code, ()), *_h.fields)) for code in _h.types}
    _LAYOUTS[_h.magic] = (_reader, _reader.size if _reader else 0, _by_code, _plan(_h.fields))

Span = tuple[int, int, tuple[tuple[int, int], ...]]  # (start, end, ((key, body), ...))


def _address(buf: bytes, p: int) -> int:
    flags = buf[p]
    if flags & ADDR_NULL:
        return p + 1
    if flags & ADDR_UUID:
        return p + 17
    return address_end(buf, p)  # IpAddress (or CannotSkip: another class)


def _headers(buf: bytes, q: int, count: int) -> tuple[int, tuple[tuple[int, int], ...]]:
    out = []
    for _ in range(count):
        hid, magic = _HM.unpack_from(buf, q)
        body = q + 4
        if magic == TP_MAGIC:  # TpHeader: i16 cluster length (-1: none), bytes, flag u8, i32 index if flagged
            n = _H.unpack_from(buf, body)[0]
            end = body + 2 + max(n, 0)
            end += 5 if 0 < buf[end] < 0x80 else 1  # the flag is a signed byte: an index follows if > 0
        else:
            layout = _LAYOUTS.get(magic)
            if layout is None:
                raise CannotSkip(f"cannot skip: unknown header magic {magic} (protocol id {hid}) at offset {q}")
            reader, tsize, by_code, untyped = layout
            plan = untyped if reader is None else by_code.get(reader.unpack_from(buf, body)[0], untyped)
            if plan is None:
                end = header_end(buf, q)
            else:
                end = body + tsize
                for size in plan:
                    end += size or 1 + buf[end]
        out.append(((hid << 16) | magic, body))
        q = end
    return q, tuple(out)


def _message(buf: bytes, p: int) -> Span:
    mtype = _H.unpack_from(buf, p)[0]
    leading = buf[p + 2]
    q = p + 5
    if leading & DEST_SET:
        q = _address(buf, q)
    if leading & SRC_SET:
        q = _address(buf, q)
    count = _H.unpack_from(buf, q)[0]
    if count < 0:
        raise CannotSkip(f"{count} headers at offset {q}")
    q, headers = _headers(buf, q + 2, count)
    if mtype in (BYTES, FRAG, NIO):
        if mtype == NIO:
            q += 1
        n = _I.unpack_from(buf, q)[0]
        q += 4 + max(n, 0)
    elif mtype != EMPTY:  # OBJECT, LONG: the decoder's reader (or CannotSkip)
        r = Reader(buf, q)
        read_payload(r, Message(p, p, mtype, leading, 0, None, None, []))
        q = r.pos
    return (p, q, headers)


def walk(buf: bytes, pos: int = 0) -> tuple[int | None, list[Span]]:
    """(the offset of a LIST's count, None for a SINGLE; the spans of its messages) of the datagram that starts at
    buf[pos] and ends at the end of buf (offsets absolute in buf). Raises CannotSkip when it cannot be walked."""
    end = len(buf)
    if end - pos < 5:
        raise CannotSkip("truncated datagram")
    version = (buf[pos] << 8) | buf[pos + 1]
    if not _VMIN <= version < _VEND:
        raise CannotSkip(f"version 0x{version:04x} is not JGroups 5.3.8 to 5.x")
    count_at = None
    try:
        if not buf[pos + 2] & LIST:
            span = _message(buf, pos + 3)
            p, spans = span[1], [span]
        else:
            p = _address(buf, _address(buf, pos + 3))
            n = _H.unpack_from(buf, p)[0]
            count_at = p + 2 + max(n, 0)
            count = _I.unpack_from(buf, count_at)[0]
            if count < 0 or count > end:
                raise CannotSkip(f"a list of {count} messages")
            p = count_at + 4
            spans = []
            for _ in range(count):
                span = _message(buf, p)
                spans.append(span)
                p = span[1]
    except (struct.error, IndexError):
        raise CannotSkip("truncated datagram") from None
    if p != end:
        raise CannotSkip(f"{end - p} bytes after the last message" if p < end else "truncated datagram")
    return count_at, spans
