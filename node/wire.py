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
    src      str  u8 length + UTF-8 (a member address: node/addresses.py)
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

Member addresses ("B", "B/2" after a restart) are strings on the wire; they are part of the history contract too,
and node/addresses.py makes and reads them for the wire, the orchestrator and the checker alike.
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
    "message_size",
    "spec_of",
]
