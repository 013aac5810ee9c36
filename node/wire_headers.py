"""The header table of the wire format (node/wire.py): every header type of every protocol, its ids and its fields.

Each header type is declared once, as a typed named tuple: its fields in wire order, each annotated with its field
kind (`U64`, `Str`, `ViewField`, ...: a Python type plus the wire kind), then `payload`. `@header(protocol, type_id)`
registers it. Everything that reads or writes our bytes derives from these declarations: the codecs
(node/wire_codec.py), the scapy layers in chaos/layers.py, the kernel and NFQUEUE rule compilers (through `SPECS`
and `HEADER_TABLE`). Add a header type by declaring a class here and adding it to `Message`.

The protocols get typed fields from the same classes: `UNICAST3_DATA(seqno, conn_id, first, payload).seqno` is an
int to mypy, and a decoded message is an instance of exactly its class (a plain named tuple: building and reading
one costs what a tuple does).
"""

# No `from __future__ import annotations` here: the header classes' annotations are read as objects at import
# (their field kinds), which saves evaluating them from strings, header by header, every time a member starts.

import struct
from collections.abc import Callable
from typing import Annotated, NamedTuple, TypeAlias, TypeVar, get_args

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


# --- the values fields carry ---------------------------------------------------------------------------------------


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
# Inclusive (first, last) seqno ranges, e.g. what an XMIT_REQ asks for.
Ranges = tuple[tuple[int, int], ...]

# The field kinds as annotations: the Python type of a field's value, and its kind on the wire.
U8 = Annotated[int, "u8"]
U16 = Annotated[int, "u16"]
U32 = Annotated[int, "u32"]
U64 = Annotated[int, "u64"]
Bool = Annotated[bool, "bool"]
Str = Annotated[str, "str"]
RangesField = Annotated[Ranges, "ranges"]
ViewIdField = Annotated[ViewId, "viewid"]
ViewField = Annotated[View, "view"]
DigestField = Annotated[Digest, "digest"]


# --- the table -----------------------------------------------------------------------------------------------------

_H = TypeVar("_H", bound=type)
_DECLARED: list[tuple[str, int, type]] = []  # (protocol, type id, class), in declaration order


def header(protocol: str, type_id: int) -> Callable[[_H], _H]:
    """Registers a header class as `protocol`'s header type `type_id`; its name is the class name after
    `protocol_` (UNICAST3_DATA: UNICAST3.DATA). Fixed-size fields must precede variable-size ones."""

    def register(cls: _H) -> _H:
        _DECLARED.append((protocol, type_id, cls))
        return cls

    return register


# UNICAST3 (design/UNICAST3.txt, UNICAST3-sync.txt). conn_id on every DATA and ACK; timestamps are receiver-made.
@header("UNICAST3", 0)
class UNICAST3_DATA(NamedTuple):
    seqno: U64
    conn_id: U32
    first: Bool
    payload: bytes = b""


@header("UNICAST3", 1)
class UNICAST3_ACK(NamedTuple):
    seqno: U64
    conn_id: U32
    timestamp: U32
    payload: bytes = b""


@header("UNICAST3", 2)
class UNICAST3_SEND_FIRST_SEQNO(NamedTuple):
    timestamp: U32
    payload: bytes = b""


@header("UNICAST3", 3)
class UNICAST3_XMIT_REQ(NamedTuple):
    conn_id: U32
    ranges: RangesField
    payload: bytes = b""


@header("UNICAST3", 4)
class UNICAST3_CLOSE(NamedTuple):
    conn_id: U32
    payload: bytes = b""


# UNICAST2 (design/UNICAST2.txt): negative acks plus STABLE. conn_id is 0 ("unset") on non-first DATA.
@header("UNICAST2", 0)
class UNICAST2_DATA(NamedTuple):
    seqno: U64
    conn_id: U32
    first: Bool
    payload: bytes = b""


@header("UNICAST2", 1)
class UNICAST2_XMIT_REQ(NamedTuple):
    conn_id: U32
    ranges: RangesField
    payload: bytes = b""


@header("UNICAST2", 2)
class UNICAST2_SEND_FIRST_SEQNO(NamedTuple):
    seqno: U64
    payload: bytes = b""


@header("UNICAST2", 3)
class UNICAST2_STABLE(NamedTuple):
    low: U64
    high: U64
    conn_id: U32
    payload: bytes = b""


# the receiver's ack of a connection's first message (JGRP-1563): the sender stops resending it
@header("UNICAST2", 4)
class UNICAST2_ACK(NamedTuple):
    seqno: U64
    conn_id: U32
    payload: bytes = b""


# NAKACK2 (JGroups NAKACK2, design/NAKACK2-no-retransmission.txt): per-sender multicast seqnos, NAK-based.
# XMIT_RSP carries the original sender and seqno, the payload is the original payload.
@header("NAKACK2", 0)
class NAKACK2_MSG(NamedTuple):
    seqno: U64
    payload: bytes = b""


@header("NAKACK2", 1)
class NAKACK2_XMIT_REQ(NamedTuple):
    sender: Str
    ranges: RangesField
    payload: bytes = b""


@header("NAKACK2", 2)
class NAKACK2_XMIT_RSP(NamedTuple):
    seqno: U64
    sender: Str
    payload: bytes = b""


@header("NAKACK2", 3)
class NAKACK2_HIGHEST_SEQNO(NamedTuple):
    seqno: U64
    payload: bytes = b""


# MCAST (design/MCAST.txt): fixed window, receivers ACK delivered seqnos to the sender.
@header("MCAST", 0)
class MCAST_MSG(NamedTuple):
    seqno: U64
    payload: bytes = b""


@header("MCAST", 1)
class MCAST_ACK(NamedTuple):
    seqno: U64
    payload: bytes = b""


@header("MCAST", 2)
class MCAST_XMIT_REQ(NamedTuple):
    sender: Str
    ranges: RangesField
    payload: bytes = b""


@header("MCAST", 3)
class MCAST_XMIT_RSP(NamedTuple):
    seqno: U64
    sender: Str
    payload: bytes = b""


# STABLE: a member's highest delivered seqno per sender, gossiped within a view.
@header("STABLE", 0)
class STABLE_STABLE(NamedTuple):
    view_id: ViewIdField
    digest: DigestField
    payload: bytes = b""


# GMS: discovery, join, leave, view installation (views are acked), merge handshake.
@header("GMS", 0)
class GMS_FIND(NamedTuple):
    payload: bytes = b""


@header("GMS", 1)
class GMS_FIND_RSP(NamedTuple):
    view_id: ViewIdField
    payload: bytes = b""


@header("GMS", 2)
class GMS_JOIN_REQ(NamedTuple):
    payload: bytes = b""


@header("GMS", 3)
class GMS_JOIN_RSP(NamedTuple):
    view: ViewField
    digest: DigestField
    payload: bytes = b""


# VIEW.subgroups: in a merge view, one (first, last) range of member indices per merged_from entry (who came from
# which subgroup; members are listed grouped by subgroup); empty otherwise.
@header("GMS", 4)
class GMS_VIEW(NamedTuple):
    view: ViewField
    digest: DigestField
    subgroups: RangesField
    payload: bytes = b""


@header("GMS", 5)
class GMS_VIEW_ACK(NamedTuple):
    view_id: ViewIdField
    payload: bytes = b""


@header("GMS", 6)
class GMS_LEAVE_REQ(NamedTuple):
    payload: bytes = b""


@header("GMS", 7)
class GMS_LEAVE_RSP(NamedTuple):
    payload: bytes = b""


@header("GMS", 8)
class GMS_MERGE_REQ(NamedTuple):
    merge_id: U64
    payload: bytes = b""


@header("GMS", 9)
class GMS_MERGE_RSP(NamedTuple):
    merge_id: U64
    view: ViewField
    digest: DigestField
    payload: bytes = b""


# the leader gave the merge up: participants are free
@header("GMS", 10)
class GMS_CANCEL_MERGE(NamedTuple):
    merge_id: U64
    payload: bytes = b""


# FD: heartbeats, and suspicions reported to the coordinator.
@header("FD", 0)
class FD_HEARTBEAT(NamedTuple):
    payload: bytes = b""


@header("FD", 1)
class FD_SUSPECT(NamedTuple):
    member: Str
    payload: bytes = b""


# MERGE (like JGroups' MERGE3): periodic announcements of a member's view id, so coordinators of subgroups that can
# hear each other again find out.
@header("MERGE", 0)
class MERGE_INFO(NamedTuple):
    view_id: ViewIdField
    payload: bytes = b""


# A decoded message: an instance of one of the header classes (every one of them, checked at import below).
Message: TypeAlias = (
    UNICAST3_DATA
    | UNICAST3_ACK
    | UNICAST3_SEND_FIRST_SEQNO
    | UNICAST3_XMIT_REQ
    | UNICAST3_CLOSE
    | UNICAST2_DATA
    | UNICAST2_XMIT_REQ
    | UNICAST2_SEND_FIRST_SEQNO
    | UNICAST2_STABLE
    | UNICAST2_ACK
    | NAKACK2_MSG
    | NAKACK2_XMIT_REQ
    | NAKACK2_XMIT_RSP
    | NAKACK2_HIGHEST_SEQNO
    | MCAST_MSG
    | MCAST_ACK
    | MCAST_XMIT_REQ
    | MCAST_XMIT_RSP
    | STABLE_STABLE
    | GMS_FIND
    | GMS_FIND_RSP
    | GMS_JOIN_REQ
    | GMS_JOIN_RSP
    | GMS_VIEW
    | GMS_VIEW_ACK
    | GMS_LEAVE_REQ
    | GMS_LEAVE_RSP
    | GMS_MERGE_REQ
    | GMS_MERGE_RSP
    | GMS_CANCEL_MERGE
    | FD_HEARTBEAT
    | FD_SUSPECT
    | MERGE_INFO
)


# --- what the readers use: specs per header, and the table as rows ------------------------------------------------


class Field(NamedTuple):
    name: str
    kind: str


class HeaderSpec(NamedTuple):
    """One header type, with the codec pieces derived from its declaration."""

    protocol: str
    name: str
    proto_id: int
    type_id: int
    fields: tuple[Field, ...]
    fixed: struct.Struct  # proto, type and the fixed-size fields
    variable: tuple[Field, ...]
    cls: type[Message]

    @property
    def key(self) -> str:
        return f"{self.protocol}.{self.name}"


def _fields_of(cls: type) -> tuple[Field, ...]:
    """The wire fields of a declared header class: every field before `payload`, with the kind its annotation
    carries."""
    names: tuple[str, ...] = getattr(cls, "_fields", ())  # a named tuple's fields
    hints = cls.__annotations__
    if not names or names[-1] != "payload" or hints["payload"] is not bytes:
        raise TypeError(f"{cls.__name__}: the last field is `payload: bytes`")
    fields = []
    for name in names[:-1]:
        meta = get_args(hints[name])[1:]
        if len(meta) != 1 or not isinstance(meta[0], str):
            raise TypeError(f"{cls.__name__}.{name}: annotate it with a field kind (U64, Str, ViewField, ...)")
        fields.append(Field(name, meta[0]))
    return tuple(fields)


def _spec(protocol: str, type_id: int, cls: type) -> HeaderSpec:
    prefix = f"{protocol}_"
    if protocol not in PROTOCOL_IDS or not cls.__name__.startswith(prefix):
        raise TypeError(f"{cls.__name__}: declared as a {protocol} header, so its name starts with {prefix}")
    name = cls.__name__[len(prefix) :]
    fields = _fields_of(cls)
    fixed_fields = [f for f in fields if f.kind in FIXED_KINDS]
    unknown = [f for f in fields if f.kind not in FIXED_KINDS and f.kind not in VARIABLE_KINDS]
    if unknown:
        raise TypeError(f"{protocol}.{name}: unknown field kinds {unknown}")
    if fields[: len(fixed_fields)] != tuple(fixed_fields):
        raise TypeError(f"{protocol}.{name}: fixed-size fields must come before variable-size ones")
    fixed = struct.Struct("!BB" + "".join(FIXED_KINDS[f.kind] for f in fixed_fields))
    variable = tuple(f for f in fields if f.kind in VARIABLE_KINDS)
    return HeaderSpec(protocol, name, PROTOCOL_IDS[protocol], type_id, fields, fixed, variable, cls)


def _build_specs() -> tuple[dict[tuple[int, int], HeaderSpec], dict[str, HeaderSpec]]:
    if {cls for _, _, cls in _DECLARED} != set(get_args(Message)):
        raise TypeError("Message must list every declared header class, and nothing else")
    by_ids: dict[tuple[int, int], HeaderSpec] = {}
    by_key: dict[str, HeaderSpec] = {}
    for protocol, type_id, cls in _DECLARED:
        spec = _spec(protocol, type_id, cls)
        if (spec.proto_id, type_id) in by_ids:
            raise TypeError(f"duplicate header ids for {spec.key}")
        by_ids[(spec.proto_id, type_id)] = spec
        by_key[spec.key] = spec
        # for readers that go by the class (tests, chaos/); typed code asks `spec_of`
        ids = {"PROTOCOL": protocol, "NAME": spec.name, "PROTO_ID": spec.proto_id, "TYPE_ID": type_id}
        for attr, value in ids.items():
            setattr(cls, attr, value)
        cls.__doc__ = f"{spec.key}({', '.join(f.name for f in spec.fields)}) message with its payload."
    return by_ids, by_key


SPECS_BY_IDS, SPECS = _build_specs()
_SPEC_BY_CLASS: dict[type, HeaderSpec] = {s.cls: s for s in SPECS.values()}
# (protocol, header name, type id, [(field, kind), ...]), in declaration order: the table as rows
HEADER_TABLE: list[tuple[str, str, int, list[tuple[str, str]]]] = [
    (s.protocol, s.name, s.type_id, [(f.name, f.kind) for f in s.fields]) for s in SPECS.values()
]
# message class -> its wire protocol id (the stack batches a datagram's messages by protocol with it)
PROTO_ID_OF: dict[type, int] = {s.cls: s.proto_id for s in SPECS.values()}


def header_class(protocol: str, name: str) -> type[Message]:
    """The message class of `protocol.name`, e.g. header_class("UNICAST3", "ACK")."""
    try:
        return SPECS[f"{protocol}.{name}"].cls
    except KeyError:
        raise KeyError(f"unknown header {protocol}.{name}; known: {', '.join(sorted(SPECS))}") from None


def spec_of(msg: Message) -> HeaderSpec:
    return _SPEC_BY_CLASS[type(msg)]
