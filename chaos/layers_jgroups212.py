"""Scapy layers for JGroups 2.12.2's UDP wire, generated at import time from the one header table of
chaos/profiles/jgroups212.py (`HEADERS`), as chaos/layers.py's are from node/wire.py's. For reading captures in the
terms the discard rules use (`UNICAST2.DATA(seqno=6)`), never for the hot path (the handler walks datagrams with
struct: chaos/profiles/jgroups212_spans.py).

- `JGroups212`: the datagram (version, flags, and for a LIST its dest and src addresses), its `messages` a list of
  `JMessage` (SINGLE: one; LIST: presence byte 1 before each, 0 after the last);
- `JMessage`: leading, flags, dest and src (when the leading byte says so), payload length and `load`, nhdrs and its
  `headers`, each a layer of its header type;
- one layer per header type of the table, named like the rule (`LAYERS["UNICAST2.DATA"]`, class `J_UNICAST2_DATA`;
  a type the table does not name by protocol: `J_UNICAST2`): `proto_id`, `magic`, the type field and the
  type's fields in table order. Integer and bool fields are scapy fields; the nested ones (addresses, views,
  digests, PingData, JoinRsp) are read by the decoder's own codecs and kept with their bytes, so building a dissected
  datagram again gives the same bytes. A field named like a Python keyword gets a trailing underscore (`from_`).

Importing this module binds UDP ports 7800 and 17800 (chaos/layers.py's, which a JGroups member on the netns
backend uses too) to a dispatcher ahead of `Chaosbed`: a datagram that starts with JGroups 2.12's version is
`JGroups212`, any other `Chaosbed`, so `rdpcap` of a netns JGroups cluster reads in these layers (`bind_ports` adds
ports); `dissect(data)` takes a UDP payload.
"""

from __future__ import annotations

import keyword
from collections.abc import Callable
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
    ShortField,
    SignedIntField,
    SignedLongField,
    SignedShortField,
    StrLenField,
    XShortField,
)
from scapy.layers.inet import UDP
from scapy.packet import Packet, Padding, Raw

from chaos.layers import DATA_PORTS, Chaosbed
from chaos.profiles import jgroups212 as jg
from chaos.profiles.jgroups212_rules import UNTYPED

__all__ = ["LAYERS", "JGroups212", "JMessage", "JValueField", "bind_ports", "dissect"]

_SCALARS: dict[str, type[Field[Any, Any]]] = {
    "u8": ByteField,
    "bool": ByteField,
    "i16": SignedShortField,
    "i32": SignedIntField,
    "i64": SignedLongField,
}


class JValueField(Field[Any, bytes]):
    """A nested value read by the decoder's codec of its kind (jgroups212._READERS): the decoded value for `show()`,
    with its bytes kept so that building writes them back unchanged."""

    __slots__ = ["kind"]

    def __init__(self, name: str, kind: str) -> None:
        self.kind = kind
        Field.__init__(self, name, None)

    def getfield(self, pkt: Packet, s: bytes) -> tuple[bytes, Any]:
        r = jg._Reader(s)
        known = {f.name: pkt.getfieldval(f.name) for f in pkt.fields_desc if f.name in pkt.fields}
        try:
            value = jg._READERS[self.kind](r, known)
        except jg.CannotSkip as e:
            raise ValueError(str(e)) from None
        return s[r.pos :], (value, bytes(s[: r.pos]))

    def addfield(self, pkt: Packet, s: bytes, val: Any) -> bytes:
        if val is None:
            raise ValueError(f"{self.name}: a {self.kind} is built only from a dissected datagram's bytes")
        return s + val[1]

    def i2repr(self, pkt: Packet | None, x: Any) -> str:
        return "None" if x is None else repr(x[0])


class _Header(Packet):
    """A header of one type: protocol id, magic, type, fields."""

    KEY: ClassVar[str] = ""

    def extract_padding(self, s: bytes) -> tuple[bytes, bytes]:
        return b"", s

    def mysummary(self) -> str:
        shown = []
        for f in self.fields_desc[2:]:
            value = self.getfieldval(f.name)
            if f.name == "type" or f.name.endswith("_len") or isinstance(f, JValueField):
                continue
            shown.append(f"{f.name}={value.decode(errors='replace') if isinstance(value, bytes) else value}")
        return f"{self.KEY}({', '.join(shown)})"


def _len_of(name: str) -> Callable[[Packet], int]:
    return lambda p: int(p.getfieldval(f"{name}_len"))


def _header_layer(key: str, h: jg.HeaderType, code: int | None) -> type[_Header]:
    fields: list[Field[Any, Any]] = [ShortField("proto_id", h.id), ShortField("magic", h.magic)]
    if h.type_kind is not None:
        fields.append(_SCALARS[h.type_kind]("type", code or 0))
    for table_name, kind in (*h.by_type.get(code, ()), *h.fields) if code is not None else h.fields:
        name = f"{table_name}_" if keyword.iskeyword(table_name) else table_name  # FD's `from`: `from_`
        if kind in _SCALARS:
            fields.append(_SCALARS[kind](name, 0))
        elif kind == "utf":
            fields += [
                FieldLenField(f"{name}_len", None, length_of=name),
                StrLenField(name, b"", length_from=_len_of(name)),
            ]
        else:
            fields.append(JValueField(name, kind))
    cls = type(f"J_{key.replace('.', '_')}", (_Header,), {"name": f"JGroups {key}", "fields_desc": fields, "KEY": key})
    return cls


LAYERS: dict[str, type[_Header]] = {}
_BY_TYPE: dict[tuple[int, int, int | None], type[_Header]] = {}  # (protocol id, magic, type code)
for _h in jg.HEADERS:
    for _code in (*_h.types, None) if _h.type_kind else (None,):
        if _code is not None:
            _key = f"{_h.protocol}.{_h.types[_code]}"
        else:  # an untyped class by its rule name (FD_ALL.HEARTBEAT; UDP's TpHeader), a type not named by protocol
            _key = f"{_h.protocol}.{UNTYPED[_h.protocol]}" if _h.protocol in UNTYPED else _h.protocol
        LAYERS[_key] = _BY_TYPE[(_h.id, _h.magic, _code)] = _header_layer(_key, _h, _code)


def _header_class(pkt: Packet, lst: list[BasePacket], cur: Packet | None, remain: bytes) -> type[Packet] | None:
    """The layer of the next header, from its protocol id, magic and type code (a type the table does not name: the
    protocol's untyped layer; an unknown class: Raw, with the rest of the message)."""
    nhdrs = pkt.getfieldval("nhdrs")
    done = len(lst) + (cur is not None)  # scapy asks before it appends `cur`, the header just dissected
    if done >= (nhdrs or 0) or len(remain) < 4:
        return None
    pid, magic = int.from_bytes(remain[0:2], "big"), int.from_bytes(remain[2:4], "big")
    layout = jg.BY_MAGIC.get(magic)
    if layout is None:
        return Raw
    code = None
    if layout.type_kind is not None:
        size = {"u8": 1, "i16": 2, "i32": 4}[layout.type_kind]
        code = int.from_bytes(remain[4 : 4 + size], "big", signed=True) if len(remain) >= 4 + size else None
    named = jg.BY_ID.get(pid)
    h = named if named is not None and named.magic == magic else layout
    return _BY_TYPE.get((h.id, h.magic, code)) or _BY_TYPE.get((h.id, h.magic, None)) or Raw


_MESSAGE_FLAGS = ["OOB", "DONT_BUNDLE", "NO_FC", "SCOPED", "NO_RELIABILITY", "NO_TOTAL_ORDER", "NO_RELAY", "RSVP"]


class JMessage(Packet):
    name = "JGroups message"
    fields_desc: ClassVar[list[Any]] = [
        FlagsField("leading", 0, 8, ["DEST_SET", "SRC_SET", "BUF_SET"]),
        FlagsField("flags", 0, 8, _MESSAGE_FLAGS),
        ConditionalField(JValueField("dest", "address"), lambda p: p.leading & jg.DEST_SET),
        ConditionalField(JValueField("src", "address"), lambda p: p.leading & jg.SRC_SET),
        ConditionalField(
            FieldLenField("payload_len", None, fmt="!i", length_of="load"), lambda p: p.leading & jg.BUF_SET
        ),
        ConditionalField(
            StrLenField("load", b"", length_from=lambda p: p.payload_len), lambda p: p.leading & jg.BUF_SET
        ),
        FieldLenField("nhdrs", None, fmt="!h", count_of="headers"),
        PacketListField("headers", [], next_cls_cb=_header_class),
    ]

    def post_build(self, pkt: bytes, pay: bytes) -> bytes:
        return pkt + pay

    def extract_padding(self, s: bytes) -> tuple[bytes, bytes]:
        return b"", s

    def mysummary(self) -> str:
        return "[" + " ".join(h.summary() for h in self.headers) + "]"


def _message(s: bytes) -> tuple[Packet, bytes]:
    """One message and the bytes after it (which scapy hands over as padding)."""
    m = JMessage(s)
    pad = m.getlayer(Padding)
    if pad is None:
        return m, b""
    rest = bytes(pad.load)
    assert pad.underlayer is not None
    pad.underlayer.remove_payload()
    return m, rest


class _MessagesField(PacketListField):
    """A SINGLE datagram's one message, or a LIST's messages each after a presence byte 1, then a 0."""

    def getfield(self, pkt: Packet, s: bytes) -> tuple[bytes, list[BasePacket]]:
        if not pkt.flags & jg.LIST:
            m, rest = _message(s)
            return rest, [m]
        out: list[BasePacket] = []
        while s and s[0]:
            m, s = _message(s[1:])
            out.append(m)
        if not s:
            raise ValueError("a LIST without its end (presence byte 0)")
        return s[1:], out

    def addfield(self, pkt: Packet, s: bytes, val: list[BasePacket] | None) -> bytes:
        if not pkt.flags & jg.LIST:
            return s + b"".join(bytes(m) for m in val or [])
        return s + b"".join(b"\x01" + bytes(m) for m in val or []) + b"\x00"


class JGroups212(Packet):
    name = "JGroups212"
    fields_desc: ClassVar[list[Any]] = [
        XShortField("version", jg.VERSION),
        FlagsField("flags", 0, 8, ["LIST", "MULTICAST", "OOB"]),
        ConditionalField(JValueField("dest", "address"), lambda p: p.flags & jg.LIST),
        ConditionalField(JValueField("src", "address"), lambda p: p.flags & jg.LIST),
        _MessagesField("messages", [], JMessage),
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
        return f"JGroups212 {form} " + " ".join(m.mysummary() for m in self.messages)


class OnSharedPorts(Packet):
    """What arrives on a port both wires use: JGroups212 when it starts with 2.12's version, else Chaosbed."""

    name = "chaosbed or JGroups 2.12"

    @classmethod
    def dispatch_hook(cls, _pkt: bytes | None = None, *args: Any, **kargs: Any) -> type[Packet]:
        return JGroups212 if _pkt is not None and _pkt[:2] == jg.VERSION.to_bytes(2, "big") else Chaosbed


def bind_ports(*ports: int) -> None:
    """Dissect UDP datagrams from or to each of `ports` as JGroups212 or Chaosbed, whichever they are (idempotent)."""
    for port in ports:
        for direction in ("dport", "sport"):
            entry = ({direction: port}, OnSharedPorts)
            if entry not in UDP.payload_guess:
                UDP.payload_guess.insert(0, entry)


bind_ports(*DATA_PORTS)


def dissect(data: bytes) -> JGroups212:
    """One datagram's bytes (a UDP payload) in these layers."""
    return JGroups212(bytes(data))
