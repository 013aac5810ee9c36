"""Scapy layers for JGroups 5's UDP wire, generated at import time from the one header table of
chaos/profiles/jgroups5.py (`HEADERS`), as chaos/layers_jgroups212.py's are from 2.12's. For reading captures in the
terms the discard rules use (`UNICAST3.DATA(seqno=6)`), never for the hot path (the handler walks datagrams with
struct: chaos/profiles/jgroups5_spans.py).

- `JGroups5`: the datagram (version, flags, and for a LIST its dest and src addresses, cluster name and count), its
  `messages` a list of `JMessage5`;
- `JMessage5`: message type, leading, flags, dest and src (when the leading byte says so), nhdrs and its `headers`,
  each a layer of its header type, then the payload (`load`: the bytes of a BYTES, FRAG or NIO message; the object
  of an OBJECT or LONG one, read by the decoder);
- one layer per header type of the table, named like the rule (`LAYERS["UNICAST3.DATA"]`, class `J5_UNICAST3_DATA`;
  a type the table does not name by protocol: `J5_UNICAST3`): `proto_id`, `magic`, the type field and the type's
  fields in table order. Integer and bool fields are scapy fields, compressed numbers (`longc`, `intc`: a length
  byte and that many bytes, least significant first) too, so a header can be built from scratch; the nested ones
  (addresses, view ids, strings) are read by the decoder's own codecs and kept with their bytes, so building a
  dissected datagram again gives the same bytes. A field named like a Python keyword gets a trailing underscore
  (`from_`).

Importing this module binds UDP ports 7800 and 17800 (chaos/layers.py's, which a JGroups member on the netns backend
uses too) to a dispatcher ahead of the others: a datagram whose version is of major 5 is `JGroups5`, one of 2.12's
`JGroups212`, any other `Chaosbed`, so `rdpcap` of a netns JGroups 5 cluster reads in these layers (`bind_ports`
adds ports); `dissect(data)` takes a UDP payload.
"""

from __future__ import annotations

import keyword
from typing import Any, ClassVar

from scapy.base_classes import BasePacket
from scapy.config import conf
from scapy.fields import (
    ByteField,
    ConditionalField,
    Field,
    FieldLenField,
    FlagsField,
    PacketListField,
    ShortEnumField,
    ShortField,
    SignedIntField,
    SignedLongField,
    SignedShortField,
    StrLenField,
    XShortField,
)
from scapy.layers.inet import UDP
from scapy.packet import Packet, Padding, Raw

from chaos import layers_jgroups212
from chaos.layers import DATA_PORTS
from chaos.profiles import jgroups5 as jg
from chaos.profiles.jgroups5_rules import UNTYPED

__all__ = ["LAYERS", "JCompressedField", "JGroups5", "JMessage5", "JValueField", "bind_ports", "dissect"]

_SCALARS: dict[str, type[Field[Any, Any]]] = {
    "u8": ByteField,
    "bool": ByteField,
    "i16": SignedShortField,
    "i32": SignedIntField,
    "i64": SignedLongField,
}


class JValueField(Field[Any, bytes]):
    """A nested value read by the decoder's codec of its kind (jgroups5.READERS): the decoded value for `show()`,
    with its bytes kept so that building writes them back unchanged."""

    __slots__ = ["kind"]

    def __init__(self, name: str, kind: str) -> None:
        self.kind = kind
        Field.__init__(self, name, None)

    def getfield(self, pkt: Packet, s: bytes) -> tuple[bytes, Any]:
        r = jg.Reader(s)
        known = {f.name: pkt.getfieldval(f.name) for f in pkt.fields_desc if f.name in pkt.fields}
        try:
            value = jg.READERS[self.kind](r, known)
        except jg.CannotSkip as e:
            raise ValueError(str(e)) from None
        return s[r.pos :], (value, bytes(s[: r.pos]))

    def addfield(self, pkt: Packet, s: bytes, val: Any) -> bytes:
        if val is None:
            raise ValueError(f"{self.name}: a {self.kind} is built only from a dissected datagram's bytes")
        return s + val[1]

    def i2repr(self, pkt: Packet | None, x: Any) -> str:
        return "None" if x is None else repr(x[0])


class JCompressedField(Field[int, int]):
    """Bits.writeLongCompressed / writeIntCompressed: a length byte N (0 for the value 0), then N bytes, least
    significant first; a negative number takes all 8 (4)."""

    __slots__ = ["bits"]

    def __init__(self, name: str, default: int, bits: int) -> None:
        self.bits = bits
        Field.__init__(self, name, default)

    def getfield(self, pkt: Packet, s: bytes) -> tuple[bytes, int]:
        r = jg.Reader(s)
        try:
            value = r.compressed(self.bits)
        except jg.CannotSkip as e:
            raise ValueError(str(e)) from None
        return s[r.pos :], value

    def addfield(self, pkt: Packet, s: bytes, val: int | None) -> bytes:
        v = (val or 0) % (1 << self.bits)
        n = 0 if v == 0 else (self.bits // 8 if (val or 0) < 0 else (v.bit_length() + 7) // 8)
        return s + bytes([n]) + v.to_bytes(n, "little")


class _Header(Packet):
    """A header of one type: protocol id, magic, type, fields."""

    KEY: ClassVar[str] = ""

    def extract_padding(self, s: bytes) -> tuple[bytes, bytes]:
        return b"", s

    def mysummary(self) -> str:
        shown = []
        for f in self.fields_desc[2:]:
            if isinstance(f, ConditionalField) and not f._evalcond(self):
                continue
            value = self.getfieldval(f.name)
            if f.name == "type" or f.name.endswith("_len") or isinstance(f, JValueField) or value is None:
                continue
            shown.append(f"{f.name}={value.decode(errors='replace') if isinstance(value, bytes) else value}")
        return f"{self.KEY}({', '.join(shown)})"


def _field(name: str, kind: str) -> list[Field[Any, Any] | ConditionalField]:
    if kind in _SCALARS:
        return [_SCALARS[kind](name, 0)]
    if kind in ("longc", "intc"):
        return [JCompressedField(name, 0, 64 if kind == "longc" else 32)]
    if kind == "cluster":  # TpHeader's: i16 length (-1: none) + bytes
        return [
            FieldLenField(f"{name}_len", None, fmt="!h", length_of=name),
            StrLenField(name, b"", length_from=lambda p: max(int(p.getfieldval(f"{name}_len")), 0)),
        ]
    if kind == "tp_index":  # an i32 after TpHeader's flag when it is > 0 (a signed byte in Java)
        index = SignedIntField(name, None)  # type: ignore[arg-type]  # None: absent (scapy's stubs want an int)
        return [ConditionalField(index, lambda p: 0 < p.getfieldval("flag") < 0x80)]
    return [JValueField(name, kind)]


def _header_layer(key: str, h: jg.HeaderType, code: int | None) -> type[_Header]:
    fields: list[Field[Any, Any] | ConditionalField] = [ShortField("proto_id", h.id), ShortField("magic", h.magic)]
    if h.type_kind is not None:
        fields.append(_SCALARS[h.type_kind]("type", code or 0))
    for table_name, kind in (*h.by_type.get(code, ()), *h.fields) if code is not None else h.fields:
        fields += _field(f"{table_name}_" if keyword.iskeyword(table_name) else table_name, kind)
    name = f"J5_{key.replace('.', '_')}"
    return type(name, (_Header,), {"name": f"JGroups 5 {key}", "fields_desc": fields, "KEY": key})


LAYERS: dict[str, type[_Header]] = {}
_BY_TYPE: dict[tuple[int, int, int | None], type[_Header]] = {}  # (protocol id, magic, type code)
for _h in jg.HEADERS:
    for _code in (*_h.types, None) if _h.type_kind else (None,):
        if _code is not None:
            _key = f"{_h.protocol}.{_h.types[_code]}"
        else:  # an untyped class by its rule name (FD_ALL3.HEARTBEAT; TP's TpHeader), a type not named by protocol
            _key = f"{_h.protocol}.{UNTYPED[_h.protocol]}" if _h.protocol in UNTYPED else _h.protocol
        LAYERS[_key] = _BY_TYPE[(_h.id, _h.magic, _code)] = _header_layer(_key, _h, _code)


def _header_class(pkt: Packet, lst: list[BasePacket], cur: Packet | None, remain: bytes) -> type[Packet] | None:
    """The layer of the next header, from its protocol id, magic and type code (a type the table does not name: the
    protocol's untyped layer; an unknown class: Raw, with the rest of the message)."""
    done = len(lst) + (cur is not None)  # scapy asks before it appends `cur`, the header just dissected
    if done >= (pkt.getfieldval("nhdrs") or 0) or len(remain) < 4:
        return None
    pid, magic = int.from_bytes(remain[0:2], "big"), int.from_bytes(remain[2:4], "big")
    layout = jg.BY_MAGIC.get(magic)
    if layout is None:
        return Raw
    code = None
    if layout.type_kind is not None:
        size = {"u8": 1, "i16": 2}[layout.type_kind]
        code = int.from_bytes(remain[4 : 4 + size], "big", signed=True) if len(remain) >= 4 + size else None
    named = jg.BY_ID.get(pid)
    h = named if named is not None and named.magic == magic else layout
    return _BY_TYPE.get((h.id, h.magic, code)) or _BY_TYPE.get((h.id, h.magic, None)) or Raw


class _PayloadField(Field[Any, bytes]):
    """A message's payload by its type (jgroups5.read_payload): the bytes of a BYTES, FRAG or NIO message, the object
    of an OBJECT or LONG one (None without a payload), kept with its own bytes for building."""

    def getfield(self, pkt: Packet, s: bytes) -> tuple[bytes, Any]:
        r = jg.Reader(s)
        m = jg.Message(0, 0, int(pkt.getfieldval("mtype")), 0, 0, None, None, [])
        try:
            jg.read_payload(r, m)
        except jg.CannotSkip as e:
            raise ValueError(str(e)) from None
        value = m.value if m.payload is None else bytes(s[m.payload[0] : m.payload[0] + m.payload[1]])
        return s[r.pos :], (value, bytes(s[: r.pos]))

    def addfield(self, pkt: Packet, s: bytes, val: Any) -> bytes:
        if val is None:  # built from scratch: an EMPTY message, or a BYTES one without an array
            return s + (b"" if pkt.getfieldval("mtype") == jg.EMPTY else b"\xff\xff\xff\xff")
        if isinstance(val, bytes):  # a BYTES message's payload given as its bytes
            return s + len(val).to_bytes(4, "big") + val
        return s + val[1]

    def i2repr(self, pkt: Packet | None, x: Any) -> str:
        return "None" if x is None else repr(x if isinstance(x, bytes) else x[0])


_MESSAGE_FLAGS = ["OOB", "DONT_BUNDLE", "NO_FC", "", "NO_RELIABILITY", "NO_TOTAL_ORDER", "NO_RELAY", "RSVP",
                  "RSVP_NB", "INTERNAL", "SERIALIZED"]  # fmt: skip


class JMessage5(Packet):
    name = "JGroups 5 message"
    fields_desc: ClassVar[list[Any]] = [
        ShortEnumField("mtype", jg.BYTES, dict(jg.MESSAGE_TYPES)),
        FlagsField("leading", 0, 8, ["DEST_SET", "SRC_SET"]),
        FlagsField("flags", 0, 16, _MESSAGE_FLAGS),
        ConditionalField(JValueField("dest", "address"), lambda p: p.leading & jg.DEST_SET),
        ConditionalField(JValueField("src", "address"), lambda p: p.leading & jg.SRC_SET),
        FieldLenField("nhdrs", None, fmt="!h", count_of="headers"),
        PacketListField("headers", [], next_cls_cb=_header_class),
        _PayloadField("load", None),
    ]

    def post_build(self, pkt: bytes, pay: bytes) -> bytes:
        return pkt + pay

    def extract_padding(self, s: bytes) -> tuple[bytes, bytes]:
        return b"", s

    def mysummary(self) -> str:
        return "[" + " ".join(h.summary() for h in self.headers) + "]"


class _MessagesField(PacketListField):
    """A SINGLE datagram's one message, or a LIST's `count` messages."""

    def getfield(self, pkt: Packet, s: bytes) -> tuple[bytes, list[BasePacket]]:
        count = 1 if not pkt.flags & jg.LIST else int(pkt.getfieldval("count"))
        out: list[BasePacket] = []
        for _ in range(count):
            m = JMessage5(s)
            s = b""
            pad = m.getlayer(Padding)  # the bytes after the message: scapy hands them over as padding
            if pad is not None:
                s = bytes(pad.load)
                assert pad.underlayer is not None
                pad.underlayer.remove_payload()
            out.append(m)
        return s, out

    def addfield(self, pkt: Packet, s: bytes, val: list[BasePacket] | None) -> bytes:
        return s + b"".join(bytes(m) for m in val or [])


def _is_list(p: Packet) -> bool:
    return bool(p.flags & jg.LIST)


class JGroups5(Packet):
    name = "JGroups5"
    fields_desc: ClassVar[list[Any]] = [
        XShortField("version", 0x2946),  # 5.5.6
        FlagsField("flags", 0, 8, ["LIST", "MULTICAST"]),
        ConditionalField(JValueField("dest", "address"), _is_list),
        ConditionalField(JValueField("src", "address"), _is_list),
        ConditionalField(FieldLenField("cluster_len", None, fmt="!h", length_of="cluster"), _is_list),
        ConditionalField(StrLenField("cluster", b"", length_from=lambda p: max(int(p.cluster_len), 0)), _is_list),
        ConditionalField(FieldLenField("count", None, fmt="!i", count_of="messages"), _is_list),
        _MessagesField("messages", [], JMessage5),
    ]

    def do_dissect(self, s: bytes) -> bytes:
        """Never raises on malformed input (unless scapy's conf.debug_dissector): a datagram that does not dissect
        keeps the bytes as a Raw payload."""
        try:
            return super().do_dissect(s)
        except Exception:
            if conf.debug_dissector:
                raise
        self.fields.clear()
        return s

    def mysummary(self) -> str:
        form = "LIST" if self.flags & jg.LIST else "SINGLE"
        return f"JGroups5 {form} " + " ".join(m.mysummary() for m in self.messages)


class OnSharedPorts(Packet):
    """What arrives on a port the wires share: JGroups5 when its version is of major 5, else what
    chaos/layers_jgroups212.py says (JGroups212 or Chaosbed)."""

    name = "chaosbed or JGroups"

    @classmethod
    def dispatch_hook(cls, _pkt: bytes | None = None, *args: Any, **kargs: Any) -> type[Packet]:
        if _pkt is not None and len(_pkt) >= 2 and _pkt[0] >> 3 == jg.MAJOR:
            return JGroups5
        return layers_jgroups212.OnSharedPorts.dispatch_hook(_pkt, *args, **kargs)


def bind_ports(*ports: int) -> None:
    """Dissect UDP datagrams from or to each of `ports` as JGroups5, JGroups212 or Chaosbed, whichever they are
    (idempotent)."""
    for port in ports:
        for direction in ("dport", "sport"):
            entry = ({direction: port}, OnSharedPorts)
            if entry not in UDP.payload_guess:
                UDP.payload_guess.insert(0, entry)


bind_ports(*DATA_PORTS)


def dissect(data: bytes) -> JGroups5:
    """One datagram's bytes (a UDP payload) in these layers."""
    return JGroups5(bytes(data))
