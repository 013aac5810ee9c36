"""Message spans of a chaosbed datagram: where each message starts and ends, found by skipping fields with
node/wire.py's table (never decoding them), so the judge can match and strip messages at struct speed."""

from __future__ import annotations

import struct
from collections.abc import Callable

from node import wire

_U16 = struct.Struct("!H")
_U32 = struct.Struct("!I")
_MAGIC, _VERSION = wire.MAGIC, wire.WIRE_VERSION


def _skip_str(buf: bytes, pos: int) -> int:
    if pos >= len(buf):
        raise wire.WireError("truncated string length")
    end = pos + 1 + buf[pos]
    if end > len(buf):
        raise wire.WireError("truncated string")
    return end


def _skip_ranges(buf: bytes, pos: int) -> int:
    if pos + 2 > len(buf):
        raise wire.WireError("truncated range count")
    end = pos + 2 + 16 * _U16.unpack_from(buf, pos)[0]
    if end > len(buf):
        raise wire.WireError("truncated ranges")
    return end


def _decoder_skip(kind: str) -> Callable[[bytes, int], int]:
    decode = wire._DECODERS[kind]  # rare kinds (views, digests): wire.py's own codec is the reference

    def skip(buf: bytes, pos: int) -> int:
        return decode(buf, pos)[1]

    return skip


_SKIPPERS: dict[str, Callable[[bytes, int], int]] = {
    kind: {"str": _skip_str, "ranges": _skip_ranges}.get(kind) or _decoder_skip(kind) for kind in wire.VARIABLE_KINDS
}
# (proto << 8 | type) -> (size of proto+type+fixed fields, skip functions of the variable-size fields)
_PLANS: dict[int, tuple[int, tuple[Callable[[bytes, int], int], ...]]] = {
    (s.proto_id << 8) | s.type_id: (s.fixed.size, tuple(_SKIPPERS[f.kind] for f in s.variable))
    for s in wire.SPECS.values()
}

Span = tuple[int, int, int, int]  # (start, end, proto id, type id) of one message


def message_spans(buf: bytes, pos: int) -> tuple[int, list[Span]]:
    """Message spans of the datagram that starts at buf[pos] and ends at the end of buf (positions absolute)."""
    end = len(buf)
    if pos + 6 > end or buf[pos] != _MAGIC or buf[pos + 1] != _VERSION:
        raise wire.WireError("not a chaosbed datagram")
    p = pos + 3
    for _ in range(3):  # cluster, src, dest
        if p >= end:
            raise wire.WireError("truncated datagram header")
        p += 1 + buf[p]
    if p + 2 > end:
        raise wire.WireError("truncated message count")
    count = (buf[p] << 8) | buf[p + 1]
    p += 2
    if count == 0:
        raise wire.WireError("datagram with no messages")
    head = p
    spans: list[Span] = []
    plans = _PLANS
    for _ in range(count):
        if p + 2 > end:
            raise wire.WireError("truncated message header")
        proto, typ = buf[p], buf[p + 1]
        plan = plans.get((proto << 8) | typ)
        if plan is None:
            raise wire.WireError(f"unknown protocol/header type {proto}/{typ}")
        q = p + plan[0]
        for skip in plan[1]:
            q = skip(buf, q)
        if q + 4 > end:
            raise wire.WireError("truncated message")
        q += 4 + _U32.unpack_from(buf, q)[0]
        if q > end:
            raise wire.WireError("truncated payload")
        spans.append((p, q, proto, typ))
        p = q
    if p != end:
        raise wire.WireError(f"{end - p} trailing bytes after {count} messages")
    return head, spans


def datagram_spans(udp_payload: bytes) -> tuple[int, list[Span]]:
    """(head_len, [(start, end, proto id, type id), ...]) of one datagram: head_len is where the first message
    starts (after the u16 count); each message is udp_payload[start:end]. Raises wire.WireError if malformed."""
    return message_spans(bytes(udp_payload), 0)
