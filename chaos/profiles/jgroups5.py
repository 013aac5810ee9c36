"""JGroups 5's UDP wire format (5.3.8 to 5.5.x): a decoder driven by one header table, and what protocol-aware faults
need of it (where each message and each header body starts and ends, and how to cut one message out of a list).

Facts (JGroups' sources at jgroups-5.5.6.Final: util/Util.java writeMessage/writeMessageList/writeAddress,
BaseMessage.writeTo/writeToNoAddrs, util/Headers.java, util/Bits.java, the header classes' writeTo; checked against
the jar's own readers on the golden datagrams of tests/fixtures/jgroups5/). Integers are big-endian but for the
compressed ones; a bool is one byte.

    datagram   version u16 (major << 11 | minor << 6 | micro: 5.5.6 = 0x2946) | flags u8 (LIST 1, MULTICAST 2)
               SINGLE: message type i16 | message
               LIST: dest address | src address | cluster i16 length (-1: none) + bytes | count i32
                     | count x (message type i16 | message, its src left out when it is the list's)
    message    leading u8 (DEST_SET 1, SRC_SET 2) | flags i16 (OOB 1, ...) | [dest] | [src] | nhdrs i16
               | nhdrs x (protocol id i16, magic i16, body) | payload by message type: BYTES 0 and FRAG 6 i32 length
               (-1: none) + bytes, NIO 1 bool + i32 length + bytes, EMPTY 2 nothing, OBJECT 3 presence u8 + magic
               i16 + the object's own layout (no length: SeqnoList and Digest are known), LONG 4 a compressed long.
               The headers come BEFORE the payload, top-most protocol first and TP's TpHeader last, and a header body
               has no length: skipping one needs its layout, which its magic number names.
    address    flags u8: NULL 1 (nothing more) | UUID 2 (least i64, most i64) | IP 16 (length u8 + 4/16 bytes
               [+ scope i32 for 16], port u16) | otherwise a class written with its magic (not decoded: "cannot skip")
    compressed a long (longc) or int (intc) as a length byte N (0: the value 0) and N bytes, least significant
               first; a sequence (a digest's highest delivered and received) as one byte of two length nibbles and
               both numbers so.

`decode(data)` returns a `Datagram` (form, addresses, a list's count, messages, each message's headers with their
fields and byte offsets). It never raises on bad input: a datagram that cannot be walked has `error` set and
`skippable` False, with the messages decoded before the problem. `cut(data, dgram, i)` removes message i of a LIST
(and lowers its count).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MAJOR = 5
VERSION_MIN = (5 << 11) | (3 << 6) | 8  # 5.3.8: TpHeader's flag byte (JGRP-2812); the layouts below hold from here
VERSION_END = 6 << 11
LIST, MULTICAST = 0x01, 0x02
DEST_SET, SRC_SET = 0x01, 0x02
OOB = 0x0001  # a message's flags
ADDR_NULL, ADDR_UUID, ADDR_IP = 0x01, 0x02, 0x10
BYTES, NIO, EMPTY, OBJECT, LONG, COMPOSITE, FRAG = range(7)
MESSAGE_TYPES = {BYTES: "BYTES", NIO: "NIO", EMPTY: "EMPTY", OBJECT: "OBJECT", LONG: "LONG", COMPOSITE: "COMPOSITE",
                 FRAG: "FRAG"}  # fmt: skip
SEQNO_LIST, DIGEST, MUTABLE_DIGEST = 15, 9, 10  # the magic numbers of the objects OBJECT messages carry here


def version_name(v: int) -> str:
    return f"{v >> 11}.{(v >> 6) & 0x1F}.{v & 0x3F}"


# --- the header table ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HeaderType:
    """One header class as a protocol of the stock stacks writes it: the protocol's id (jg-protocol-ids.xml), the
    class's magic number (jg-magic-map.xml), the type field's kind (None: no type), the type codes' names, the fields
    each type adds (`by_type`; a type not listed writes nothing more), and the fields every type writes after those
    (`fields`). A field is (name, kind); kinds are the codecs of `READERS`."""

    protocol: str
    id: int
    magic: int
    type_kind: str | None = None
    types: dict[int, str] = field(default_factory=dict)
    by_type: dict[int, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    fields: tuple[tuple[str, str], ...] = ()

    def type_id(self, name: str) -> int:
        """The code of a type name (KeyError naming the known ones)."""
        for code, n in self.types.items():
            if n == name:
                return code
        raise KeyError(f"{self.protocol} has no type {name!r}; types: {', '.join(self.types.values())}")


_UNICAST_TYPES = {0: "DATA", 1: "ACK", 2: "SEND_FIRST_SEQNO", 3: "XMIT_REQ", 4: "CLOSE"}
_Layouts = dict[int, tuple[tuple[str, str], ...]]
_UNICAST_FIELDS: _Layouts = {  # UnicastHeader3 and UNICAST4's UnicastHeader: XMIT_REQ's missing seqnos are its payload
    0: (("seqno", "longc"), ("conn_id", "i16"), ("first", "bool")),
    1: (("seqno", "longc"), ("conn_id", "i16"), ("timestamp", "intc")),
    2: (("timestamp", "intc"),),
    4: (("conn_id", "i16"),),
}
_NAKACK2_TYPES = {1: "MSG", 2: "XMIT_REQ", 3: "XMIT_RSP", 4: "HIGHEST_SEQNO"}
_SEQNO = (("seqno", "longc"),)
_NAKACK2_FIELDS: _Layouts = {1: _SEQNO, 2: (("sender", "address"),), 3: _SEQNO, 4: _SEQNO}
_FC = {1: "REPLENISH", 2: "CREDIT_REQUEST"}  # FcHeader: the credits are the LONG message's payload

HEADERS: tuple[HeaderType, ...] = (
    HeaderType("TP", 57, 60, fields=(("cluster", "cluster"), ("flag", "u8"), ("index", "tp_index"))),
    HeaderType("UNICAST3", 48, 82, "u8", _UNICAST_TYPES, _UNICAST_FIELDS),
    HeaderType("UNICAST4", 78, 100, "u8", _UNICAST_TYPES, _UNICAST_FIELDS),
    HeaderType("NAKACK2", 41, 78, "u8", _NAKACK2_TYPES, _NAKACK2_FIELDS),
    HeaderType("NAKACK4", 77, 99, "u8", {**_NAKACK2_TYPES, 5: "ACK"}, {**_NAKACK2_FIELDS, 5: _SEQNO}),
    HeaderType("NAKACK3", 76, 99, "u8", {**_NAKACK2_TYPES, 5: "ACK"}, {**_NAKACK2_FIELDS, 5: _SEQNO}),
    HeaderType(
        "GMS",
        12,
        55,
        "u8",
        {
            1: "JOIN_REQ",
            2: "JOIN_RSP",
            3: "LEAVE_REQ",
            4: "LEAVE_RSP",
            5: "VIEW",
            6: "MERGE_REQ",
            7: "MERGE_RSP",
            8: "INSTALL_MERGE_VIEW",
            9: "CANCEL_MERGE",
            10: "VIEW_ACK",
            11: "JOIN_REQ_WITH_STATE_TRANSFER",
            13: "GET_DIGEST_REQ",
            14: "GET_DIGEST_RSP",
            15: "INSTALL_DIGEST",
            16: "GET_CURRENT_VIEW",
        },
        fields=(("flags", "i16"), ("mbr", "address"), ("merge_id", "merge_id")),
    ),
    HeaderType(
        "MERGE3",
        38,
        75,
        "u8",
        {0: "INFO", 1: "VIEW_REQ", 2: "VIEW_RSP"},
        fields=(("view_id", "view_id?"), ("logical_name", "string"), ("physical_addr", "address")),
    ),
    HeaderType("STABLE", 13, 56, "u8", {1: "GOSSIP", 2: "STABILITY"}, fields=(("view_id", "view_id?"),)),
    HeaderType("FD_ALL3", 70, 62),  # HeartbeatHeader: no body
    HeaderType("FD_ALL", 20, 62),
    HeaderType(
        "VERIFY_SUSPECT2", 72, 94, "i16", {1: "ARE_YOU_DEAD", 2: "I_AM_NOT_DEAD"}, fields=(("from", "address"),)
    ),
    HeaderType(
        "FD_SOCK2",
        71,
        93,
        "u8",
        {1: "SUSPECT", 2: "UNSUSPECT", 3: "CONNECT", 4: "CONNECT_RSP"},
        fields=(("mbrs", "addresses32"), ("cluster", "string"), ("srv", "address")),
    ),
    HeaderType(
        "PING",
        5,
        53,
        "u8",
        {1: "GET_MBRS_REQ", 2: "GET_MBRS_RSP"},
        fields=(("cluster", "string"), ("initial_discovery", "bool")),
    ),
    HeaderType(
        "FRAG2",
        4,
        52,
        fields=(
            ("id", "longc"),
            ("frag_id", "intc"),
            ("num_frags", "intc"),
            ("needs_deserialization", "bool"),
            ("original_type", "i16"),
        ),
    ),
    HeaderType("UFC", 31, 59, "u8", _FC),
    HeaderType("MFC", 30, 59, "u8", _FC),
    HeaderType(
        "STATE_TRANSFER", 14, 57, "u8", {1: "STATE_REQ", 2: "STATE_RSP", 3: "STATE_EX"}, fields=(("digest", "digest?"),)
    ),
)
BY_PROTOCOL: dict[str, HeaderType] = {h.protocol: h for h in HEADERS}
BY_ID: dict[int, HeaderType] = {h.id: h for h in HEADERS}
BY_MAGIC: dict[int, HeaderType] = {}  # the layout: a magic names a header class, several protocols may share one
for _h in HEADERS:
    BY_MAGIC.setdefault(_h.magic, _h)
assert all(BY_MAGIC[h.magic].by_type == h.by_type and BY_MAGIC[h.magic].fields == h.fields for h in HEADERS)


# --- decoded values ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Uuid:
    """org.jgroups.util.UUID (written least significant half first)."""

    most: int
    least: int

    def __str__(self) -> str:
        v = ((self.most & (2**64 - 1)) << 64) | (self.least & (2**64 - 1))
        h = f"{v:032x}"
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


@dataclass(frozen=True, slots=True)
class IpAddr:
    """org.jgroups.stack.IpAddress."""

    ip: str | None
    port: int


Address = Uuid | IpAddr | None


@dataclass(slots=True)
class Header:
    """One header of a message: `start` is the offset of its protocol id, `body` of its body (after id and magic),
    `end` the first byte after it. `type` is the type code (None for a header without one), `type_name` its name
    (None for a code the table does not name)."""

    protocol: str
    id: int
    magic: int
    type: int | None
    type_name: str | None
    start: int
    body: int
    end: int
    fields: dict[str, Any]

    @property
    def key(self) -> str:
        """ "UNICAST3.DATA", "FD_ALL3", ...: how rules name it."""
        return f"{self.protocol}.{self.type_name}" if self.type_name else self.protocol


@dataclass(slots=True)
class Message:
    """One message: `start` is the offset of its type (i16), `end` the first byte after its payload: a cut removes
    [start, end). `dest` and `src` are the message's effective addresses (a LIST's own for those it leaves out);
    `payload` is (offset, length) of a bytes payload (None without one), `value` the object of an OBJECT message
    (a SeqnoList, a Digest) or a LONG message's number."""

    start: int
    end: int
    type: int
    leading: int
    flags: int
    dest: Address
    src: Address
    headers: list[Header]
    payload: tuple[int, int] | None = None
    value: Any = None

    @property
    def oob(self) -> bool:
        return bool(self.flags & OOB)

    def header(self, protocol: str) -> Header | None:
        return next((h for h in self.headers if h.protocol == protocol), None)

    def payload_bytes(self, data: bytes) -> bytes | None:
        return None if self.payload is None else data[self.payload[0] : self.payload[0] + self.payload[1]]

    def msg_id(self, data: bytes) -> str | None:
        """chaosbed's msg_id: the payload up to its first NUL byte (node/payload.py), or None."""
        p = self.payload_bytes(data)
        end = p.find(b"\0") if p else -1
        if end <= 0:
            return None
        try:
            return p[:end].decode()  # type: ignore[index]
        except UnicodeDecodeError:
            return None


@dataclass(slots=True)
class Datagram:
    """A decoded datagram. `form` is SINGLE or LIST; `dest`/`src`/`cluster`/`count` are a LIST's, `count_at` the
    offset of its count. `error` says why the walk stopped (None: every byte accounted for); `skippable` is False
    when the datagram cannot be walked (another version, an unknown header magic, address class or payload object,
    a truncated or malformed datagram), so it must be passed untouched."""

    version: int
    flags: int
    form: str
    dest: Address = None
    src: Address = None
    cluster: str | None = None
    count: int | None = None
    count_at: int | None = None
    messages: list[Message] = field(default_factory=list)
    error: str | None = None

    @property
    def skippable(self) -> bool:
        return self.error is None

    @property
    def multicast(self) -> bool:
        return bool(self.flags & MULTICAST)


class CannotSkip(Exception):
    """Inside the walker only: a part whose length cannot be known (decode() turns it into Datagram.error)."""


# --- the walker ------------------------------------------------------------------------------------------------------

_I16, _U16, _I32, _I64 = struct.Struct("!h"), struct.Struct("!H"), struct.Struct("!i"), struct.Struct("!q")


def _signed(v: int, bits: int) -> int:
    return v - (1 << bits) if v >= 1 << (bits - 1) else v


class Reader:
    """Reads JGroups' primitives from `data` at `pos`, raising CannotSkip past the end."""

    __slots__ = ("data", "end", "pos")

    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data)

    def need(self, n: int) -> None:
        if n < 0:
            raise CannotSkip(f"negative length {n} at offset {self.pos}")
        if self.pos + n > self.end:
            raise CannotSkip(f"truncated at offset {self.pos} (needs {n} more bytes, has {self.end - self.pos})")

    def u8(self) -> int:
        self.need(1)
        self.pos += 1
        return self.data[self.pos - 1]

    def _fixed(self, s: struct.Struct) -> int:
        self.need(s.size)
        v: int = s.unpack_from(self.data, self.pos)[0]
        self.pos += s.size
        return v

    def i16(self) -> int:
        return self._fixed(_I16)

    def u16(self) -> int:
        return self._fixed(_U16)

    def i32(self) -> int:
        return self._fixed(_I32)

    def i64(self) -> int:
        return self._fixed(_I64)

    def raw(self, n: int) -> bytes:
        self.need(n)
        self.pos += n
        return bytes(self.data[self.pos - n : self.pos])

    def compressed(self, bits: int) -> int:
        """Bits.readLongCompressed / readIntCompressed: a length byte, then that many bytes, least significant
        first."""
        n = self.u8()
        if n > bits // 8:
            raise CannotSkip(f"a compressed {bits}-bit number of {n} bytes at offset {self.pos - 1}")
        v = int.from_bytes(self.raw(n), "little")
        return _signed(v, bits) if n == bits // 8 else v

    def sequence(self) -> tuple[int, int]:
        """Bits.readLongSequence: (highest delivered, highest received)."""
        lengths = self.u8()
        if not lengths:
            return 0, 0
        a, b = lengths >> 4, lengths & 0x0F
        if a > 8 or b > 8:
            raise CannotSkip(f"a long sequence with lengths {a} and {b} at offset {self.pos - 1}")
        hd = _signed(int.from_bytes(self.raw(a), "little"), 64) if a == 8 else int.from_bytes(self.raw(a), "little")
        delta = int.from_bytes(self.raw(b), "little")
        return hd, hd + delta

    def utf(self) -> str:
        """DataOutputStream.writeUTF: u16 length + modified UTF-8 (plain UTF-8 for the strings JGroups sends)."""
        return self.raw(self.u16()).decode("utf-8", "replace")

    def string(self) -> str | None:
        """Bits.writeString: a presence byte, then writeUTF."""
        return self.utf() if self.u8() else None

    def address(self) -> Address:
        at = self.pos
        flags = self.u8()
        if flags & ADDR_NULL:
            return None
        if flags & ADDR_UUID:
            least = self.i64()
            return Uuid(self.i64(), least)
        if flags & ADDR_IP:
            n = self.u8()
            ip = None
            if n:
                b = self.raw(n)
                if n == 16:
                    self.i32()  # scope id
                    ip = ":".join(f"{b[i]:02x}{b[i + 1]:02x}" for i in range(0, 16, 2))
                elif n == 4:
                    ip = ".".join(str(x) for x in b)
                else:
                    raise CannotSkip(f"an IP address of {n} bytes at offset {at}")
            return IpAddr(ip, self.u16())
        raise CannotSkip(f"cannot skip: address flags 0x{flags:02x} at offset {at} (only UUID and IpAddress)")

    def addresses(self, count: int) -> list[Address]:
        if count < 0 or count > self.end - self.pos:
            raise CannotSkip(f"{count} addresses at offset {self.pos}")
        return [self.address() for _ in range(count)]

    def view_id(self) -> dict[str, Any] | None:
        """Util.writeViewId: a presence bool, the creator's address, the id (compressed)."""
        return {"creator": self.address(), "id": self.compressed(64)} if self.u8() else None

    def digest(self) -> dict[str, Any]:
        """Digest.writeTo: i16 member count (-1: none) + addresses, then (highest delivered, received) each."""
        n = self.i16()
        members = self.addresses(n) if n >= 0 else []
        return {"members": members, "seqnos": [self.sequence() for _ in members]}

    def seqno_list(self) -> dict[str, Any]:
        """SeqnoList.writeTo: i32 size (bits), i64 offset, then ceil(size / 64) i64 words of a bit set."""
        size = self.i32()
        offset = self.i64()
        words = [self.i64() for _ in range(((size - 1) >> 6) + 1 if size > 0 else 0)]
        seqnos = [offset + i for i in range(size) if words[i >> 6] >> (i & 63) & 1]
        return {"size": size, "offset": offset, "seqnos": seqnos}


Fields = dict[str, Any]
# a field kind's codec: (reader, the fields decoded so far) -> value
READERS: dict[str, Callable[[Reader, Fields], Any]] = {
    "u8": lambda r, f: r.u8(),
    "bool": lambda r, f: r.u8() != 0,
    "i16": lambda r, f: r.i16(),
    "i32": lambda r, f: r.i32(),
    "i64": lambda r, f: r.i64(),
    "longc": lambda r, f: r.compressed(64),
    "intc": lambda r, f: r.compressed(32),
    "string": lambda r, f: r.string(),
    "address": lambda r, f: r.address(),
    "addresses32": lambda r, f: r.addresses(r.i32()),
    "view_id?": lambda r, f: r.view_id(),
    "digest?": lambda r, f: r.digest() if r.u8() else None,
    # GMS: a MergeId (initiator address, i32 id) when its flags say MERGE_ID_PRESENT (4)
    "merge_id": lambda r, f: {"initiator": r.address(), "id": r.i32()} if f.get("flags", 0) & 4 else None,
    # TpHeader: the cluster name (i16 length, -1: none), then after its flag byte an i32 index when the flag is > 0
    "cluster": lambda r, f: (lambda n: r.raw(n).decode("latin-1") if n >= 0 else None)(r.i16()),
    "tp_index": lambda r, f: r.i32() if 0 < f.get("flag", 0) < 0x80 else None,  # a signed byte in Java
}
_TYPE_READERS: dict[str, Callable[[Reader], int]] = {"u8": Reader.u8, "i16": Reader.i16}
assert {kind for h in HEADERS for fs in (h.fields, *h.by_type.values()) for _, kind in fs} <= set(READERS)


def _header(r: Reader) -> Header:
    start = r.pos
    pid = r.i16()
    magic = r.i16()
    layout = BY_MAGIC.get(magic)
    if layout is None:
        raise CannotSkip(f"cannot skip: unknown header magic {magic} (protocol id {pid}) at offset {start}")
    named = BY_ID.get(pid)
    protocol = named.protocol if named is not None and named.magic == magic else f"?{pid}"
    body = r.pos
    code = _TYPE_READERS[layout.type_kind](r) if layout.type_kind else None
    fields: Fields = {}
    for name, kind in (*layout.by_type.get(code, ()), *layout.fields) if code is not None else layout.fields:
        fields[name] = READERS[kind](r, fields)
    type_name = layout.types.get(code) if code is not None else None
    return Header(protocol, pid, magic, code, type_name, start, body, r.pos, fields)


def header_end(data: bytes, pos: int) -> int:
    """Where the header that starts at data[pos] ends (CannotSkip if it cannot be walked): the span walker's
    fallback for headers with nested, variable-size bodies."""
    return _header(Reader(data, pos)).end


def address_end(data: bytes, pos: int) -> int:
    """Where the address that starts at data[pos] ends (CannotSkip if it cannot be walked)."""
    r = Reader(data, pos)
    r.address()
    return r.pos


def read_payload(r: Reader, m: Message) -> None:
    """Reads message m's payload (by its type) into m.payload or m.value."""
    t = m.type
    if t in (BYTES, FRAG, NIO):
        if t == NIO:
            r.u8()  # use_direct_memory_for_allocations
        n = r.i32()
        if n >= 0:
            r.need(n)
            m.payload = (r.pos, n)
            r.pos += n
    elif t == LONG:
        m.value = r.compressed(64)
    elif t == OBJECT:
        if r.u8():
            magic = r.i16()
            if magic == SEQNO_LIST:
                m.value = r.seqno_list()
            elif magic in (DIGEST, MUTABLE_DIGEST):
                m.value = r.digest()
            else:
                raise CannotSkip(f"cannot skip: an object of magic {magic} at offset {r.pos - 2} (SeqnoList, Digest)")
    elif t != EMPTY:
        raise CannotSkip(f"cannot skip: a {MESSAGE_TYPES.get(t, str(t))} message at offset {m.start}")


def _message(r: Reader, dest: Address, src: Address, out: list[Message]) -> None:
    start = r.pos
    mtype = r.i16()
    leading = r.u8()
    flags = r.u16()
    if leading & DEST_SET:
        dest = r.address()
    if leading & SRC_SET:
        src = r.address()
    m = Message(start, start, mtype, leading, flags, dest, src, [])
    out.append(m)  # visible, with what was read, if a header cannot be skipped
    nhdrs = r.i16()
    if nhdrs < 0:
        raise CannotSkip(f"{nhdrs} headers at offset {r.pos - 2}")
    for _ in range(nhdrs):
        m.headers.append(_header(r))
    read_payload(r, m)
    m.end = r.pos


def decode(data: bytes) -> Datagram:
    """The datagram's form, addresses and messages (see the module's docstring). Never raises on bad input."""
    if len(data) < 3:
        return Datagram(-1, 0, "?", error=f"truncated: {len(data)} bytes, not a JGroups datagram")
    version = _U16.unpack_from(data, 0)[0]
    flags = data[2]
    d = Datagram(version, flags, "LIST" if flags & LIST else "SINGLE")
    if not VERSION_MIN <= version < VERSION_END:
        d.error = f"version {version_name(version)} (0x{version:04x}), not JGroups 5.3.8 to 5.x"
        return d
    r = Reader(data, 3)
    try:
        if not flags & LIST:
            _message(r, None, None, d.messages)
        else:
            d.dest = r.address()
            d.src = r.address()
            n = r.i16()
            d.cluster = r.raw(n).decode("latin-1") if n >= 0 else None
            d.count_at = r.pos
            d.count = r.i32()
            if d.count < 0 or d.count > len(data):
                raise CannotSkip(f"a list of {d.count} messages")
            for _ in range(d.count):
                _message(r, d.dest, d.src, d.messages)
        if r.pos != len(data):
            d.error = f"{len(data) - r.pos} bytes after the last message (offset {r.pos})"
    except CannotSkip as e:
        d.error = str(e)
    return d


def cut(data: bytes, dgram: Datagram, index: int) -> bytes:
    """The datagram without message `index` of a LIST (`dgram` is decode(data)): its bytes from its type to the next
    message's are removed and the list's count lowered by one. A SINGLE datagram is dropped whole instead (ValueError),
    as is one that could not be walked. The caller fixes the IP and UDP lengths."""
    if dgram.form != "LIST" or dgram.count_at is None or dgram.count is None:
        raise ValueError("only a LIST datagram has messages to cut; drop a SINGLE one whole")
    if not dgram.skippable:
        raise ValueError(f"this datagram cannot be walked ({dgram.error}); pass it untouched")
    m = dgram.messages[index]
    at = dgram.count_at
    return data[:at] + _I32.pack(dgram.count - 1) + data[at + 4 : m.start] + data[m.end :]


def describe(dgram: Datagram) -> str:
    """A one-line summary: "LIST mcast [GMS.VIEW NAKACK2.MSG TP] [NAKACK2.HIGHEST_SEQNO TP]"."""
    how = "mcast " if dgram.multicast else ""
    parts = [f"[{' '.join(h.key for h in m.headers)}]" for m in dgram.messages]
    tail = f" ({dgram.error})" if dgram.error else ""
    return f"{dgram.form} {how}{' '.join(parts)}{tail}"
