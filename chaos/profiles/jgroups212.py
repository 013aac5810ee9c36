"""JGroups 2.12.2's UDP wire format: a decoder driven by one header table, and the span walker that protocol-aware
faults need (where each message and each header body starts and ends, and how to cut one message out of a bundle).

Facts (docs/foreign/jgroups.md; the jar's writeTo methods; checked against the jar's own reader on the golden
datagrams of tests/fixtures/jgroups212/). All integers are big-endian; a bool is one byte.

    datagram   version u16 (0x1302) | flags u8 (LIST 1, MULTICAST 2, OOB 4) | SINGLE: one message with its addresses
               LIST: dest address | src address | (presence byte 1, message without dest [and src]) ... | byte 0
               (a LIST has no count: its messages end at a presence byte 0)
    message    leading u8 (DEST_SET 1, SRC_SET 2, BUF_SET 4) | flags u8 | [dest] | [src] | [length i32, payload]
               | nhdrs i16 | nhdrs x (protocol id i16, magic i16, body): the payload comes BEFORE the headers, and a
               body has no length: skipping a header needs its layout, which the magic number names
    address    flags u8: NULL 1 (nothing more) | UUID 2 (least i64, most i64, extra: bool [+ u16 length + bytes])
               | IP 4 (length u8 + 4/16 bytes [+ scope i32 for 16], port u16, extra as above) | 0: magic i16 + a
               class-specific body (TopologyUUID, PayloadUUID, ...: not decoded here, "cannot skip")

`decode(data)` returns a `Datagram` (form, addresses, messages, each message's headers with their fields and byte
offsets). It never raises on bad input: a datagram that cannot be walked has `error` set and `skippable` False, with
the messages decoded before the problem (an unknown magic cannot be skipped; the handler should pass such a datagram
untouched and count it). `cut(data, dgram, i)` removes message i from a LIST datagram.
"""

from __future__ import annotations

import builtins
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

VERSION = (2 << 11) | (12 << 6) | 2  # 0x1302: major 2, minor 12, micro 2
# datagram flags
LIST, MULTICAST, OOB = 0x01, 0x02, 0x04
# a message's leading byte
DEST_SET, SRC_SET, BUF_SET = 0x01, 0x02, 0x04
# an address's flags byte
ADDR_NULL, ADDR_UUID, ADDR_IP = 0x01, 0x02, 0x04


# --- the header table ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HeaderType:
    """One header class as a protocol of the stock stack writes it: the protocol's id (jg-protocol-ids.xml), the
    class's magic number (jg-magic-map.xml), the type field's kind (None: no type), the type codes' names, the fields
    each type adds (`by_type`; a type not listed writes nothing after the type, as the classes' writeTo do), and the
    fields every type writes after those (`fields`). A field is (name, kind); kinds are the codecs of `_READERS`."""

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


_UNICAST_DATA = (("seqno", "i64"), ("conn_id", "i16"), ("first", "bool"))
_FC = {1: "REPLENISH", 2: "CREDIT_REQUEST"}

HEADERS: tuple[HeaderType, ...] = (
    HeaderType("UDP", 21, 56, fields=(("cluster", "utf"),)),  # TpHeader, always the last header
    HeaderType(
        "UNICAST2",
        40,
        73,
        "u8",
        {0: "DATA", 1: "XMIT_REQ", 2: "SEND_FIRST_SEQNO", 3: "STABLE"},
        {
            0: _UNICAST_DATA,
            1: (("seqno", "i64"), ("high_seqno", "i64")),
            2: (("seqno", "i64"),),
            3: (("seqno", "i64"), ("high_seqno", "i64")),
        },
    ),
    HeaderType(
        "UNICAST",
        12,
        21,
        "u8",
        {0: "DATA", 1: "ACK", 2: "SEND_FIRST_SEQNO"},
        {0: _UNICAST_DATA, 1: (("seqno", "i64"),)},
    ),
    HeaderType(
        "NAKACK",
        15,
        25,
        "u8",
        {1: "MSG", 2: "XMIT_REQ", 3: "XMIT_RSP"},
        {1: (("seqno", "i64"),), 2: (("range", "range?"), ("sender", "address")), 3: (("seqno", "i64"),)},
    ),
    HeaderType("STABLE", 16, 27, "i32", {1: "STABLE_GOSSIP", 2: "STABILITY"}, fields=(("digest", "digest?"),)),
    HeaderType(
        "GMS",
        14,
        24,
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
            12: "INSTALL_MERGE_VIEW_OK",
            13: "GET_DIGEST_REQ",
            14: "GET_DIGEST_RSP",
            15: "INSTALL_DIGEST",
        },
        fields=(
            ("merge_view", "bool"),
            ("view", "gms_view?"),
            ("mbr", "address"),
            ("mbrs", "addresses"),
            ("join_rsp", "join_rsp?"),
            ("digest", "digest?"),
            ("merge_id", "merge_id?"),
            ("merge_rejected", "bool"),
            ("use_flush", "bool"),
        ),
    ),
    HeaderType(
        "PING",
        6,
        13,
        "u8",
        {1: "GET_MBRS_REQ", 2: "GET_MBRS_RSP"},
        fields=(("data", "ping_data?"), ("cluster", "string"), ("view_id", "view_id?")),
    ),
    HeaderType("FD_ALL", 29, 61),  # heartbeat: no body
    HeaderType(
        "FD",
        2,
        3,
        "u8",
        {0: "HEARTBEAT", 1: "HEARTBEAT_ACK", 2: "SUSPECT"},
        fields=(("mbrs", "addresses"), ("from", "address")),
    ),
    HeaderType(
        "FD_SOCK",
        3,
        6,
        "u8",
        {10: "SUSPECT", 11: "WHO_HAS_SOCK", 12: "I_HAVE_SOCK", 13: "GET_CACHE", 14: "GET_CACHE_RSP"},
        fields=(("mbr", "address"), ("sock_addr", "ip_address?"), ("cache", "sock_cache"), ("mbrs", "addresses32")),
    ),
    HeaderType("VERIFY_SUSPECT", 13, 22, "i16", {1: "ARE_YOU_DEAD", 2: "I_AM_NOT_DEAD"}, fields=(("from", "address"),)),
    HeaderType("UFC", 45, 54, "u8", _FC),  # FcHeader: only on credit messages
    HeaderType("MFC", 44, 54, "u8", _FC),
    HeaderType("FRAG2", 5, 7, fields=(("id", "i64"), ("frag_id", "i32"), ("num_frags", "i32"))),
    HeaderType(
        "STATE_TRANSFER",
        17,
        28,
        "u8",
        {1: "STATE_REQ", 2: "STATE_RSP"},
        fields=(("id", "i64"), ("sender", "address"), ("digest", "digest?"), ("state_id", "string")),
    ),
)
BY_PROTOCOL: dict[str, HeaderType] = {h.protocol: h for h in HEADERS}
BY_ID: dict[int, HeaderType] = {h.id: h for h in HEADERS}
BY_MAGIC: dict[int, HeaderType] = {}  # the layout: a magic names a header class, several protocols may share one
for _h in HEADERS:
    BY_MAGIC.setdefault(_h.magic, _h)
# the layouts of one magic agree (UFC and MFC share FcHeader)
assert all(BY_MAGIC[h.magic].by_type == h.by_type and BY_MAGIC[h.magic].fields == h.fields for h in HEADERS)


# --- decoded values ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Uuid:
    """org.jgroups.util.UUID (written least significant half first)."""

    most: int
    least: int
    extra: bytes | None = None

    def __str__(self) -> str:
        v = ((self.most & (2**64 - 1)) << 64) | (self.least & (2**64 - 1))
        h = f"{v:032x}"
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


@dataclass(frozen=True, slots=True)
class IpAddr:
    """org.jgroups.stack.IpAddress."""

    ip: str | None
    port: int
    extra: bytes | None = None


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
        """ "UNICAST2.DATA", "FD_ALL", ...: how rules name it."""
        return f"{self.protocol}.{self.type_name}" if self.type_name else self.protocol


@dataclass(slots=True)
class Message:
    """One message: `start` is the offset of its leading byte, `end` the first byte after its last header; in a LIST
    `presence` is the offset of its presence byte (start - 1), and the span a cut removes is [presence, end).
    `dest` and `src` are the message's effective addresses (a LIST's own for those the message leaves out);
    `payload` is (offset, length), or None without a payload."""

    start: int
    end: int
    presence: int | None
    leading: int
    flags: int
    dest: Address
    src: Address
    payload: tuple[int, int] | None
    headers: list[Header]

    def header(self, protocol: str) -> Header | None:
        for h in self.headers:
            if h.protocol == protocol:
                return h
        return None

    def payload_bytes(self, data: bytes) -> bytes | None:
        return None if self.payload is None else data[self.payload[0] : self.payload[0] + self.payload[1]]

    def msg_id(self, data: bytes) -> str | None:
        """chaosbed's msg_id: the payload up to its first NUL byte (node/payload.py), or None."""
        p = self.payload_bytes(data)
        if not p:
            return None
        end = p.find(b"\0")
        if end <= 0:
            return None
        try:
            return p[:end].decode()
        except UnicodeDecodeError:
            return None


@dataclass(slots=True)
class Datagram:
    """A decoded datagram. `form` is SINGLE or LIST; `dest`/`src` are a LIST's (None for SINGLE). `error` says why
    the walk stopped (None: every byte accounted for); `skippable` is False when the datagram cannot be walked (an
    unknown header magic or address class, a truncated or malformed datagram), so it must be passed untouched."""

    version: int
    flags: int
    form: str
    dest: Address = None
    src: Address = None
    messages: list[Message] = field(default_factory=list)
    error: str | None = None

    @property
    def skippable(self) -> bool:
        return self.error is None

    @property
    def multicast(self) -> bool:
        return bool(self.flags & MULTICAST)

    @property
    def oob(self) -> bool:
        return bool(self.flags & OOB)


class CannotSkip(Exception):
    """Inside the walker only: a part whose length cannot be known (decode() turns it into Datagram.error)."""


# --- the walker ------------------------------------------------------------------------------------------------------

_I16, _U16, _I32, _I64 = struct.Struct("!h"), struct.Struct("!H"), struct.Struct("!i"), struct.Struct("!q")


class _Reader:
    __slots__ = ("data", "end", "pos")

    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data)

    def need(self, n: int) -> None:
        if self.pos + n > self.end:
            raise CannotSkip(f"truncated at offset {self.pos} (needs {n} more bytes, has {self.end - self.pos})")

    def u8(self) -> int:
        self.need(1)
        v = self.data[self.pos]
        self.pos += 1
        return v

    def bool(self) -> bool:
        return self.u8() != 0

    def i16(self) -> int:
        self.need(2)
        v = _I16.unpack_from(self.data, self.pos)[0]
        self.pos += 2
        return v

    def u16(self) -> int:
        self.need(2)
        v = _U16.unpack_from(self.data, self.pos)[0]
        self.pos += 2
        return v

    def i32(self) -> int:
        self.need(4)
        v = _I32.unpack_from(self.data, self.pos)[0]
        self.pos += 4
        return v

    def i64(self) -> int:
        self.need(8)
        v = _I64.unpack_from(self.data, self.pos)[0]
        self.pos += 8
        return v

    def raw(self, n: int) -> bytes:
        if n < 0:
            raise CannotSkip(f"negative length {n} at offset {self.pos}")
        self.need(n)
        v = bytes(self.data[self.pos : self.pos + n])
        self.pos += n
        return v

    def utf(self) -> str:
        """DataOutputStream.writeUTF: u16 length + modified UTF-8 (plain UTF-8 for the strings JGroups sends)."""
        return self.raw(self.u16()).decode("utf-8", "replace")

    def string(self) -> str | None:
        """Util.writeString: a presence byte, then writeUTF."""
        return self.utf() if self.u8() else None

    def extra(self) -> bytes | None:
        return self.raw(self.u16()) if self.bool() else None

    def address(self) -> Address:
        at = self.pos
        flags = self.u8()
        if flags & ADDR_NULL:
            return None
        if flags & ADDR_UUID:
            least = self.i64()
            most = self.i64()
            return Uuid(most, least, self.extra())
        if flags & ADDR_IP:
            return self.ip_address()
        magic = self.i16()
        raise CannotSkip(f"cannot skip: address class with magic {magic} at offset {at} (only UUID and IpAddress)")

    def ip_address(self) -> IpAddr:
        n = self.u8()
        ip = None
        if n:
            b = self.raw(n)
            if n == 16:
                self.i32()  # scope id
                ip = ":".join(f"{b[i]:02x}{b[i + 1]:02x}" for i in range(0, 16, 2))
            else:
                ip = ".".join(str(x) for x in b)
        port = self.u16()
        return IpAddr(ip, port, self.extra())

    def addresses(self) -> list[Address] | None:
        """Util.writeAddresses: i16 count (-1: null) + addresses."""
        n = self.i16()
        return None if n < 0 else [self.address() for _ in range(n)]

    def view_id(self) -> dict[str, Any]:
        return {"coord": self.address(), "id": self.i64()}

    def view(self, merge: builtins.bool) -> dict[str, Any]:  # builtins: this class has a method bool
        """View.writeTo (and MergeView's: the view, then i16 count + (isMerge bool + View) per subgroup)."""
        v: dict[str, Any] = {"view_id": self.view_id() if self.bool() else None, "members": self.addresses()}
        n = self.u16()
        v["payload"] = self.raw(n) if n else None
        if merge:
            count = self.i16()
            v["subgroups"] = [self.view(self.bool()) for _ in range(max(count, 0))]
        return v

    def digest(self) -> list[dict[str, Any]]:
        """Digest: i16 count + (member, low, highest delivered, highest received)."""
        entries = []
        for _ in range(self.i16()):
            member = self.address()
            low, delivered, received = self.i64(), self.i64(), self.i64()
            entries.append({"member": member, "low": low, "highest_delivered": delivered, "highest_received": received})
        return entries


def _join_rsp(r: _Reader) -> dict[str, Any]:
    """JoinRsp: streamable View, streamable Digest, Util.writeString fail reason."""
    view = r.view(False) if r.bool() else None
    digest = r.digest() if r.bool() else None
    return {"view": view, "digest": digest, "fail_reason": r.string()}


def _ping_data(r: _Reader) -> dict[str, Any]:
    """PingData: own address, Util.writeView (present, isMerge, view), Util.writeViewId, is_server, Util.writeString
    logical name, Util.writeAddresses physical addresses."""
    own = r.address()
    view = r.view(r.bool()) if r.bool() else None
    view_id = r.view_id() if r.bool() else None
    is_server = r.bool()
    name = r.string()
    return {
        "own_addr": own,
        "view": view,
        "view_id": view_id,
        "is_server": is_server,
        "logical_name": name,
        "physical_addrs": r.addresses(),
    }


_Fields = dict[str, Any]
# a field kind's codec: (reader, the fields decoded so far) -> value. "x?" kinds are streamable (a presence bool).
_READERS: dict[str, Callable[[_Reader, _Fields], Any]] = {
    "u8": lambda r, f: r.u8(),
    "bool": lambda r, f: r.bool(),
    "i16": lambda r, f: r.i16(),
    "i32": lambda r, f: r.i32(),
    "i64": lambda r, f: r.i64(),
    "utf": lambda r, f: r.utf(),
    "string": lambda r, f: r.string(),
    "address": lambda r, f: r.address(),
    "addresses": lambda r, f: r.addresses(),
    "addresses32": lambda r, f: [r.address() for _ in range(max(r.i32(), 0))],
    "range?": lambda r, f: {"low": r.i64(), "high": r.i64()} if r.bool() else None,
    "digest?": lambda r, f: r.digest() if r.bool() else None,
    "view_id?": lambda r, f: r.view_id() if r.bool() else None,
    "ip_address?": lambda r, f: r.ip_address() if r.bool() else None,
    # GMS: a View, or a MergeView when the header's merge_view bool (written before it) says so
    "gms_view?": lambda r, f: r.view(f.get("merge_view", False)) if r.bool() else None,
    "join_rsp?": lambda r, f: _join_rsp(r) if r.bool() else None,
    "merge_id?": lambda r, f: {"initiator": r.address(), "id": r.i32()} if r.bool() else None,
    "ping_data?": lambda r, f: _ping_data(r) if r.bool() else None,
    # FD_SOCK's cache: i32 count + (member address, streamable IpAddress)
    "sock_cache": lambda r, f: [(r.address(), r.ip_address() if r.bool() else None) for _ in range(max(r.i32(), 0))],
}
_TYPE_READERS: dict[str, Callable[[_Reader], int]] = {"u8": _Reader.u8, "i16": _Reader.i16, "i32": _Reader.i32}
assert {kind for h in HEADERS for fs in (h.fields, *h.by_type.values()) for _, kind in fs} <= set(_READERS)


def _header(r: _Reader) -> Header:
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
    fields: _Fields = {}
    if code is not None:
        for name, kind in layout.by_type.get(code, ()):
            fields[name] = _READERS[kind](r, fields)
    for name, kind in layout.fields:
        fields[name] = _READERS[kind](r, fields)
    type_name = layout.types.get(code) if code is not None else None
    return Header(protocol, pid, magic, code, type_name, start, body, r.pos, fields)


def header_end(data: bytes, pos: int) -> int:
    """Where the header that starts at data[pos] ends (CannotSkip if it cannot be walked): the span walker's
    fallback for headers with nested, variable-size bodies."""
    return _header(_Reader(data, pos)).end


def address_end(data: bytes, pos: int) -> int:
    """Where the address that starts at data[pos] ends (CannotSkip if it cannot be walked)."""
    r = _Reader(data, pos)
    r.address()
    return r.pos


def _message(r: _Reader, presence: int | None, dest: Address, src: Address, out: list[Message]) -> None:
    start = r.pos
    leading = r.u8()
    flags = r.u8()
    if leading & DEST_SET:
        dest = r.address()
    if leading & SRC_SET:
        src = r.address()
    payload = None
    if leading & BUF_SET:
        n = r.i32()
        r.need(max(n, 0))
        if n < 0:
            raise CannotSkip(f"negative payload length {n} at offset {r.pos - 4}")
        payload = (r.pos, n)
        r.pos += n
    m = Message(start, start, presence, leading, flags, dest, src, payload, [])
    out.append(m)  # visible, with what was read, if a header cannot be skipped
    for _ in range(r.i16()):
        m.headers.append(_header(r))
    m.end = r.pos


def decode(data: bytes) -> Datagram:
    """The datagram's form, addresses and messages (see the module's docstring). Never raises on bad input."""
    if len(data) < 3:
        return Datagram(-1, 0, "?", error=f"truncated: {len(data)} bytes, not a JGroups datagram")
    version = _U16.unpack_from(data, 0)[0]
    flags = data[2]
    d = Datagram(version, flags, "LIST" if flags & LIST else "SINGLE")
    if version != VERSION:
        d.error = f"version 0x{version:04x}, not JGroups 2.12 (0x{VERSION:04x})"
        return d
    r = _Reader(data, 3)
    try:
        if not flags & LIST:
            _message(r, None, None, None, d.messages)
        else:
            d.dest = r.address()
            d.src = r.address()
            while True:
                presence = r.pos
                if not r.bool():
                    break
                _message(r, presence, d.dest, d.src, d.messages)
        if r.pos != len(data):
            d.error = f"{len(data) - r.pos} bytes after the last message (offset {r.pos})"
    except CannotSkip as e:
        d.error = str(e)
    return d


Span = tuple[int, int, list[tuple[str, int, int]]]  # (start, end, [(header key, body offset, header end), ...])


def spans(data: bytes) -> tuple[Datagram, list[Span]]:
    """The span walker: per message its (start, end) and per header (key, body offset, end), e.g.
    (42, 157, [("NAKACK.MSG", 133, 142), ("UDP", 146, 157)]). A message matches a rule if any of its headers does."""
    d = decode(data)
    return d, [(m.start, m.end, [(h.key, h.body, h.end) for h in m.headers]) for m in d.messages]


def cut(data: bytes, dgram: Datagram, index: int) -> bytes:
    """The datagram without message `index` of a LIST (`dgram` is decode(data)): its bytes from its presence byte
    to the next presence byte are removed; a LIST has no count to fix. A SINGLE datagram is dropped whole instead
    (ValueError), as is one that could not be walked. The caller fixes the IP and UDP lengths."""
    if dgram.form != "LIST":
        raise ValueError("only a LIST datagram has messages to cut; drop a SINGLE one whole")
    if not dgram.skippable:
        raise ValueError(f"this datagram cannot be walked ({dgram.error}); pass it untouched")
    m = dgram.messages[index]
    assert m.presence is not None
    return data[: m.presence] + data[m.end :]


def describe(dgram: Datagram) -> str:
    """A one-line summary: "LIST mcast [GMS.VIEW NAKACK.MSG UDP] [NAKACK.MSG UDP]"."""
    how = ("mcast " if dgram.multicast else "") + ("oob " if dgram.oob else "")
    parts = [f"[{' '.join(h.key for h in m.headers)}]" for m in dgram.messages]
    tail = f" ({dgram.error})" if dgram.error else ""
    return f"{dgram.form} {how}{' '.join(parts)}{tail}"
