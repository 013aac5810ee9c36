"""IPv4/UDP packets as the queue hands them over: find our datagram's messages in one, and rebuild one without some
messages (lengths and IP checksum recomputed): chaosbed's own (a count to fix) or any byte ranges cut out (a
JGroups LIST, which has no count)."""

from __future__ import annotations

import struct
from collections.abc import Sequence

from chaos.nfqueue.spans import Span, message_spans
from node import wire

_IP_WORDS = struct.Struct("!10H")
_UDP = struct.Struct("!HHHH")
_IP_UDP = 28  # IPv4 header without options + UDP header

_U16 = struct.Struct("!H")


def ip_checksum(header: bytes | bytearray) -> int:
    """The IPv4 header checksum of a 20-byte header whose checksum field is zero."""
    s = sum(_IP_WORDS.unpack(header))
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def whole_udp(pkt: bytes, least: int = 6) -> bool:
    """Whether pkt is a whole IPv4/UDP packet without options carrying at least `least` bytes of UDP payload: not a
    truncated copy, not a fragment, lengths consistent."""
    n = len(pkt)
    if n < _IP_UDP + least or pkt[0] != 0x45 or pkt[9] != 17:
        return False
    return not (
        _U16.unpack_from(pkt, 2)[0] != n
        or _U16.unpack_from(pkt, 6)[0] & 0x3FFF
        or _U16.unpack_from(pkt, 24)[0] != n - 20
    )


def parse_udp(pkt: bytes) -> tuple[int, list[Span]] | None:
    """Spans (absolute in pkt) of our datagram in an IPv4/UDP packet without options, or None."""
    if not whole_udp(pkt):
        return None  # truncated copy, a fragment, or inconsistent lengths
    try:
        return message_spans(pkt, _IP_UDP)
    except wire.WireError:
        return None


def rebuild(pkt: bytes, head: int, kept: Sequence[Span]) -> bytes:
    body = b"".join([pkt[_IP_UDP : head - 2], _U16.pack(len(kept)), *[pkt[s:e] for s, e, _, _ in kept]])
    return with_udp_payload(pkt, body)


def cut(pkt: bytes, ranges: Sequence[tuple[int, int]]) -> bytes:
    """The packet without the byte ranges [start, end) (absolute, in order, inside the UDP payload)."""
    pieces, at = [], _IP_UDP
    for start, end in ranges:
        pieces.append(pkt[at:start])
        at = end
    pieces.append(pkt[at:])
    return with_udp_payload(pkt, b"".join(pieces))


def with_udp_payload(pkt: bytes, body: bytes) -> bytes:
    """The IPv4/UDP packet (no options) with another UDP payload: IP total length and checksum, UDP length fixed, UDP
    checksum 0 (none)."""
    ip = bytearray(pkt[:20])
    ip[2:4] = _U16.pack(_IP_UDP + len(body))
    ip[10:12] = b"\0\0"
    ip[10:12] = _U16.pack(ip_checksum(ip))
    sport, dport = struct.unpack_from("!HH", pkt, 20)
    return b"".join([ip, _UDP.pack(sport, dport, 8 + len(body), 0), body])


def strip_messages(ip_packet: bytes, head_len: int, keep_spans: Sequence[Span]) -> bytes:
    """The IPv4/UDP packet rebuilt with only `keep_spans` (as returned by datagram_spans of its UDP payload, in
    order): message count fixed, IP total length and header checksum recomputed, UDP length fixed, UDP checksum 0
    (none). The packet must have no IP options."""
    if ip_packet[0] != 0x45:
        raise ValueError("only IPv4 packets without options can be rewritten")
    if not keep_spans:
        raise ValueError("no message left: drop the packet instead")
    return rebuild(ip_packet, head_len + _IP_UDP, [(s + _IP_UDP, e + _IP_UDP, p, t) for s, e, p, t in keep_spans])
