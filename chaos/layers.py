"""Scapy layers for our wire format, generated at import time from node/wire.py's `HEADER_TABLE`.

Why they exist: DISCARD rules are written in the terms of these layers (`UNICAST3.ACK(seqno=50)`), and a human
reading a capture (`rdpcap`, `sniff`, `pkt.show()`) should see our protocol decoded, not hex. They are for meaning,
never for the hot path: dissecting one datagram with scapy costs a fraction of a millisecond against about a
microsecond for a struct parse, so rules are compiled to kernel rules or to an NFQUEUE handler that parses with
struct (the design notes, docs/architecture.md: "one wire format, many readers", "scapy for meaning,
not for the hot path").

One source of truth: node/wire.py owns the bytes. Every row of its table becomes one `Packet` class here, named
`PROTOCOL_HEADER` (e.g. `UNICAST3_ACK`, also `LAYERS["UNICAST3.ACK"]`), with the fields `proto`, `type`, the
header's fields in table order, `payload_len` and `load` (the message payload; scapy reserves `payload` for the
next layer; a header field named like a scapy Packet attribute, e.g. `time`, gets a trailing underscore, see
`FIELD_NAMES`). Adding a row to the table adds a layer without an edit here. The byte codecs below are written
independently of node/wire.py's, so the tests comparing the two actually check the format.

`Chaosbed` is the datagram (magic, version, flags, cluster, src, dest, count, messages); its message list
dispatches on the (proto, type) bytes of each message. It is bound to UDP ports `DATA_PORTS` in both directions
(`bind_ports` binds more). Dissection never raises on malformed input (unless scapy's `conf.debug_dissector` is
set): a message that does not decode, and everything after it, becomes one `Raw` entry of the list; an unknown
(proto, type) becomes an `UnknownMessage`; a malformed datagram header keeps the fields that decoded and hands the
rest to a `Raw` payload. Building is permissive where the format allows it (ranges with first > last, views with
no members: useful for chaos tests), and raises ValueError only for values that cannot be encoded at all.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any, ClassVar, cast

from scapy.base_classes import Packet_metaclass
from scapy.config import conf
from scapy.fields import (
    ByteEnumField,
    ByteField,
    Field,
    FieldLenField,
    FlagsField,
    IntField,
    LongField,
    PacketListField,
    ShortField,
    StrField,
    StrLenField,
    XByteField,
)
from scapy.layers.inet import UDP
from scapy.packet import Packet, bind_bottom_up, bind_top_down

from node import wire

__all__ = [
    "DATA_PORTS",
    "LAYERS",
    "LAYERS_BY_IDS",
    "Chaosbed",
    "DigestField",
    "RangesField",
    "UnknownMessage",
    "ViewField",
    "ViewIdField",
    "WireMessage",
    "WireStrField",
    "bind_ports",
    "datagram",
    "dissect",
    "from_wire_message",
    "to_datagram",
    "to_wire_message",
]

DATA_PORTS = (7800, 17800)  # a member's unicast data port and the multicast data port (node/runtime.py: port + 10000)

_U8 = struct.Struct("!B")
_U16 = struct.Struct("!H")
_U64 = struct.Struct("!Q")
_PAIR = struct.Struct("!QQ")


class _Malformed(ValueError):
    """Raised inside a field's getfield; scapy turns it into a Raw fallback."""


# --- byte codecs of the variable-size kinds (big-endian, see node/wire.py's docstring) ---------------------------


def _take(data: bytes, pos: int, n: int, what: str) -> int:
    end = pos + n
    if end > len(data):
        raise _Malformed(f"truncated {what}: {n} bytes needed at offset {pos}, {len(data) - pos} left")
    return end


def _get_str(data: bytes, pos: int) -> tuple[str, int]:
    start = _take(data, pos, 1, "string length")
    end = _take(data, start, data[pos], "string")
    try:
        return data[start:end].decode(), end
    except UnicodeDecodeError as e:
        raise _Malformed(f"string is not UTF-8: {e}") from None


def _put_str(value: str, out: list[bytes]) -> None:
    raw = value.encode()
    if len(raw) > 0xFF:
        raise ValueError(f"string field longer than 255 bytes: {value[:40]!r}...")
    out += (_U8.pack(len(raw)), raw)


def _get_count(data: bytes, pos: int, what: str) -> tuple[int, int]:
    end = _take(data, pos, 2, f"{what} count")
    return _U16.unpack_from(data, pos)[0], end


def _put_count(n: int, out: list[bytes], what: str) -> None:
    if n > 0xFFFF:
        raise ValueError(f"too many {what}: {n} > 65535")
    out.append(_U16.pack(n))


def _get_pair(data: bytes, pos: int, what: str) -> tuple[tuple[int, int], int]:
    end = _take(data, pos, _PAIR.size, what)
    return _PAIR.unpack_from(data, pos), end


def _put_pair(a: int, b: int, out: list[bytes]) -> None:
    try:
        out.append(_PAIR.pack(a, b))
    except struct.error as e:
        raise ValueError(f"not a pair of u64: {a}, {b}: {e}") from None


def _get_viewid(data: bytes, pos: int) -> tuple[wire.ViewId, int]:
    creator, pos = _get_str(data, pos)
    end = _take(data, pos, 8, "view id")
    return wire.ViewId(creator, _U64.unpack_from(data, pos)[0]), end


def _put_viewid(value: wire.ViewId, out: list[bytes]) -> None:
    _put_str(value.creator, out)
    try:
        out.append(_U64.pack(value.id))
    except struct.error as e:
        raise ValueError(f"view id counter is not a u64: {value.id}: {e}") from None


def _as_viewid(x: Any) -> wire.ViewId:
    creator, counter = x
    return wire.ViewId(creator.decode() if isinstance(creator, bytes) else creator, int(counter))


# --- scapy fields ------------------------------------------------------------------------------------------------


class _VariableField(Field[Any, bytes]):
    """Base of the variable-size kinds: the internal value is what node/wire.py decodes to (str, tuples, ViewId,
    View, dict), so a dissected field compares equal to the node's message field."""

    KIND: ClassVar[str]

    def __init__(self, name: str, default: Any) -> None:
        super().__init__(name, default, fmt="B")  # the struct is unused: getfield/addfield below do the bytes

    def decode(self, data: bytes, pos: int) -> tuple[Any, int]:
        raise NotImplementedError

    def encode(self, value: Any, out: list[bytes]) -> None:
        raise NotImplementedError

    def getfield(self, pkt: Packet | None, s: bytes) -> tuple[bytes, Any]:
        value, end = self.decode(s, 0)
        return s[end:], value

    def i2m(self, pkt: Packet | None, x: Any) -> bytes:
        out: list[bytes] = []
        self.encode(self.any2i(pkt, self.default if x is None else x), out)
        return b"".join(out)

    def addfield(self, pkt: Packet | None, s: bytes, val: Any) -> bytes:
        return s + self.i2m(pkt, val)

    def i2len(self, pkt: Packet | None, x: Any) -> int:
        return len(self.i2m(pkt, x))


class WireStrField(_VariableField):
    """`str`: u8 length + UTF-8."""

    KIND = "str"

    def decode(self, data: bytes, pos: int) -> tuple[str, int]:
        return _get_str(data, pos)

    def encode(self, value: str, out: list[bytes]) -> None:
        _put_str(value, out)

    def any2i(self, pkt: Packet | None, x: Any) -> Any:
        return x.decode() if isinstance(x, bytes) else x


class RangesField(_VariableField):
    """`ranges`: u16 count + (first u64, last u64) pairs; shown as [first..last, ...]."""

    KIND = "ranges"

    def decode(self, data: bytes, pos: int) -> tuple[tuple[tuple[int, int], ...], int]:
        n, pos = _get_count(data, pos, "range")
        ranges = []
        for _ in range(n):
            pair, pos = _get_pair(data, pos, "range")
            ranges.append(pair)
        return tuple(ranges), pos

    def encode(self, value: tuple[tuple[int, int], ...], out: list[bytes]) -> None:
        _put_count(len(value), out, "ranges")
        for first, last in value:
            _put_pair(first, last, out)

    def any2i(self, pkt: Packet | None, x: Any) -> Any:
        return None if x is None else tuple((int(a), int(b)) for a, b in x)

    def i2repr(self, pkt: Packet | None, x: Any) -> str:
        return "[" + ", ".join(f"{a}..{b}" for a, b in x or ()) + "]"


class ViewIdField(_VariableField):
    """`viewid`: creator str + counter u64; shown as creator|counter."""

    KIND = "viewid"

    def decode(self, data: bytes, pos: int) -> tuple[wire.ViewId, int]:
        return _get_viewid(data, pos)

    def encode(self, value: wire.ViewId, out: list[bytes]) -> None:
        _put_viewid(value, out)

    def any2i(self, pkt: Packet | None, x: Any) -> Any:
        return None if x is None else _as_viewid(x)

    def i2repr(self, pkt: Packet | None, x: Any) -> str:
        return str(x)


class ViewField(_VariableField):
    """`view`: view id + u16 count + member strs + u16 count + merged-from view ids."""

    KIND = "view"

    def decode(self, data: bytes, pos: int) -> tuple[wire.View, int]:
        view_id, pos = _get_viewid(data, pos)
        n, pos = _get_count(data, pos, "member")
        members = []
        for _ in range(n):
            member, pos = _get_str(data, pos)
            members.append(member)
        k, pos = _get_count(data, pos, "merged view")
        merged = []
        for _ in range(k):
            merged_id, pos = _get_viewid(data, pos)
            merged.append(merged_id)
        return wire.View(view_id, tuple(members), tuple(merged)), pos

    def encode(self, value: wire.View, out: list[bytes]) -> None:
        _put_viewid(value.view_id, out)
        _put_count(len(value.members), out, "members")
        for member in value.members:
            _put_str(member, out)
        _put_count(len(value.merged_from), out, "merged views")
        for merged_id in value.merged_from:
            _put_viewid(merged_id, out)

    def any2i(self, pkt: Packet | None, x: Any) -> Any:
        if x is None:
            return None
        view_id, members, *merged = x  # a View, or (view_id, members[, merged_from])
        return wire.View(
            _as_viewid(view_id), tuple(members), tuple(_as_viewid(v) for v in (merged[0] if merged else ()))
        )

    def i2repr(self, pkt: Packet | None, x: Any) -> str:
        if x is None:
            return "None"
        text = f"{x.view_id} [{', '.join(x.members)}]"
        return text + (f" merged from [{', '.join(map(str, x.merged_from))}]" if x.merged_from else "")


class DigestField(_VariableField):
    """`digest`: u16 count + (member str, highest delivered u64, highest received u64); a dict like the node's."""

    KIND = "digest"
    ismutable = True  # a dict: scapy must notice in-place changes when deciding whether to reuse dissected bytes

    def decode(self, data: bytes, pos: int) -> tuple[dict[str, tuple[int, int]], int]:
        n, pos = _get_count(data, pos, "digest")
        digest = {}
        for _ in range(n):
            member, pos = _get_str(data, pos)
            digest[member], pos = _get_pair(data, pos, "digest entry")
        return digest, pos

    def encode(self, value: dict[str, tuple[int, int]], out: list[bytes]) -> None:
        _put_count(len(value), out, "digest entries")
        for member, (hd, hr) in value.items():
            _put_str(member, out)
            _put_pair(hd, hr, out)

    def any2i(self, pkt: Packet | None, x: Any) -> Any:
        return None if x is None else {m: (int(hd), int(hr)) for m, (hd, hr) in dict(x).items()}

    def i2repr(self, pkt: Packet | None, x: Any) -> str:
        return "{" + ", ".join(f"{m}: {hd}/{hr}" for m, (hd, hr) in (x or {}).items()) + "}"


class _PayloadField(StrLenField):
    """The message payload: exactly `payload_len` bytes (a truncated payload makes the message undecodable, as it
    does for the node, instead of scapy's usual silent truncation)."""

    def getfield(self, pkt: Packet, s: bytes) -> tuple[bytes, bytes]:
        n = pkt.payload_len
        _take(s, 0, n, "payload")
        return s[n:], s[:n]


_FIXED_FIELDS: dict[str, type[Field[Any, Any]]] = {
    "u8": ByteField,
    "u16": ShortField,
    "u32": IntField,
    "u64": LongField,
    "bool": ByteField,  # 0/1 on the wire; to_wire_message turns it into a bool
}
_VARIABLE_FIELDS: dict[str, type[_VariableField]] = {
    cls.KIND: cls for cls in (WireStrField, RangesField, ViewIdField, ViewField, DigestField)
}
_VARIABLE_DEFAULTS: dict[str, Any] = {
    "str": "",
    "ranges": (),
    "viewid": wire.ViewId("", 0),
    "view": wire.View(wire.ViewId("", 0), ()),
    "digest": {},
}
_PROTOCOL_NAMES = {pid: name for name, pid in wire.PROTOCOL_IDS.items()}


# --- messages ----------------------------------------------------------------------------------------------------


class WireMessage(Packet):
    """Base of the message layers; called on bytes (as the datagram's message list does), it returns an instance
    of the layer its (proto, type) bytes name."""

    name = "wire message"
    fields_desc = [
        ByteEnumField("proto", 0, _PROTOCOL_NAMES),
        ByteField("type", 0),
    ]
    SPEC: ClassVar[wire.HeaderSpec]
    FIELD_NAMES: ClassVar[dict[str, str]]  # wire field name -> scapy field name (differs only on a clash)

    @classmethod
    def dispatch_hook(cls, _pkt: bytes | None = None, *args: Any, **kargs: Any) -> type[Packet]:
        if not _pkt:
            return cls
        if len(_pkt) < 2:
            return conf.raw_layer
        return LAYERS_BY_IDS.get((_pkt[0], _pkt[1]), UnknownMessage)

    def extract_padding(self, s: bytes) -> tuple[bytes, bytes]:
        return b"", s  # the bytes after this message are the next messages, not this one's payload

    def mysummary(self) -> str:
        spec = getattr(self, "SPEC", None)
        if spec is None:
            return f"{self.name}(proto={self.proto}, type={self.type})"
        args = ", ".join(
            f"{wire_name}={self.get_field(name).i2repr(self, self.getfieldval(name))}"
            for wire_name, name in self.FIELD_NAMES.items()
        )
        return f"{spec.key}({args})"


class UnknownMessage(WireMessage):
    """A message with a (proto, type) that the table does not know: its length is unknown, so it takes the rest of
    the datagram."""

    name = "unknown message"
    fields_desc = [
        ByteEnumField("proto", 0, _PROTOCOL_NAMES),
        ByteField("type", 0),
        StrField("load", b""),
    ]

    def mysummary(self) -> str:
        return f"?(proto={self.proto}, type={self.type}, {len(self.load)} bytes)"


# Packet attributes a field must not shadow, and the names every message layer uses itself.
_RESERVED = {*dir(Packet), *Packet.__slots__, "proto", "type", "payload_len", "load"}


def _scapy_name(name: str) -> str:
    return name + "_" if name in _RESERVED else name


def _make_layer(spec: wire.HeaderSpec) -> type[WireMessage]:
    names = {f.name: _scapy_name(f.name) for f in spec.fields}
    header_fields: list[Field[Any, Any]] = []
    for f in spec.fields:
        if f.kind in _FIXED_FIELDS:
            header_fields.append(_FIXED_FIELDS[f.kind](names[f.name], 0))
        else:
            header_fields.append(_VARIABLE_FIELDS[f.kind](names[f.name], _VARIABLE_DEFAULTS[f.kind]))
    cls_name = f"{spec.protocol}_{spec.name}"
    namespace = {
        "__module__": __name__,
        "__qualname__": cls_name,
        "__doc__": f"{spec.key}({', '.join(f'{f.name}: {f.kind}' for f in spec.fields)}) message and its payload.",
        "name": spec.key,
        "SPEC": spec,
        "FIELD_NAMES": names,
        "fields_desc": [
            ByteEnumField("proto", spec.proto_id, _PROTOCOL_NAMES),
            ByteField("type", spec.type_id),
            *header_fields,
            FieldLenField("payload_len", None, length_of="load", fmt="!I"),
            _PayloadField("load", b"", length_from=lambda pkt: pkt.payload_len),
        ],
    }
    layer = Packet_metaclass(cls_name, (WireMessage,), namespace)  # scapy's Packet metaclass makes the class
    return cast(type[WireMessage], layer)  # a subclass of its only base


LAYERS: dict[str, type[WireMessage]] = {key: _make_layer(spec) for key, spec in wire.SPECS.items()}
LAYERS_BY_IDS: dict[tuple[int, int], type[WireMessage]] = {
    (cls.SPEC.proto_id, cls.SPEC.type_id): cls for cls in LAYERS.values()
}
globals().update({cls.__name__: cls for cls in LAYERS.values()})  # layers.UNICAST3_ACK etc. (and pickling)
__all__ += sorted(cls.__name__ for cls in LAYERS.values())


# --- the datagram ------------------------------------------------------------------------------------------------


class Chaosbed(Packet):
    """One datagram: a header and a batch of messages (node/wire.py's docstring has the format).

    As with any scapy length field, a dissected `count` stays as it was read: after adding or removing messages of
    a dissected datagram, `del pkt.count` to have it recomputed (or keep it wrong on purpose)."""

    name = "Chaosbed"
    fields_desc = [
        XByteField("magic", wire.MAGIC),
        ByteField("version", wire.WIRE_VERSION),
        FlagsField("flags", None, 8, ["multicast"]),  # None: set from dest when building
        WireStrField("cluster", ""),
        WireStrField("src", ""),
        WireStrField("dest", ""),
        FieldLenField("count", None, count_of="messages", fmt="!H"),
        PacketListField("messages", [], WireMessage, count_from=lambda pkt: pkt.count, max_count=0xFFFF),
    ]

    def do_dissect(self, s: bytes) -> bytes:
        try:
            return super().do_dissect(s)
        except Exception:
            if conf.debug_dissector:
                raise
        # A malformed header (the message list itself never raises): keep what decodes, the rest becomes the Raw
        # payload, and the dissected bytes stay cached so that bytes(pkt) is still the original.
        self.fields.clear()
        rest = s
        for f in self.fields_desc:
            try:
                rest, value = f.getfield(self, rest)
            except Exception:
                break
            self.fields[f.name] = value
        self.raw_packet_cache = s[: len(s) - len(rest)]
        self.raw_packet_cache_fields = {}
        return rest

    def post_build(self, p: bytes, pay: bytes) -> bytes:
        if self.flags is None and len(p) > 2:
            p = p[:2] + _U8.pack(0 if self.dest else wire.FLAG_MULTICAST) + p[3:]
        return p + pay

    def mysummary(self) -> str:
        msgs = [m.summary() for m in self.messages]
        shown = "; ".join(msgs[:5]) + (f"; ... ({len(msgs) - 5} more)" if len(msgs) > 5 else "")
        return f"Chaosbed {self.src} > {self.dest or '*'} [{self.cluster}] {shown}"


def bind_ports(*ports: int) -> None:
    """Dissect UDP datagrams from or to each of `ports` as Chaosbed (idempotent)."""
    for port in ports:
        for direction in ("dport", "sport"):
            if ({direction: port}, Chaosbed) not in UDP.payload_guess:
                bind_bottom_up(UDP, Chaosbed, **{direction: port})


bind_ports(*DATA_PORTS)
bind_top_down(UDP, Chaosbed, sport=DATA_PORTS[0], dport=DATA_PORTS[0])  # UDP()/Chaosbed(): unicast data ports


# --- helpers -----------------------------------------------------------------------------------------------------


def dissect(data: bytes) -> Chaosbed:
    """Dissects one datagram's bytes (a UDP payload). Never raises on malformed input."""
    return Chaosbed(bytes(data))


def to_wire_message(layer: Packet) -> Any:
    """The node message (a wire.py named tuple) equal to a message layer."""
    spec = getattr(layer, "SPEC", None)
    if spec is None:
        raise TypeError(f"not a message layer of a known header: {layer.summary()}")
    values = []
    for f in spec.fields:
        value = layer.getfieldval(layer.FIELD_NAMES[f.name])
        values.append(bool(value) if f.kind == "bool" else value)
    return spec.cls(*values, bytes(layer.load))


def from_wire_message(msg: Any) -> WireMessage:
    """The message layer equal to a node message."""
    try:
        spec = wire.spec_of(msg)
    except KeyError:
        raise TypeError(f"not a wire message: {type(msg).__name__}") from None
    layer = LAYERS[spec.key]
    values: dict[str, Any] = {
        layer.FIELD_NAMES[f.name]: int(v) if f.kind == "bool" else v for f, v in zip(spec.fields, msg[:-1], strict=True)
    }
    return layer(**values, load=msg.payload)


def datagram(cluster: str, src: str, dest: str | None, messages: Iterable[Any]) -> Chaosbed:
    """A datagram layer carrying `messages` (node messages or message layers); dest None or "" means multicast."""
    layers = [m if isinstance(m, Packet) else from_wire_message(m) for m in messages]
    return Chaosbed(cluster=cluster, src=src, dest=dest or "", messages=layers)


def to_datagram(pkt: Packet) -> wire.Datagram:
    """The node's view of a Chaosbed layer (or of a packet containing one); raises TypeError on undecoded
    messages."""
    layer = pkt[Chaosbed]
    return wire.Datagram(layer.cluster, layer.src, layer.dest, [to_wire_message(m) for m in layer.messages])
