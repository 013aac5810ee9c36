"""The wire format: one table of header types and their fields, and the struct codecs built from it.

Everything that reads or writes our bytes derives from `HEADER_TABLE`: the codecs here, the scapy layers in
chaos/layers.py, the kernel and NFQUEUE rule compilers. Add a header type by adding a row.

Datagram (all integers big-endian)::

    magic    u8   0xCB
    version  u8   WIRE_VERSION
    flags    u8   bit 0: multicast (dest is empty)
    cluster  str  u8 length + UTF-8
    src      str  u8 length + UTF-8 (a member address, see `make_address`)
    dest     str  u8 length + UTF-8 (empty for multicast)
    count    u16  number of messages that follow (a message batch)
    messages count x message

Message::

    proto    u8   protocol id (PROTOCOL_IDS)
    type     u8   header type within the protocol
    fields   the header's fields, in table order: fixed-size ones first, then variable-size ones
    length   u32  payload length
    payload  bytes

A decoded message is an instance of its header type's class: a named tuple of the header's fields plus a last
field `payload`. Malformed input raises `WireError` and nothing else.

Member addresses are strings: the member's name for its first incarnation ("B") and name/incarnation after a restart
("B/2"). A restarted member is a new address, as a new UUID is in JGroups: no protocol state of the old incarnation
(conn-ids, timestamps, seqnos) applies to it. The network routes by name; a stack drops datagrams addressed to an
older incarnation of itself. The helpers for them are here, in the lowest layer, so that protocols, the stack, the
orchestrator and the checker share them.
"""

from __future__ import annotations

import struct
from collections import namedtuple
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

MAGIC = 0xCB
WIRE_VERSION = 1
FLAG_MULTICAST = 0x01

PROTOCOL_IDS: dict[str, int] = {
    "UNICAST3": 1,
    "UNICAST2": 2,
    "NAKACK2": 3,
    "MCAST": 4,
    "STABLE": 5,
    "GMS": 6,
    "FD": 7,
    "MERGE": 8,
}

# Field kinds: fixed-size struct codes, and variable-size kinds with their own codecs.
FIXED_KINDS: dict[str, str] = {"u8": "B", "u16": "H", "u32": "I", "u64": "Q", "bool": "?"}
VARIABLE_KINDS = ("str", "ranges", "viewid", "view", "digest")
MAX_RANGES = 0xFFFF

# (protocol, header name, type id, [(field, kind), ...]). Fixed-size fields must precede variable-size ones.
HEADER_TABLE: list[tuple[str, str, int, list[tuple[str, str]]]] = [
    # UNICAST3 (design/UNICAST3.txt, UNICAST3-sync.txt). conn_id on every DATA and ACK; timestamps are receiver-made.
    ("UNICAST3", "DATA", 0, [("seqno", "u64"), ("conn_id", "u32"), ("first", "bool")]),
    ("UNICAST3", "ACK", 1, [("seqno", "u64"), ("conn_id", "u32"), ("timestamp", "u32")]),
    ("UNICAST3", "SEND_FIRST_SEQNO", 2, [("timestamp", "u32")]),
    ("UNICAST3", "XMIT_REQ", 3, [("conn_id", "u32"), ("ranges", "ranges")]),
    ("UNICAST3", "CLOSE", 4, [("conn_id", "u32")]),
    # UNICAST2 (design/UNICAST2.txt): negative acks plus STABLE. conn_id is 0 ("unset") on non-first DATA.
    ("UNICAST2", "DATA", 0, [("seqno", "u64"), ("conn_id", "u32"), ("first", "bool")]),
    ("UNICAST2", "XMIT_REQ", 1, [("conn_id", "u32"), ("ranges", "ranges")]),
    ("UNICAST2", "SEND_FIRST_SEQNO", 2, [("seqno", "u64")]),
    ("UNICAST2", "STABLE", 3, [("low", "u64"), ("high", "u64"), ("conn_id", "u32")]),
    # the receiver's ack of a connection's first message (JGRP-1563): the sender stops resending it
    ("UNICAST2", "ACK", 4, [("seqno", "u64"), ("conn_id", "u32")]),
    # NAKACK2 (JGroups NAKACK2, design/NAKACK2-no-retransmission.txt): per-sender multicast seqnos, NAK-based.
    # XMIT_RSP carries the original sender and seqno, the payload is the original payload.
    ("NAKACK2", "MSG", 0, [("seqno", "u64")]),
    ("NAKACK2", "XMIT_REQ", 1, [("sender", "str"), ("ranges", "ranges")]),
    ("NAKACK2", "XMIT_RSP", 2, [("seqno", "u64"), ("sender", "str")]),
    ("NAKACK2", "HIGHEST_SEQNO", 3, [("seqno", "u64")]),
    # MCAST (design/MCAST.txt): fixed window, receivers ACK delivered seqnos to the sender.
    ("MCAST", "MSG", 0, [("seqno", "u64")]),
    ("MCAST", "ACK", 1, [("seqno", "u64")]),
    ("MCAST", "XMIT_REQ", 2, [("sender", "str"), ("ranges", "ranges")]),
    ("MCAST", "XMIT_RSP", 3, [("seqno", "u64"), ("sender", "str")]),
    # STABLE: a member's highest delivered seqno per sender, gossiped within a view.
    ("STABLE", "STABLE", 0, [("view_id", "viewid"), ("digest", "digest")]),
    # GMS: discovery, join, leave, view installation (views are acked), merge handshake.
    ("GMS", "FIND", 0, []),
    ("GMS", "FIND_RSP", 1, [("view_id", "viewid")]),
    ("GMS", "JOIN_REQ", 2, []),
    ("GMS", "JOIN_RSP", 3, [("view", "view"), ("digest", "digest")]),
    # VIEW.subgroups: in a merge view, one (first, last) range of member indices per merged_from entry (who came
    # from which subgroup; members are listed grouped by subgroup); empty otherwise.
    ("GMS", "VIEW", 4, [("view", "view"), ("digest", "digest"), ("subgroups", "ranges")]),
    ("GMS", "VIEW_ACK", 5, [("view_id", "viewid")]),
    ("GMS", "LEAVE_REQ", 6, []),
    ("GMS", "LEAVE_RSP", 7, []),
    ("GMS", "MERGE_REQ", 8, [("merge_id", "u64")]),
    ("GMS", "MERGE_RSP", 9, [("merge_id", "u64"), ("view", "view"), ("digest", "digest")]),
    ("GMS", "CANCEL_MERGE", 10, [("merge_id", "u64")]),  # the leader gave the merge up: participants are free
    # FD: heartbeats, and suspicions reported to the coordinator.
    ("FD", "HEARTBEAT", 0, []),
    ("FD", "SUSPECT", 1, [("member", "str")]),
    # MERGE (like JGroups' MERGE3): periodic announcements of a member's view id, so coordinators of subgroups
    # that can hear each other again find out.
    ("MERGE", "INFO", 0, [("view_id", "viewid")]),
]


# A decoded message: an instance of a header class made from HEADER_TABLE (`header_class`), i.e. a named tuple of
# the header's fields and its payload, with the class attributes PROTOCOL, NAME, PROTO_ID and TYPE_ID.
Message = tuple


# --- addresses -----------------------------------------------------------------------------------------------------


def make_address(name: str, incarnation: int = 1) -> str:
    if not name or "/" in name:
        raise ValueError(f"a member name is non-empty and has no '/': {name!r}")
    return name if incarnation <= 1 else f"{name}/{incarnation}"


def name_of(address: str) -> str:
    return address.split("/", 1)[0]


def incarnation_of(address: str) -> int:
    _, _, inc = address.partition("/")
    return int(inc) if inc else 1


class WireError(ValueError):
    """A datagram or message that cannot be decoded. The only exception decoding raises."""


class Field(NamedTuple):
    name: str
    kind: str


class HeaderSpec(NamedTuple):
    """One row of the table, with the codec and message class derived from it."""

    protocol: str
    name: str
    proto_id: int
    type_id: int
    fields: tuple[Field, ...]
    fixed: struct.Struct  # proto, type and the fixed-size fields
    variable: tuple[Field, ...]
    cls: type

    @property
    def key(self) -> str:
        return f"{self.protocol}.{self.name}"


def _make_class(protocol: str, name: str, proto_id: int, type_id: int, fields: Sequence[str]) -> type:
    base = namedtuple(f"{protocol}_{name}", [*fields, "payload"], defaults=(b"",))
    cls = type(
        base.__name__,
        (base,),
        {"__slots__": (), "PROTOCOL": protocol, "NAME": name, "PROTO_ID": proto_id, "TYPE_ID": type_id},
    )
    cls.__doc__ = f"{protocol}.{name}({', '.join(fields)}) message with its payload."
    return cls


def _build_specs() -> tuple[dict[tuple[int, int], HeaderSpec], dict[str, HeaderSpec]]:
    by_ids: dict[tuple[int, int], HeaderSpec] = {}
    by_key: dict[str, HeaderSpec] = {}
    for protocol, name, type_id, field_rows in HEADER_TABLE:
        proto_id = PROTOCOL_IDS[protocol]
        fields = tuple(Field(n, k) for n, k in field_rows)
        fixed_fields = [f for f in fields if f.kind in FIXED_KINDS]
        variable = tuple(f for f in fields if f.kind in VARIABLE_KINDS)
        unknown = [f for f in fields if f.kind not in FIXED_KINDS and f.kind not in VARIABLE_KINDS]
        if unknown:
            raise TypeError(f"{protocol}.{name}: unknown field kinds {unknown}")
        if fields[: len(fixed_fields)] != tuple(fixed_fields):
            raise TypeError(f"{protocol}.{name}: fixed-size fields must come before variable-size ones")
        fixed = struct.Struct("!BB" + "".join(FIXED_KINDS[f.kind] for f in fixed_fields))
        cls = _make_class(protocol, name, proto_id, type_id, [f.name for f in fields])
        spec = HeaderSpec(protocol, name, proto_id, type_id, fields, fixed, variable, cls)
        if (proto_id, type_id) in by_ids:
            raise TypeError(f"duplicate header ids for {spec.key}")
        by_ids[(proto_id, type_id)] = spec
        by_key[spec.key] = spec
    return by_ids, by_key


SPECS_BY_IDS, SPECS = _build_specs()
_SPEC_BY_CLASS: dict[type, HeaderSpec] = {s.cls: s for s in SPECS.values()}


def header_class(protocol: str, name: str) -> Any:  # Any: its fields are the table's, made at import
    """The message class of `protocol.name`, e.g. header_class("UNICAST3", "ACK")."""
    try:
        return SPECS[f"{protocol}.{name}"].cls
    except KeyError:
        raise KeyError(f"unknown header {protocol}.{name}; known: {', '.join(sorted(SPECS))}") from None


def spec_of(msg: Message) -> HeaderSpec:
    return _SPEC_BY_CLASS[type(msg)]


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


def _decode_str(data: bytes | memoryview, pos: int) -> tuple[str, int]:
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


def _decode_ranges(data: bytes | memoryview, pos: int) -> tuple[tuple[tuple[int, int], ...], int]:
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


class ViewId(NamedTuple):
    """A view's identity: its creator (the coordinator that installed it) and a counter. Ordered by (id, creator)."""

    creator: str
    id: int

    def key(self) -> tuple[int, str]:
        return (self.id, self.creator)

    def __str__(self) -> str:
        return f"{self.creator}|{self.id}"


class View(NamedTuple):
    """A membership view: members oldest first (members[0] coordinates); merged_from lists the view ids of the
    subgroups a merge view joined (empty for other views)."""

    view_id: ViewId
    members: tuple[str, ...]
    merged_from: tuple[ViewId, ...] = ()

    @property
    def coordinator(self) -> str:
        return self.members[0]

    @property
    def is_merge(self) -> bool:
        return bool(self.merged_from)


# A digest: member -> (highest delivered, highest received) seqnos of that member's multicasts.
Digest = dict[str, tuple[int, int]]


def _encode_viewid(value: ViewId, out: list[bytes]) -> None:
    _encode_str(value[0], out)
    out.append(_pack_u64(value[1]))


def _pack_u64(value: int) -> bytes:
    try:
        return _U64.pack(value)
    except struct.error as e:
        raise WireError(f"u64 out of range: {value}: {e}") from None


def _decode_viewid(data: bytes | memoryview, pos: int) -> tuple[ViewId, int]:
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


def _decode_count(data: bytes | memoryview, pos: int, what: str) -> tuple[int, int]:
    if pos + 2 > len(data):
        raise WireError(f"truncated {what} count")
    return _U16.unpack_from(data, pos)[0], pos + 2


def _decode_view(data: bytes | memoryview, pos: int) -> tuple[View, int]:
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


def _decode_digest(data: bytes | memoryview, pos: int) -> tuple[Digest, int]:
    n, pos = _decode_count(data, pos, "digest")
    digest: Digest = {}
    for _ in range(n):
        member, pos = _decode_str(data, pos)
        if pos + 16 > len(data):
            raise WireError("truncated digest entry")
        digest[member] = _DIGEST_ENTRY.unpack_from(data, pos)
        pos += 16
    return digest, pos


_ENCODERS: dict[str, Callable[[Any, list[bytes]], None]] = {
    "str": _encode_str,
    "ranges": _encode_ranges,
    "viewid": _encode_viewid,
    "view": _encode_view,
    "digest": _encode_digest,
}
_DECODERS: dict[str, Callable[[bytes | memoryview, int], tuple[Any, int]]] = {
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
    encoders: tuple[Callable[[Any, list[bytes]], None], ...]
    with_len: Callable[..., bytes] | None


class _DecodePlan(NamedTuple):
    spec: HeaderSpec
    unpack_from: Callable[[bytes | memoryview, int], tuple[Any, ...]]
    fixed_size: int
    decoders: tuple[Callable[[bytes | memoryview, int], tuple[Any, int]], ...]
    cls: type
    with_len: Callable[[bytes | memoryview, int], tuple[Any, ...]] | None
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


def decode_message(data: bytes | memoryview, pos: int) -> tuple[Message, int]:
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
    fields = list(plan.unpack_from(data, pos)[2:])
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
    return plan.cls._make(fields), pos + n  # type: ignore[attr-defined]


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
    spec = _SPEC_BY_CLASS.get(type(msg))
    if spec is not None and not spec.variable:
        return spec.fixed.size + 4 + len(msg[-1])
    out: list[bytes] = []
    encode_message(msg, out)
    return sum(map(len, out))


def datagram_overhead(cluster: str, src: str, dest: str | None) -> int:
    return 3 + 3 + len(cluster.encode()) + len(src.encode()) + len((dest or "").encode()) + 2


def datagram_source(data: bytes | memoryview) -> tuple[str, str] | None:
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


def _head_end(data: bytes | memoryview) -> int:
    """Where the three strings of a datagram head end (after magic, version, flags), or -1 if they do not fit."""
    try:
        end = _DGRAM_HEAD.size + 1 + data[_DGRAM_HEAD.size]
        end += 1 + data[end]
        end += 1 + data[end]
    except IndexError:
        return -1
    return end if end <= len(data) else -1


def _decode_head(data: bytes | memoryview) -> tuple[str, str, str, int]:
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


def decode_datagram(data: bytes | memoryview) -> Datagram:
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
