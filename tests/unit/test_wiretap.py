"""chaos/wiretap.py's counting, on hand-built Ethernet frames carrying real payloads: what a member's port
receives is counted by bin, sender, receiver (`*` for multicast) and key; what the switch sends to a member, other
interfaces, later fragments and other traffic are not; what the wire cannot read is counted as unread."""

from __future__ import annotations

import json
import socket
import struct

from chaos.wire_keys import reader_for
from chaos.wiretap import PACKET_OUTGOING, TCP_KEY, Tally, ip_payload
from node import wire

PORTS = {"cb0": "A", "cb1": "B"}
IPS = {"10.1.2.10": "A", "10.1.2.11": "B"}
BIN = 100_000_000


def frame(src: str, dst: str, payload: bytes, *, proto: int = socket.IPPROTO_UDP, frag: int = 0) -> bytes:
    l4 = struct.pack("!HHHH", 7800, 7800, 8 + len(payload), 0) if proto == socket.IPPROTO_UDP else (
        struct.pack("!HHIIBBHHH", 7800, 7801, 1, 0, 5 << 4, 0x18, 100, 0, 0))  # fmt: skip
    total = 20 + len(l4) + len(payload)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, total, 1, frag, 64, proto, 0, socket.inet_aton(src),
                     socket.inet_aton(dst))  # fmt: skip
    return b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00" + ip + l4 + payload


def ack() -> bytes:
    return wire.encode_datagram("c", "A", "B", [wire.header_class("UNICAST3", "ACK")(5, 1, 0)])


def tally() -> Tally:
    read = reader_for("chaosbed")
    assert read is not None
    return Tally(PORTS, IPS, read, BIN)


def test_a_datagram_a_member_sent_is_counted_by_bin_sender_receiver_and_key() -> None:
    t = tally()
    t.frame("cb0", 3, frame("10.1.2.10", "10.1.2.11", ack()), 5 * BIN + 7)
    t.frame("cb0", 3, frame("10.1.2.10", "10.1.2.11", ack()), 5 * BIN + 9)
    t.frame("cb1", 2, frame("10.1.2.11", "239.1.2.3", ack()), 6 * BIN)
    assert t.counts == {(5, "A", "B", "UNICAST3.ACK"): 2, (6, "B", "*", "UNICAST3.ACK"): 1}
    assert (t.frames, t.read, t.unread) == (3, 3, 0)


def test_what_is_not_a_members_datagram_is_not_counted() -> None:
    t = tally()
    t.frame("cb0", PACKET_OUTGOING, frame("10.1.2.11", "10.1.2.10", ack()), 0)  # the switch forwarding to A
    t.frame("br0", 2, frame("10.1.2.10", "239.1.2.3", ack()), 0)  # another interface
    t.frame("cb0", 3, frame("10.1.2.10", "10.1.2.11", ack(), frag=100), 0)  # a later fragment
    t.frame("cb0", 3, frame("10.1.2.10", "10.9.9.9", ack()), 0)  # to nobody of the cluster
    t.frame("cb0", 3, b"\xff" * 60, 0)  # not IPv4
    t.frame("cb0", 3, frame("10.1.2.10", "10.1.2.11", b"not chaosbed's wire"), 0)
    assert t.counts == {}
    assert (t.frames, t.read, t.unread) == (4, 0, 1)  # frames the members sent: 4


def test_a_tcp_segment_with_a_payload_counts_as_tcp() -> None:
    t = tally()
    t.frame("cb1", 3, frame("10.1.2.11", "10.1.2.10", b"xyz", proto=socket.IPPROTO_TCP), BIN)
    t.frame("cb1", 3, frame("10.1.2.11", "10.1.2.10", b"", proto=socket.IPPROTO_TCP), BIN)  # a bare ACK
    assert t.counts == {(1, "B", "A", TCP_KEY): 1}


def test_ip_payload_reads_only_the_transport_payload() -> None:
    assert ip_payload(frame("10.1.2.10", "10.1.2.11", b"abc")) == (socket.IPPROTO_UDP, "10.1.2.11", b"abc")
    assert ip_payload(frame("10.1.2.10", "10.1.2.11", b"abc") + b"\0" * 10) == (socket.IPPROTO_UDP, "10.1.2.11", b"abc")
    assert ip_payload(b"\0" * 20) is None


def test_the_file_lines_end_with_the_totals() -> None:
    t = tally()
    t.frame("cb0", 3, frame("10.1.2.10", "10.1.2.11", ack()), 0)
    lines = [json.loads(x) for x in t.lines(kernel_drops=4)]
    assert lines[0] == {"bin": 0, "src": "A", "dst": "B", "key": "UNICAST3.ACK", "n": 1}
    assert lines[-1] == {"event": "end", "frames": 1, "read": 1, "unread": 0, "kernel_drops": 4, "bin_ms": 100}
