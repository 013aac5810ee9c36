"""The NFQUEUE handler with a real kernel queue: two namespaces <label>-a and <label>-b joined by a veth pair, the
handler in b judging what a sends to b. Everything created here is removed after each test, and checked to be gone."""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import secrets
import socket
import statistics
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from chaos.nfqueue import DUP_MARK, HandlerProcess
from node import wire
from orchestration.backends.netns import in_namespace, list_namespaces, veth_pair
from orchestration.cluster import new_label
from orchestration.host.processes import alive
from tests.clusters import chaos_tests

pytestmark = chaos_tests(nfqueue=True)

PORT = 7800
ACK = wire.header_class("UNICAST3", "ACK")
DATA = wire.header_class("UNICAST3", "DATA")
STAMP = struct.Struct("!dI")  # send time (time.monotonic, one clock for every namespace), index


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {proc.stderr.strip()}")
    return proc


def wait_for(cond: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.01)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@dataclass
class Receiver:
    """A UDP socket in ns b read by a thread: (receive time, datagram) pairs."""

    sock: socket.socket
    got: list[tuple[float, bytes]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self) -> Receiver:
        self.sock.settimeout(0.05)
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()
        return self

    def _loop(self) -> None:
        deadline = time.monotonic() + 120  # bounded even if nobody stops us
        while not self.stop.is_set() and time.monotonic() < deadline:
            with contextlib.suppress(TimeoutError, OSError):
                data = self.sock.recv(70000)
                self.got.append((time.monotonic(), data))

    def close(self) -> None:
        self.stop.set()
        if self.thread:
            self.thread.join(5)
        self.sock.close()

    def messages(self) -> list[list[Any]]:
        return [wire.decode_datagram(d).messages for _, d in self.got]


@dataclass
class Pair:
    label: str
    ns_a: str
    ns_b: str
    ip_a: str
    ip_b: str
    sock_path: str
    handler: HandlerProcess | None = None
    receivers: list[Receiver] = field(default_factory=list)

    def iptables_b(self, *rule: str) -> None:
        run("ip", "netns", "exec", self.ns_b, "iptables", *rule)

    def queue_from_a(self) -> None:
        self.iptables_b(
            "-A", "INPUT", "-s", self.ip_a, "-p", "udp", "-j", "NFQUEUE", "--queue-num", "0", "--queue-bypass"
        )

    def start_handler(self, **kw: Any) -> HandlerProcess:
        self.handler = HandlerProcess.start(self.ns_b, 0, self.sock_path, tag=self.label, local_ip=self.ip_b, **kw)
        return self.handler

    def receiver(self, port: int = PORT, group: str | None = None) -> Receiver:
        with in_namespace(self.ns_b):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)  # SO_RCVBUFFORCE: nothing lost in the receiver
            if group:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind((group, port))
                mreq = socket.inet_aton(group) + socket.inet_aton(self.ip_b)
                s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
            else:
                s.bind((self.ip_b, port))
        r = Receiver(s).start()
        self.receivers.append(r)
        return r

    def sender(self) -> socket.socket:
        with in_namespace(self.ns_a):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
            s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(self.ip_a))
        return s

    def stats(self) -> dict[str, Any]:
        assert self.handler is not None
        return self.handler.stats()


def stamped(i: int, *msgs: Any, dest: str = "B:1") -> bytes:
    return wire.encode_datagram("t", "A:1", dest, list(msgs))


def stamp_payload(i: int) -> bytes:
    return STAMP.pack(time.monotonic(), i)


@pytest.fixture
def pair() -> Iterator[Pair]:
    label = new_label()
    sock_path = f"/tmp/{label}-b.nfq.sock"
    with veth_pair(label) as link:
        p = Pair(label, link.ns_a, link.ns_b, link.ip_a, link.ip_b, sock_path)
        try:
            yield p
        finally:
            for r in p.receivers:
                r.close()
            pid = p.handler.pid if p.handler else None
            if p.handler is not None:
                p.handler.terminate()
            run("ip", "netns", "exec", p.ns_b, "iptables", "-F", "INPUT", check=False)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p.sock_path)
    assert not [ns for ns in list_namespaces() if ns.startswith(label)], "namespaces left behind"
    if pid is not None:
        assert not alive(pid, label), "handler process left behind"
    assert not os.path.exists(p.sock_path), "control socket left behind"


def send_all(sock: socket.socket, dst: tuple[str, int], datagrams: list[bytes], pace: float = 0.0) -> None:
    for i, d in enumerate(datagrams):
        sock.sendto(d, dst)
        if pace:
            time.sleep(pace)
        elif i % 200 == 199:
            time.sleep(0.002)  # let the receiver keep up; the kernel queue holds 4096 anyway


def test_handler_starts_reports_ready_and_rejects_bad_requests(pair: Pair) -> None:
    h = pair.start_handler()
    assert h.ready["ready"] is True and h.ready["queue"] == 0 and h.ready["pid"] == h.pid
    assert h.ready["fail_open"] is True
    assert alive(h.pid, pair.label)  # --tag puts the label in its command line
    assert h.request({"cmd": "nope"})["ok"] is False
    bad = h.request({"cmd": "rules", "rules": [{"id": "r9", "action": "drop", "probability": 3}]})
    assert bad["ok"] is False and "r9" in bad["error"] and "probability" in bad["error"]
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(pair.sock_path)
        s.sendall(b"{not json\n[1, 2]\n")
        replies = wait_for(lambda: s.recv(65536), 5, "replies")
        while replies.count(b"\n") < 2:
            replies += s.recv(65536)
    assert [b'"ok": false' in line for line in replies.splitlines()] == [True, True]
    stats = h.stats()
    assert stats["queue"]["queue_number"] == 0 and stats["packets"] == 0
    # a second handler on the same queue says what is wrong and exits 2
    with pytest.raises(OSError, match="already bound"):
        HandlerProcess.start(pair.ns_b, 0, pair.sock_path + "2", tag=pair.label)
    assert h.alive()


def test_count_one_drop_removes_exactly_one_message(pair: Pair) -> None:
    h = pair.start_handler()
    h.set_rules(
        [{"id": "ack50", "sources": [pair.ip_a], "match": "UNICAST3.ACK(seqno=50)", "action": "drop", "count": 1}]
    )
    pair.queue_from_a()
    rx = pair.receiver()
    n = 2000
    datagrams = [
        stamped(i, ACK(i // 2 % 100, 1, i) if i % 2 == 0 else DATA(i, 1, False, stamp_payload(i))) for i in range(n)
    ]
    send_all(pair.sender(), (pair.ip_b, PORT), datagrams)
    wait_for(lambda: len(rx.got) >= n - 1 and pair.stats()["packets"] >= n, 20, f"{n - 1} datagrams")
    got = [d for _, d in rx.got]
    missing = [i for i, d in enumerate(datagrams) if d not in set(got)]
    assert missing == [100]  # the first ACK(seqno=50): datagram 100
    assert len(got) == n - 1
    stats = pair.stats()
    assert stats["rules"]["ack50"] == {"matched": 10, "dropped": 1, "delayed": 0, "duplicated": 0, "reordered": 0}
    assert (stats["packets"], stats["accepted"], stats["dropped"], stats["unparsed"]) == (n, n - 1, 1, 0)
    assert stats["queue"]["queue_dropped"] == 0 and stats["queue"]["queue_user_dropped"] == 0


def test_strip_inside_a_batch(pair: Pair) -> None:
    h = pair.start_handler()
    h.set_rules([{"id": "s", "sources": [pair.ip_a], "match": "UNICAST3.ACK(seqno=3)", "action": "drop"}])
    pair.queue_from_a()
    rx = pair.receiver()
    batches = [stamped(i, *[ACK(s, i, 7, b"p%d" % s) for s in range(1, 6)]) for i in range(20)]
    only_matches = stamped(99, ACK(3, 1, 1), ACK(3, 2, 2))
    tail = stamped(100, DATA(1, 1, False))
    send_all(pair.sender(), (pair.ip_b, PORT), [*batches, only_matches, tail])
    wait_for(lambda: len(rx.got) >= 21, 10, "21 datagrams")
    msgs = rx.messages()
    assert len(msgs) == 21 and msgs[-1] == [DATA(1, 1, False)]
    for i, batch in enumerate(msgs[:20]):
        assert batch == [ACK(s, i, 7, b"p%d" % s) for s in (1, 2, 4, 5)]
    stats = pair.stats()
    assert stats["rewritten"] == 20 and stats["dropped"] == 1 and stats["rules"]["s"]["dropped"] == 22


def latencies(rx: Receiver, first: bool) -> list[float]:
    """One-way latencies in ms of the received DATA messages with this `first` flag."""
    out = []
    for t, d in rx.got:
        msg = wire.decode_datagram(d).messages[0]
        if msg.first == first:
            out.append((t - STAMP.unpack(msg.payload[: STAMP.size])[0]) * 1000)
    return out


def test_delay_adds_the_delay_and_loses_nothing(pair: Pair) -> None:
    # Every other datagram is delayed (first=1); the others (first=0) take the same path undelayed at the same
    # time, so they are the baseline under the same load: a late receiver thread shifts both groups alike. The
    # handler's release can be late too (its thread waits for a core: up to ~20 ms on 2 busy cores), never early;
    # a delay of 200 ms keeps that lateness well inside the bound, which still fails a delay doubled or ignored.
    h = pair.start_handler()
    h.set_rules(
        [{"id": "d", "sources": [pair.ip_a], "match": "UNICAST3.DATA(first=1)", "action": "delay", "delay_ms": 200}]
    )
    pair.queue_from_a()
    rx = pair.receiver()
    n = 300
    datagrams = [stamped(i, DATA(i, 1, i % 2 == 1, stamp_payload(i))) for i in range(n)]
    send_all(pair.sender(), (pair.ip_b, PORT), datagrams, pace=0.001)
    wait_for(lambda: len(rx.got) >= n, 10, "all datagrams")
    delayed, base = latencies(rx, True), latencies(rx, False)
    added = statistics.median(delayed) - statistics.median(base)
    assert 190 <= added <= 300, f"median added delay {added:.1f} ms (baseline median {statistics.median(base):.2f} ms)"
    assert min(delayed) >= 199.9  # never released early
    assert sorted(m[0].seqno for m in rx.messages()) == list(range(n))  # nothing lost, nothing doubled
    stats = pair.stats()
    assert stats["rules"]["d"]["delayed"] == n // 2 and stats["held"] == 0 and stats["max_held"] >= 10


def test_duplicate_gives_exactly_two_copies(pair: Pair) -> None:
    h = pair.start_handler()
    h.set_rules([{"id": "dup", "sources": [pair.ip_a], "match": "UNICAST3.DATA(seqno=10..19)", "action": "duplicate"}])
    pair.queue_from_a()
    # copies come back over lo: queue those too, so a copy would be judged again if the mark did not stop it
    pair.iptables_b("-A", "INPUT", "-i", "lo", "-p", "udp", "-j", "NFQUEUE", "--queue-num", "0", "--queue-bypass")
    rx = pair.receiver()
    n = 100
    send_all(pair.sender(), (pair.ip_b, PORT), [stamped(i, DATA(i, 1, False)) for i in range(n)])
    wait_for(lambda: len(rx.got) >= n + 10, 10, "originals and copies")
    wait_for(lambda: pair.stats()["marked_copies"] >= 10, 5, "copies seen by the handler")
    seqnos = [m[0].seqno for m in rx.messages()]
    assert sorted(seqnos) == sorted([*range(n), *range(10, 20)])
    stats = pair.stats()
    assert stats["rules"]["dup"]["duplicated"] == 10 and stats["duplicates_sent"] == 10
    assert stats["marked_copies"] == 10  # copies were accepted untouched (DUP_MARK)
    # a rule with no sources would match the copies too: the mark keeps them from being duplicated again
    h.set_rules([{"id": "all", "match": "UNICAST3.DATA(seqno=1000)", "action": "duplicate"}])
    rx.got.clear()
    send_all(pair.sender(), (pair.ip_b, PORT), [stamped(1000, DATA(1000, 1, False))])
    wait_for(lambda: len(rx.got) >= 2 and pair.stats()["marked_copies"] >= 11, 5, "one copy")
    assert pair.stats()["duplicates_sent"] == 11 and DUP_MARK


def test_duplicate_of_a_multicast_stays_in_the_namespace(pair: Pair) -> None:
    group = f"239.77.{secrets.randbelow(250)}.{1 + secrets.randbelow(250)}"
    h = pair.start_handler()
    h.set_rules([{"id": "dup", "sources": [pair.ip_a], "match": "UNICAST3.DATA()", "action": "duplicate"}])
    pair.queue_from_a()
    rx = pair.receiver(group=group)
    with in_namespace(pair.ns_a):  # a listens too: the copy must not reach it
        a_rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        a_rx.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        a_rx.bind((group, PORT))
        a_rx.setsockopt(
            socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, socket.inet_aton(group) + socket.inet_aton(pair.ip_a)
        )
    a_recv = Receiver(a_rx).start()
    pair.receivers.append(a_recv)
    tx = pair.sender()
    tx.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 0)
    send_all(tx, (group, PORT), [stamped(i, DATA(i, 1, False), dest="") for i in range(20)])
    wait_for(lambda: len(rx.got) >= 40, 10, "multicast originals and copies")
    assert sorted(m[0].seqno for m in rx.messages()) == sorted(list(range(20)) * 2)
    assert pair.stats()["duplicates_sent"] == 20
    assert a_recv.got == []


def test_reorder_changes_the_order_but_loses_nothing(pair: Pair) -> None:
    h = pair.start_handler()
    h.set_rules([{"id": "ro", "sources": [pair.ip_a], "action": "reorder", "probability": 0.3, "seed": 5}])
    pair.queue_from_a()
    rx = pair.receiver()
    n = 300
    send_all(pair.sender(), (pair.ip_b, PORT), [stamped(i, DATA(i, 1, False)) for i in range(n)], pace=0.0005)
    wait_for(lambda: len(rx.got) >= n, 10, "all datagrams")
    seqnos = [m[0].seqno for m in rx.messages()]
    assert sorted(seqnos) == list(range(n))
    inversions = sum(1 for x, y in itertools.pairwise(seqnos) if x > y)
    stats = pair.stats()
    assert stats["rules"]["ro"]["reordered"] > 30 and inversions > 30
    assert stats["held"] == 0


@pytest.mark.parametrize("how", ["stop", "sigterm"])
def test_stopping_releases_held_packets(pair: Pair, how: str) -> None:
    h = pair.start_handler()
    h.set_rules([{"id": "hold", "sources": [pair.ip_a], "action": "delay", "delay_ms": 60_000}])
    pair.queue_from_a()
    rx = pair.receiver()
    n = 50
    send_all(pair.sender(), (pair.ip_b, PORT), [stamped(i, DATA(i, 1, False)) for i in range(n)])
    wait_for(lambda: pair.stats()["held"] == n, 10, f"{n} held packets")
    assert rx.got == []
    if how == "stop":
        final = h.stop()
        assert final["held"] == 0 and final["accepted"] == n
        assert h.proc.returncode == 0
    else:
        assert h.terminate() == 0
    wait_for(lambda: len(rx.got) >= n, 5, "released packets")
    assert sorted(m[0].seqno for m in rx.messages()) == list(range(n))
    assert not os.path.exists(pair.sock_path)
    # with the handler gone, --queue-bypass lets traffic through
    send_all(pair.sender(), (pair.ip_b, PORT), [stamped(n, DATA(n, 1, False))])
    wait_for(lambda: len(rx.got) >= n + 1, 5, "a packet after the handler stopped")


def test_tcp_is_delayed_by_a_link_rule(pair: Pair) -> None:
    h = pair.start_handler()
    pair.iptables_b("-A", "INPUT", "-s", pair.ip_a, "-j", "NFQUEUE", "--queue-num", "0", "--queue-bypass")
    h.set_rules([{"id": "slow", "sources": [pair.ip_a], "action": "delay", "delay_ms": 30}])
    with in_namespace(pair.ns_b):
        srv = socket.create_server((pair.ip_b, PORT + 1))
    with in_namespace(pair.ns_a):
        cli = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        srv.settimeout(5)
        cli.settimeout(5)
        t0 = time.monotonic()
        cli.connect((pair.ip_b, PORT + 1))
        conn, _ = srv.accept()
        with conn:
            conn.settimeout(5)
            cli.sendall(b"ping")
            assert conn.recv(4) == b"ping"
        elapsed = time.monotonic() - t0
    finally:
        cli.close()
        srv.close()
    assert elapsed >= 0.06  # SYN and the data segment each waited 30 ms in b
    assert pair.stats()["rules"]["slow"]["delayed"] >= 2


def test_the_handler_survives_garbage_traffic(pair: Pair) -> None:
    h = pair.start_handler()
    h.set_rules([{"id": "m", "sources": [pair.ip_a], "match": "UNICAST3.ACK()", "action": "drop"}])
    pair.queue_from_a()
    rx = pair.receiver()
    rng = random.Random(3)
    junk = [bytes(rng.randrange(256) for _ in range(rng.randint(1, 300))) for _ in range(200)]
    junk += [stamped(0, ACK(1, 1, 1))[: rng.randint(1, 30)] for _ in range(50)]
    send_all(pair.sender(), (pair.ip_b, PORT), [*junk, stamped(1, DATA(1, 1, False))])
    wait_for(lambda: pair.stats()["packets"] >= len(junk) + 1, 10, "all packets judged")
    wait_for(lambda: len(rx.got) >= len(junk) + 1, 10, "all packets delivered")
    stats = pair.stats()
    assert stats["unparsed"] >= len(junk) - 5 and stats["dropped"] == 0 and h.alive()


def test_a_large_bundle_is_parsed_stripped_and_duplicated_whole(pair: Pair) -> None:
    # ~55 KB: IP-fragmented on the veth, reassembled before INPUT; NetfilterQueue 1.1 would see only 4016 bytes
    h = pair.start_handler()
    h.set_rules(
        [
            {"id": "strip", "sources": [pair.ip_a], "match": "UNICAST3.DATA(seqno=250)", "action": "drop"},
            {"id": "dup", "sources": [pair.ip_a], "match": "UNICAST3.DATA(seqno=499)", "action": "duplicate"},
        ]
    )
    pair.queue_from_a()
    rx = pair.receiver()
    msgs = [DATA(s, 1, False, b"m%05d" % s + b"x" * 94) for s in range(500)]
    big = stamped(0, *msgs)
    assert 50_000 < len(big) < 60_000
    send_all(pair.sender(), (pair.ip_b, PORT), [big])
    wait_for(lambda: len(rx.got) >= 2, 10, "the stripped bundle and its copy")
    assert rx.messages() == [[m for m in msgs if m.seqno != 250]] * 2
    stats = pair.stats()
    assert stats["rewritten"] == 1 and stats["duplicates_sent"] == 1 and stats["unparsed"] == 0
