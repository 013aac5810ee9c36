"""The wire format: one table of header types and their fields, and the struct codecs built from it.

Everything that reads or writes our bytes derives from the header table (node/wire_headers.py: one typed class per
header type, whose `SPECS` and `HEADER_TABLE` the other readers use): the codecs (node/wire_codec.py), the scapy
layers in chaos/layers.py, the kernel and NFQUEUE rule compilers. Add a header type by declaring its class there.
This module is the one place the rest of the code base imports the wire format from.

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

A decoded message is an instance of its header type's class: a typed named tuple of the header's fields plus a last
field `payload`. Malformed input raises `WireError` and nothing else.

Member addresses are strings: the member's name for its first incarnation ("B") and name/incarnation after a restart
("B/2"). A restarted member is a new address, as a new UUID is in JGroups: no protocol state of the old incarnation
(conn-ids, timestamps, seqnos) applies to it. The network routes by name; a stack drops datagrams addressed to an
older incarnation of itself. The helpers for them are here, in the lowest layer, so that protocols, the stack, the
orchestrator and the checker share them.
"""

from __future__ import annotations

from node.wire_codec import (
    _DECODERS,  # the field decoders by kind: chaos/nfqueue/spans.py decodes the rare kinds with them
    FLAG_MULTICAST,
    MAGIC,
    MAX_RANGES,
    WIRE_VERSION,
    Datagram,
    WireError,
    datagram_overhead,
    datagram_source,
    decode_datagram,
    decode_message,
    encode_datagram,
    encode_message,
    message_size,
)
from node.wire_headers import (
    FIXED_KINDS,
    HEADER_TABLE,
    PROTO_ID_OF,
    PROTOCOL_IDS,
    SPECS,
    SPECS_BY_IDS,
    VARIABLE_KINDS,
    Digest,
    Field,
    HeaderSpec,
    Message,
    Ranges,
    View,
    ViewId,
    header_class,
    spec_of,
)

__all__ = [
    "FIXED_KINDS",
    "FLAG_MULTICAST",
    "HEADER_TABLE",
    "MAGIC",
    "MAX_RANGES",
    "PROTOCOL_IDS",
    "PROTO_ID_OF",
    "SPECS",
    "SPECS_BY_IDS",
    "VARIABLE_KINDS",
    "WIRE_VERSION",
    "_DECODERS",
    "Datagram",
    "Digest",
    "Field",
    "HeaderSpec",
    "Message",
    "Ranges",
    "View",
    "ViewId",
    "WireError",
    "datagram_overhead",
    "datagram_source",
    "decode_datagram",
    "decode_message",
    "encode_datagram",
    "encode_message",
    "header_class",
    "incarnation_of",
    "make_address",
    "message_size",
    "name_of",
    "spec_of",
]


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
