"""The handler's readers of a wire profile (chaos/profiles/): find a packet's messages, and rebuild the packet
without some of them. The judge (judge.py) is the same for every wire; a rule (rule.py) knows how to match one
message of its wire.

- chaosbed: spans are (start, end, proto id, type id) from node/wire.py's table (spans.py); a message is removed by
  rewriting the batch with its count fixed.
- jgroups-2.12: spans are (presence, start, end, ((header key, body offset), ...)) from the span walker
  (chaos/profiles/jgroups212_spans.py); a message of a LIST is removed by cutting its bytes, from its presence byte
  to the next (a LIST has no count); a SINGLE datagram has one message, so it is dropped whole. A datagram that
  cannot be walked (an unknown magic) is not parsed: it passes untouched and is counted (Judge.unparsed).
- jgroups-5: spans are (start, end, ((header key, body offset), ...)) from its span walker
  (chaos/profiles/jgroups5_spans.py); a message of a LIST is removed by cutting its bytes (from its type to the next
  message's) and lowering the list's count; a SINGLE datagram is dropped whole. What cannot be walked (another
  version, an unknown header or object) passes untouched and is counted (Judge.unparsed).
"""

from __future__ import annotations

import struct
from typing import Any, Protocol

from chaos.nfqueue.ipudp import cut, parse_udp, rebuild, whole_udp
from chaos.profiles import jgroups5, jgroups5_spans, jgroups212
from chaos.profiles.jgroups212 import CannotSkip
from chaos.profiles.jgroups212_spans import walk
from node import wire

_IP_UDP = 28


class Wire(Protocol):
    name: str

    def parse(self, pkt: bytes) -> tuple[Any, list[Any]] | None:
        """(what rebuild needs, the message spans), or None when the packet is not a datagram of this wire."""
        ...

    def rebuild(self, pkt: bytes, head: Any, kept: list[Any]) -> bytes:
        """The packet with only the `kept` spans (a non-empty subset of what parse found, in order)."""
        ...

    def unknown(self, pkt: bytes) -> bool:
        """Whether a packet parse refused is a datagram of this wire of a shape its walker does not know (another
        release's layout, an unknown header or object), rather than another packet (TCP, another program)."""
        ...


class ChaosbedWire:
    name = "chaosbed"

    @staticmethod
    def parse(pkt: bytes) -> tuple[Any, list[Any]] | None:
        return parse_udp(pkt)

    @staticmethod
    def rebuild(pkt: bytes, head: Any, kept: list[Any]) -> bytes:
        return rebuild(pkt, head, kept)

    @staticmethod
    def unknown(pkt: bytes) -> bool:
        return whole_udp(pkt, 2) and pkt[_IP_UDP : _IP_UDP + 2] == bytes((wire.MAGIC, wire.WIRE_VERSION))


class JGroups212Wire:
    name = "jgroups-2.12"

    @staticmethod
    def parse(pkt: bytes) -> tuple[Any, list[Any]] | None:
        if not whole_udp(pkt, 4):
            return None
        try:
            spans = walk(pkt, _IP_UDP)[1]
        except CannotSkip:
            return None
        return spans, spans

    @staticmethod
    def rebuild(pkt: bytes, head: Any, kept: list[Any]) -> bytes:
        keep = {id(sp) for sp in kept}
        gone = [(sp[0], sp[2]) for sp in head if id(sp) not in keep]
        if any(start is None for start, _ in gone):
            raise ValueError("a SINGLE datagram's message cannot be cut out: drop the datagram")
        return cut(pkt, gone)

    @staticmethod
    def unknown(pkt: bytes) -> bool:
        return whole_udp(pkt, 2) and pkt[_IP_UDP : _IP_UDP + 2] == jgroups212.VERSION.to_bytes(2, "big")


_COUNT = struct.Struct("!i")


class JGroups5Wire:
    name = "jgroups-5"

    @staticmethod
    def parse(pkt: bytes) -> tuple[Any, list[Any]] | None:
        if not whole_udp(pkt, 5):
            return None
        try:
            count_at, spans = jgroups5_spans.walk(pkt, _IP_UDP)
        except jgroups5.CannotSkip:
            return None
        return (count_at, spans), spans

    @staticmethod
    def rebuild(pkt: bytes, head: Any, kept: list[Any]) -> bytes:
        count_at, spans = head
        if count_at is None:
            raise ValueError("a SINGLE datagram's message cannot be cut out: drop the datagram")
        keep = {id(sp) for sp in kept}
        gone = [(sp[0], sp[1]) for sp in spans if id(sp) not in keep]
        counted = pkt[:count_at] + _COUNT.pack(len(kept)) + pkt[count_at + 4 :]
        return cut(counted, gone)

    @staticmethod
    def unknown(pkt: bytes) -> bool:
        return whole_udp(pkt, 2) and pkt[_IP_UDP] >> 3 == jgroups5.MAJOR


WIRES: dict[str, Wire] = {w.name: w for w in (ChaosbedWire(), JGroups212Wire(), JGroups5Wire())}
