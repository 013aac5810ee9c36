"""Measures what a link between two member namespaces does to datagrams: which arrive, when, how often.

The probe uses its own ports (not the members'), so it measures the network faults alone, independently of the
protocols' retransmissions. Faults act on every packet from a source address, so the probe sees what members see.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from dataclasses import dataclass, field

from orchestration.backends.netns import NetnsCluster, in_namespace

PROBE_PORT = 7900
_HEAD = struct.Struct("!IQ")  # probe seqno, send time (ns, CLOCK_MONOTONIC: one clock for every namespace)


@dataclass
class ProbeResult:
    sent: int
    received: list[tuple[int, int]] = field(default_factory=list)  # (seqno, one-way latency ns) in arrival order
    sent_at: list[int] = field(default_factory=list)  # CLOCK_MONOTONIC ns at which datagram i was sent

    @property
    def seqnos(self) -> list[int]:
        return [s for s, _ in self.received]

    @property
    def unique(self) -> set[int]:
        return set(self.seqnos)

    @property
    def loss(self) -> float:
        return 1.0 - len(self.unique) / self.sent if self.sent else 0.0

    def latencies_ms(self) -> list[float]:
        return sorted(lat / 1e6 for _, lat in self.received)


def probe(
    cluster: NetnsCluster,
    src: str,
    dst: str,
    n: int,
    *,
    multicast: bool = False,
    payload: bytes = b"",
    messages: list[bytes] | None = None,
    rate: float = 5000.0,
    quiet: float = 0.5,
    port: int = PROBE_PORT,
) -> ProbeResult:
    """Sends n datagrams from src to dst (or to the cluster's group, joined by dst) at `rate`/s and collects what
    dst receives until `quiet` seconds pass without a new one. `messages` (raw datagrams) replaces the probe's own
    numbered datagrams: each is then sent as is and reported by its index when it arrives unchanged."""
    s_ep, d_ep = cluster.members[src], cluster.members[dst]
    group = cluster._group
    with in_namespace(d_ep.netns or cluster.member_ns(dst)):
        rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        if multicast:
            rx.bind((group, port))
            mreq = socket.inet_aton(group) + socket.inet_aton(d_ep.ip)
            rx.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
        else:
            rx.bind((d_ep.ip, port))
    with in_namespace(s_ep.netns or cluster.member_ns(src)):
        tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        if multicast:
            tx.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(s_ep.ip))
            tx.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 0)
    target = (group if multicast else d_ep.ip, port)
    total = len(messages) if messages is not None else n
    result = ProbeResult(total)
    index = {m: i for i, m in enumerate(messages)} if messages is not None else {}
    last_arrival = [time.monotonic()]

    def receive() -> None:
        rx.settimeout(0.05)
        while True:
            try:
                data = rx.recv(65535)
            except TimeoutError:
                if time.monotonic() - last_arrival[0] > quiet:
                    return
                continue
            now = time.monotonic_ns()
            last_arrival[0] = time.monotonic()
            if messages is not None:
                result.received.append((index.get(data, -1), 0))
            else:
                seq, sent_at = _HEAD.unpack_from(data)
                result.received.append((seq, now - sent_at))

    with rx, tx:
        thread = threading.Thread(target=receive, daemon=True)
        thread.start()
        start = time.monotonic()
        for i in range(total):
            while (ahead := start + i / rate - time.monotonic()) > 0:
                time.sleep(ahead)  # pacing the sender, not waiting for a result
            sent_at = time.monotonic_ns()
            data = messages[i] if messages is not None else _HEAD.pack(i, sent_at) + payload
            result.sent_at.append(sent_at)
            tx.sendto(data, target)
            last_arrival[0] = max(last_arrival[0], time.monotonic())
        thread.join(timeout=quiet + 30.0)
    return result
