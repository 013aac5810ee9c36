"""Message spans of a JGroups 2.12 datagram at struct speed, for the NFQUEUE handler's hot path: where each message
starts and ends (and its presence byte in a LIST), and each header's key and body offset, found by skipping fields
with the one header table (chaos/profiles/jgroups212.py's HEADERS), never decoding them.

A header whose body is a fixed size for its type (UNICAST2, UNICAST, NAKACK's MSG and XMIT_RSP, FD_ALL, UFC, VERIFY's
type, ...) or a fixed size followed by a string (UDP's TpHeader) is skipped by arithmetic; the rest (GMS, PING,
STABLE's digest, FD_SOCK: nested views, digests and addresses) by the decoder's own reader, which is slower but
rare on the wire. Anything that cannot be walked (an unknown magic, another address class, a truncated datagram)
raises `CannotSkip`: the datagram must pass untouched.
"""

from __future__ import annotations

import struct

from chaos.profiles.jgroups212 import (
    ADDR_NULL,
    ADDR_UUID,
    BUF_SET,
    DEST_SET,
    HEADERS,
    LIST,
    SRC_SET,
    VERSION,
    CannotSkip,
    address_end,
    header_end,
)

_SIZES = {"u8": 1, "bool": 1, "i16": 2, "i32": 4, "i64": 8}
_TYPE = {None: None, "u8": struct.Struct("!B"), "i16": struct.Struct("!h"), "i32": struct.Struct("!i")}
_HM = struct.Struct("!HH")
_I16 = struct.Struct("!h")
_U16 = struct.Struct("!H")
_I32 = struct.Struct("!i")
_V_HI, _V_LO = VERSION >> 8, VERSION & 0xFF

# A header's body after its type: (fixed size, ends with a writeUTF string) or None (walked by the decoder)
Plan = tuple[int, bool] | None


def _plan(fields: tuple[tuple[str, str], ...]) -> Plan:
    size = 0
    for i, (_, kind) in enumerate(fields):
        if kind in _SIZES:
            size += _SIZES[kind]
        elif kind == "utf" and i == len(fields) - 1:
            return size, True
        else:
            return None
    return size, False


# magic -> (type reader, type size, {type code: plan}, plan of a type the table does not list / of an untyped class)
_LAYOUTS: dict[int, tuple[struct.Struct | None, int, dict[int, Plan], Plan]] = {}
for _h in HEADERS:
    if _h.magic in _LAYOUTS:
        continue
    reader = _TYPE[_h.type_kind]
    by_code = {code: _plan((*_h.by_type.get(code, ()), *_h.fields)) for code in _h.types}
    _LAYOUTS[_h.magic] = (reader, reader.size if reader else 0, by_code, _plan(_h.fields))

Span = tuple[int | None, int, int, tuple[tuple[int, int], ...]]  # (presence, start, end, ((key, body), ...))


def _address(buf: bytes, p: int) -> int:
    flags = buf[p]
    if flags & ADDR_NULL:
        return p + 1
    if flags & ADDR_UUID:
        q = p + 17
        if buf[q]:  # additional data: u16 length + bytes
            return q + 3 + _U16.unpack_from(buf, q + 1)[0]
        return q + 1
    return address_end(buf, p)  # IpAddress (or CannotSkip: a class written with its magic)


def _headers(buf: bytes, q: int, count: int) -> tuple[int, tuple[tuple[int, int], ...]]:
    out = []
    for _ in range(count):
        hid, magic = _HM.unpack_from(buf, q)
        layout = _LAYOUTS.get(magic)
        if layout is None:
            raise CannotSkip(f"cannot skip: unknown header magic {magic} (protocol id {hid}) at offset {q}")
        reader, tsize, by_code, untyped = layout
        body = q + 4
        plan = untyped if reader is None else by_code.get(reader.unpack_from(buf, body)[0], untyped)
        if plan is None:
            end = header_end(buf, q)
        else:
            end = body + tsize + plan[0]
            if plan[1]:
                end += 2 + _U16.unpack_from(buf, end)[0]
        out.append(((hid << 16) | magic, body))
        q = end
    return q, tuple(out)


def _message(buf: bytes, p: int, presence: int | None) -> Span:
    leading = buf[p]
    q = p + 2
    if leading & DEST_SET:
        q = _address(buf, q)
    if leading & SRC_SET:
        q = _address(buf, q)
    if leading & BUF_SET:
        n = _I32.unpack_from(buf, q)[0]
        if n < 0:
            raise CannotSkip(f"negative payload length {n} at offset {q}")
        q += 4 + n
    count = _I16.unpack_from(buf, q)[0]
    end, headers = _headers(buf, q + 2, count)
    return (presence, p, end, headers)


def walk(buf: bytes, pos: int = 0) -> tuple[bool, list[Span]]:
    """(LIST?, the spans of its messages) of the datagram that starts at buf[pos] and ends at the end of buf
    (offsets absolute in buf). Raises CannotSkip when it cannot be walked."""
    end = len(buf)
    if end - pos < 4 or buf[pos] != _V_HI or buf[pos + 1] != _V_LO:
        raise CannotSkip("not a JGroups 2.12 datagram")
    try:
        if not buf[pos + 2] & LIST:
            span = _message(buf, pos + 3, None)
            p, spans = span[2], [span]
        else:
            p = _address(buf, _address(buf, pos + 3))
            spans = []
            while buf[p]:
                span = _message(buf, p + 1, p)
                spans.append(span)
                p = span[2]
            p += 1
    except (struct.error, IndexError):
        raise CannotSkip("truncated datagram") from None
    if p != end:
        raise CannotSkip(f"{end - p} bytes after the last message" if p < end else "truncated datagram")
    return bool(buf[pos + 2] & LIST), spans
