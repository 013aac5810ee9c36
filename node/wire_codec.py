"""The struct codecs of the wire format (node/wire.py): fields, messages and datagrams, built from the header table
(node/wire_headers.py).

Per header type, the pieces of its codec are looked up once (an encode and a decode plan) instead of being recomputed
from its spec for every message: the simulator and the member encode and decode every message through them. Malformed
input raises `WireError` and nothing else.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from node.wire_headers import SPECS, Digest, HeaderSpec, Message, Ranges, View, ViewId

MAGIC = 0xCB
WIRE_VERSION = 1
FLAG_MULTICAST = 0x01
MAX_RANGES = 0xFFFF

Buffer = bytes | memoryview


class WireError(ValueError):
    """A datagram or message that cannot be decoded. The only exception decoding raises."""


# --- variable-size field codecs ------------------------------------------------------------------------------------

_U8 = struct.Struct("!B")
_U16 = struct.Struct("!H")
_U32 = struct.Struct("!I")
_RANGE = struct.Struct("!QQ")


def _encode_str(value: str, out: list[bytes]) -> None:
    raw = value.encode()
    if len(raw) > 255:
        raise WireError(f"string field longer than 255 bytes: {value[:40]!r}...")
    out.append(_U8.pack(len(raw)))
    out.append(raw)


def _decode_str(data: Buffer, pos: int) -> tuple[str, int]:
    if pos >= len(data):
        raise WireError("truncated string length")
    n = data[pos]
    end = pos + 1 + n
    if end > len(data):
        raise WireError("truncated string")
    try:
        return bytes(data[pos + 1 : end]).decode(), end
    except UnicodeDecodeError as e:
        raise WireError(f"string is not UTF-8: {e}") from None


def _encode_ranges(value: Iterable[tuple[int, int]], out: list[bytes]) -> None:
    ranges = list(value)
    if len(ranges) > MAX_RANGES:
        raise WireError(f"too many ranges: {len(ranges)} > {MAX_RANGES}")
    out.append(_U16.pack(len(ranges)))
    for first, last in ranges:
        if first > last:
            raise WireError(f"bad range {first}-{last}")
        out.append(_RANGE.pack(first, last))


def _decode_ranges(data: Buffer, pos: int) -> tuple[Ranges, int]:
    if pos + 2 > len(data):
        raise WireError("truncated range count")
    (n,) = _U16.unpack_from(data, pos)
    pos += 2
    end = pos + n * _RANGE.size
    if end > len(data):
        raise WireError("truncated ranges")
    ranges = tuple(_RANGE.unpack_from(data, pos + i * _RANGE.size) for i in range(n))
    for first, last in ranges:
        if first > last:
            raise WireError(f"bad range {first}-{last}")
    return ranges, end


_U64 = struct.Struct("!Q")
_DIGEST_ENTRY = struct.Struct("!QQ")


def _encode_viewid(value: ViewId, out: list[bytes]) -> None:
    _encode_str(value[0], out)
    out.append(_pack_u64(value[1]))


def _pack_u64(value: int) -> bytes:
    try:
        return _U64.pack(value)
    except struct.error as e:
        raise WireError(f"u64 out of range: {value}: {e}") from None


def _decode_viewid(data: Buffer, pos: int) -> tuple[ViewId, int]:
    creator, pos = _decode_str(data, pos)
    if pos + 8 > len(data):
        raise WireError("truncated view id")
    return ViewId(creator, _U64.unpack_from(data, pos)[0]), pos + 8


def _encode_view(value: View, out: list[bytes]) -> None:
    view_id, members, merged = value
    if len(members) > 0xFFFF or len(merged) > 0xFFFF:
        raise WireError("too many members in a view")
    _encode_viewid(view_id, out)
    out.append(_U16.pack(len(members)))
    for m in members:
        _encode_str(m, out)
    out.append(_U16.pack(len(merged)))
    for v in merged:
        _encode_viewid(v, out)


def _decode_count(data: Buffer, pos: int, what: str) -> tuple[int, int]:
    if pos + 2 > len(data):
        raise WireError(f"truncated {what} count")
    return _U16.unpack_from(data, pos)[0], pos + 2


def _decode_view(data: Buffer, pos: int) -> tuple[View, int]:
    view_id, pos = _decode_viewid(data, pos)
    n, pos = _decode_count(data, pos, "member")
    members = []
    for _ in range(n):
        m, pos = _decode_str(data, pos)
        members.append(m)
    k, pos = _decode_count(data, pos, "merged view")
    merged = []
    for _ in range(k):
        v, pos = _decode_viewid(data, pos)
        merged.append(v)
    if not members:
        raise WireError("a view with no members")
    return View(view_id, tuple(members), tuple(merged)), pos


def _encode_digest(value: Digest, out: list[bytes]) -> None:
    if len(value) > 0xFFFF:
        raise WireError("digest too large")
    out.append(_U16.pack(len(value)))
    for member, (hd, hr) in value.items():
        _encode_str(member, out)
        try:
            out.append(_DIGEST_ENTRY.pack(hd, hr))
        except struct.error as e:
            raise WireError(f"digest entry out of range: {member}={hd},{hr}: {e}") from None


def _decode_digest(data: Buffer, pos: int) -> tuple[Digest, int]:
    n, pos = _decode_count(data, pos, "digest")
    digest: Digest = {}
    for _ in range(n):
        member, pos = _decode_str(data, pos)
        if pos + 16 > len(data):
            raise WireError("truncated digest entry")
        digest[member] = _DIGEST_ENTRY.unpack_from(data, pos)
        pos += 16
    return digest, pos


# A field's encoder and decoder (the codec of its kind). The plans call them for every variable-size field, whatever
# its kind: the value an encoder is given is the field's value in a message of the table's class.
_Encoder = Callable[[Any, list[bytes]], None]
_Decoder = Callable[[Buffer, int], tuple[object, int]]
_Unpack = Callable[[Buffer, int], tuple[Any, ...]]  # a struct's unpack_from

_ENCODERS: dict[str, _Encoder] = {
    "str": _encode_str,
    "ranges": _encode_ranges,
    "viewid": _encode_viewid,
    "view": _encode_view,
    "digest": _encode_digest,
}
_DECODERS: dict[str, _Decoder] = {
    "str": _decode_str,
    "ranges": _decode_ranges,
    "viewid": _decode_viewid,
    "view": _decode_view,
    "digest": _decode_digest,
}


# --- messages ------------------------------------------------------------------------------------------------------


# Per message class and per (proto_id, type_id): the codec pieces of its spec, looked up once per message instead of
# being recomputed from the spec (the simulator and the member encode and decode every message through these). A
# header without variable-size fields also gets one struct for its head and payload length together (`with_len`).
class _EncodePlan(NamedTuple):
    key: str
    pack: Callable[..., bytes]
    proto_id: int
    type_id: int
    n_fixed: int
    encoders: tuple[_Encoder, ...]
    with_len: Callable[..., bytes] | None


class _DecodePlan(NamedTuple):
    spec: HeaderSpec
    unpack_from: _Unpack
    fixed_size: int
    decoders: tuple[_Decoder, ...]
    cls: type[Message]
    with_len: _Unpack | None
    with_len_size: int


def _with_len(spec: HeaderSpec) -> struct.Struct | None:
    return None if spec.variable else struct.Struct(spec.fixed.format + "I")


_ENCODE_PLANS: dict[type, _EncodePlan] = {}
_DECODE_PLANS: dict[int, _DecodePlan] = {}
for _s in SPECS.values():
    _wl = _with_len(_s)
    _ENCODE_PLANS[_s.cls] = _EncodePlan(
        _s.key,
        _s.fixed.pack,
        _s.proto_id,
        _s.type_id,
        len(_s.fields) - len(_s.variable),
        tuple(_ENCODERS[f.kind] for f in _s.variable),
        _wl.pack if _wl is not None else None,
    )
    _DECODE_PLANS[(_s.proto_id << 8) | _s.type_id] = _DecodePlan(
        _s,
        _s.fixed.unpack_from,
        _s.fixed.size,
        tuple(_DECODERS[f.kind] for f in _s.variable),
        _s.cls,
        _wl.unpack_from if _wl is not None else None,
        _wl.size if _wl is not None else 0,
    )
del _s, _wl
# message class -> the size of its head and payload length, for the classes without variable-size fields
_FIXED_SIZE: dict[type, int] = {s.cls: s.fixed.size + 4 for s in SPECS.values() if not s.variable}
_pack_u32 = _U32.pack
_unpack_u32 = _U32.unpack_from
_tuple_new = tuple.__new__


def encode_message(msg: Message, out: list[bytes]) -> None:
    """Appends the encoding of one message to `out`."""
    plan = _ENCODE_PLANS.get(type(msg))
    if plan is None:
        raise WireError(f"not a wire message: {type(msg).__name__}")
    payload = msg[-1]
    try:
        if plan.with_len is not None:  # no variable-size fields: head and payload length in one pack
            out.append(plan.with_len(plan.proto_id, plan.type_id, *msg[:-1], len(payload)))
            out.append(payload)
            return
        n_fixed = plan.n_fixed
        out.append(plan.pack(plan.proto_id, plan.type_id, *msg[:n_fixed]))
    except struct.error as e:
        raise WireError(f"{plan.key}: {e}") from None
    for i, encode in enumerate(plan.encoders):
        encode(msg[n_fixed + i], out)
    out.append(_pack_u32(len(payload)))
    out.append(payload)


def decode_message(data: Buffer, pos: int) -> tuple[Message, int]:
    """Decodes one message at `pos`; returns it and the position after it."""
    size = len(data)
    if pos + 2 > size:
        raise WireError("truncated message header")
    plan = _DECODE_PLANS.get((data[pos] << 8) | data[pos + 1])
    if plan is None:
        raise WireError(f"unknown protocol/header type {data[pos]}/{data[pos + 1]}")
    if plan.with_len is not None and pos + plan.with_len_size <= size:
        # no variable-size fields: head and payload length in one unpack (what does not fit is reported below)
        values = plan.with_len(data, pos)
        start = pos + plan.with_len_size
        end = start + values[-1]
        if end <= size:
            return _tuple_new(plan.cls, (*values[2:-1], bytes(data[start:end]))), end
    spec = plan.spec
    if pos + plan.fixed_size > size:
        raise WireError(f"truncated {spec.key} header")
    fields: list[object] = list(plan.unpack_from(data, pos)[2:])
    pos += plan.fixed_size
    for decode in plan.decoders:
        value, pos = decode(data, pos)
        fields.append(value)
    if pos + 4 > size:
        raise WireError(f"truncated {spec.key} payload length")
    (n,) = _unpack_u32(data, pos)
    pos += 4
    if pos + n > size:
        raise WireError(f"truncated {spec.key} payload ({n} bytes announced)")
    fields.append(bytes(data[pos : pos + n]))
    return _tuple_new(plan.cls, fields), pos + n


# --- datagrams -----------------------------------------------------------------------------------------------------

_DGRAM_HEAD = struct.Struct("!BBB")


class Datagram(NamedTuple):
    cluster: str
    src: str
    dest: str  # "" for multicast
    messages: list[Message]

    @property
    def multicast(self) -> bool:
        return not self.dest


_HEADS: dict[tuple[str, str, str], bytes] = {}  # (cluster, src, dest) -> the encoded datagram head before the count
_MAX_HEADS = 4096


def _datagram_head(cluster: str, src: str, dest: str) -> bytes:
    head = _HEADS.get((cluster, src, dest))
    if head is None:
        out: list[bytes] = [_DGRAM_HEAD.pack(MAGIC, WIRE_VERSION, 0 if dest else FLAG_MULTICAST)]
        _encode_str(cluster, out)
        _encode_str(src, out)
        _encode_str(dest, out)
        head = b"".join(out)
        if len(_HEADS) >= _MAX_HEADS:
            _HEADS.clear()
        _HEADS[(cluster, src, dest)] = head
    return head


def encode_datagram(cluster: str, src: str, dest: str | None, messages: Iterable[Message]) -> bytes:
    """One datagram carrying a batch of messages; dest None or "" means multicast."""
    msgs = messages if type(messages) is list else list(messages)
    if not msgs or len(msgs) > 0xFFFF:
        raise WireError(f"a datagram carries 1..65535 messages, not {len(msgs)}")
    out: list[bytes] = [_datagram_head(cluster, src, dest or ""), _U16.pack(len(msgs))]
    for m in msgs:
        encode_message(m, out)
    return b"".join(out)


def message_size(msg: Message) -> int:
    """Encoded size of one message (for bundling datagrams under a size limit)."""
    head = _FIXED_SIZE.get(type(msg))
    if head is not None:
        return head + len(msg[-1])
    out: list[bytes] = []
    encode_message(msg, out)
    return sum(map(len, out))


def datagram_overhead(cluster: str, src: str, dest: str | None) -> int:
    return 3 + 3 + len(cluster.encode()) + len(src.encode()) + len((dest or "").encode()) + 2


def datagram_source(data: Buffer) -> tuple[str, str] | None:
    """(cluster, src) of a datagram from its head alone; None if the head is malformed. For members that learn
    their peers' addresses from what they receive (node/container.py under docker compose)."""
    try:
        if len(data) < _DGRAM_HEAD.size or _DGRAM_HEAD.unpack_from(data, 0)[:2] != (MAGIC, WIRE_VERSION):
            return None
        cluster, pos = _decode_str(data, _DGRAM_HEAD.size)
        src, _ = _decode_str(data, pos)
    except (WireError, struct.error, UnicodeDecodeError):
        return None
    return cluster, src


_DECODED_HEADS: dict[bytes, tuple[str, str, str]] = {}  # a valid datagram head's bytes -> (cluster, src, dest)


def _head_end(data: Buffer) -> int:
    """Where the three strings of a datagram head end (after magic, version, flags), or -1 if they do not fit."""
    try:
        end = _DGRAM_HEAD.size + 1 + data[_DGRAM_HEAD.size]
        end += 1 + data[end]
        end += 1 + data[end]
    except IndexError:
        return -1
    return end if end <= len(data) else -1


def _decode_head(data: Buffer) -> tuple[str, str, str, int]:
    if len(data) < _DGRAM_HEAD.size:
        raise WireError(f"datagram too short ({len(data)} bytes)")
    magic, version, flags = _DGRAM_HEAD.unpack_from(data, 0)
    if magic != MAGIC:
        raise WireError(f"bad magic 0x{magic:02x}")
    if version != WIRE_VERSION:
        raise WireError(f"unsupported wire version {version} (this member speaks {WIRE_VERSION})")
    pos = _DGRAM_HEAD.size
    cluster, pos = _decode_str(data, pos)
    src, pos = _decode_str(data, pos)
    dest, pos = _decode_str(data, pos)
    if bool(flags & FLAG_MULTICAST) == bool(dest):
        raise WireError("multicast flag and destination disagree")
    if not src:
        raise WireError("empty source address")
    return cluster, src, dest, pos


def decode_datagram(data: Buffer) -> Datagram:
    """Decodes a whole datagram. Raises WireError on anything malformed, including trailing bytes."""
    # The heads a member sees repeat (one per peer and direction): a head seen valid before is not decoded again.
    end = _head_end(data)
    key = bytes(data[:end]) if end > 0 else b""
    head = _DECODED_HEADS.get(key)
    if head is not None:
        cluster, src, dest = head
        pos = end
    else:
        cluster, src, dest, pos = _decode_head(data)
        if len(_DECODED_HEADS) >= _MAX_HEADS:
            _DECODED_HEADS.clear()
        _DECODED_HEADS[bytes(data[:pos])] = (cluster, src, dest)
    if pos + 2 > len(data):
        raise WireError("truncated message count")
    (count,) = _U16.unpack_from(data, pos)
    pos += 2
    if count == 0:
        raise WireError("datagram with no messages")
    messages = []
    for _ in range(count):
        msg, pos = decode_message(data, pos)
        messages.append(msg)
    if pos != len(data):
        raise WireError(f"{len(data) - pos} trailing bytes after {count} messages")
    return Datagram(cluster, src, dest, messages)
