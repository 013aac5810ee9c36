"""foreign/jgroups/wire_capture.py's Frames: UDP datagrams out of captured Ethernet frames, IP fragments put together.
A last fragment can carry less than 8 bytes: it was skipped as too short for a UDP header, and its datagram never
put together (the discard bench's truth was 76 of C's multicasts short in two busy CI runs, no frame lost)."""

from __future__ import annotations

import socket
import struct

import pytest

from foreign.jgroups.wire_capture import ETH_P_IP, PACKET_OUTGOING, Frames

SRC, DST = "10.77.0.3", "228.8.8.8"
IN = ("eth0", ETH_P_IP, 2)  # (ifname, protocol, pkttype): a multicast frame arriving


def udp(payload: bytes, sport: int = 45588, dport: int = 45588) -> bytes:
    return struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload


def frames(datagram: bytes, ident: int, per_fragment: int = 1480) -> list[bytes]:
    """Ethernet frames of one IPv4 datagram, fragmented at `per_fragment` bytes (a multiple of 8)."""
    out = []
    for at in range(0, len(datagram), per_fragment):
        piece = datagram[at : at + per_fragment]
        more = at + per_fragment < len(datagram)
        flags = (0x2000 if more else 0) | (at // 8)
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(piece), ident, flags, 1, 17, 0,
                         socket.inet_aton(SRC), socket.inet_aton(DST))  # fmt: skip
        out.append(b"\x01\x00\x5e\x08\x08\x08" + b"\x02" * 6 + b"\x08\x00" + ip + piece)
    return out


@pytest.mark.parametrize("tail", [1, 4, 7, 8, 100])
def test_a_fragmented_datagram_is_put_together_whatever_its_last_fragment_carries(tail: int) -> None:
    payload = bytes(range(256)) * 6 + bytes(1480 - 8 - 1536 % 1480 + tail)  # the last fragment carries `tail` bytes
    datagram = udp(payload)
    assert len(datagram) % 1480 == tail
    f = Frames(reassemble=True)
    got = [f.datagram(frame, IN, 7) for frame in frames(datagram, ident=99)]
    assert got[:-1] == [None] * (len(got) - 1)
    assert got[-1] is not None and got[-1]["payload"] == payload and got[-1]["src_ip"] == SRC
    assert f.fragments == len(got) and not f._pieces


def test_fragments_out_of_order_and_frames_to_skip() -> None:
    payload = b"x" * 3000
    f = Frames(reassemble=True)
    parts = frames(udp(payload), ident=5)
    assert [f.datagram(p, IN, 1) for p in (parts[2], parts[0])] == [None, None]
    whole = f.datagram(parts[1], IN, 1)
    assert whole is not None and whole["payload"] == payload
    small = frames(udp(b"hi"), ident=6)[0]
    assert f.datagram(small, ("eth0", ETH_P_IP, PACKET_OUTGOING), 1) is None  # leaving: counted at its receiver
    assert f.datagram(small, ("br0", ETH_P_IP, 2), 1) is None  # the bridge's own copy
    assert f.datagram(small[:30], IN, 1) is None  # cut short
    one = f.datagram(small, IN, 1)
    assert one is not None and one["payload"] == b"hi"
    assert Frames(reassemble=False).datagram(parts[0], IN, 1) is None  # left out, only counted
