"""Faults gated by time, installed ahead of their window: the kernel's nft `meta time` bounds (CLOCK_REALTIME) and
the NFQUEUE handler's rule windows (CLOCK_MONOTONIC) switch a partition on and off at its planned instants with no
operation then. Two namespaces <label>-a and <label>-b joined by a veth; a sender in a sends a UDP datagram about
every millisecond carrying its send time, a receiver in b records what arrives.

The assertions use guard bands, not wall-clock performance: nothing sent more than GUARD before a window or more
than GUARD after it may be lost, and nothing sent from GUARD after its start to GUARD before its end may arrive.
"Sent" is an interval, not the stamp alone: a busy machine may preempt the sender between reading the clock and
sendto, or the receiver's kernel may judge the datagram later still. A datagram was judged no earlier than its stamp
and no later than its receipt (if it arrived) or the return of sendto (if it was lost: kernel rules judge it inside
sendto), so a guard band is violated only when the whole interval lies on the wrong side of it."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from chaos import kernel
from chaos.nfqueue import HandlerProcess
from orchestration.backends.netns import VethPair, in_namespace, list_namespaces, veth_pair
from orchestration.cluster import new_label
from orchestration.host.processes import alive
from tests.clusters import chaos_tests
from tests.netns.test_nfqueue_handler import Receiver

pytestmark = chaos_tests()

PORT = 7811
GUARD = 5_000_000  # ns
MS = 1_000_000  # ns
STAMP = struct.Struct("!QI")  # send time (ns, the clock the rule is gated by), index
MAX_DATAGRAMS = 5_000  # bound of the sender's loop (it stops by time long before)


@dataclass(frozen=True)
class Sent:
    """One datagram: its index, the clock before sendto (its stamp) and after sendto returned."""

    index: int
    before: int
    after: int


@dataclass
class Link:
    pair: VethPair
    label: str
    receiver: Receiver | None = None

    def listen(self) -> Receiver:
        with in_namespace(self.pair.ns_b):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)  # SO_RCVBUFFORCE: the receiver loses nothing itself
            s.bind((self.pair.ip_b, PORT))
        self.receiver = Receiver(s).start()
        return self.receiver

    def send_until(self, clock: Callable[[], int], stop_at: int) -> list[Sent]:
        """Sends a stamped datagram about every ms until clock() reaches stop_at."""
        with in_namespace(self.pair.ns_a):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sent = []
        deadline = time.monotonic() + 10
        try:
            for i in range(MAX_DATAGRAMS):
                t = clock()
                if t >= stop_at or time.monotonic() > deadline:
                    break
                s.sendto(STAMP.pack(t, i), (self.pair.ip_b, PORT))
                sent.append(Sent(i, t, clock()))
                time.sleep(0.001)
        finally:
            s.close()
        return sent

    def arrived(self, clock: Callable[[], int]) -> dict[int, int]:
        """Index -> receive time on `clock` of what arrived, once the receiver has been quiet a while (bounded)."""
        assert self.receiver is not None
        deadline = time.monotonic() + 5
        n = -1
        while time.monotonic() < deadline and n != len(self.receiver.got):
            n = len(self.receiver.got)
            time.sleep(0.2)
        offset = clock() - time.monotonic_ns()  # the receiver stamps on CLOCK_MONOTONIC
        return {STAMP.unpack(d)[1]: round(t * 1e9) + offset for t, d in self.receiver.got if len(d) == STAMP.size}


@pytest.fixture
def link() -> Iterator[Link]:
    label = new_label()
    with veth_pair(label) as pair:
        lk = Link(pair, label)
        try:
            yield lk
        finally:
            if lk.receiver is not None:
                lk.receiver.close()
    assert not [ns for ns in list_namespaces() if ns.startswith(label)], "namespaces left behind"


def check_windows(sent: list[Sent], arrived: dict[int, int], windows: list[tuple[int, int]]) -> list[int]:
    """Asserts the guard bands for each [start, end) window; returns the indexes lost."""
    lost = [d for d in sent if d.index not in arrived]
    for d in lost:  # judged somewhere in [before, after]: that interval must touch a window widened by GUARD
        assert any(d.before < end + GUARD and d.after >= start - GUARD for start, end in windows), (
            f"datagram {d.index} sent {min(abs(d.before - s) for w in windows for s in w) / MS:.1f} ms from the "
            f"nearest window bound, outside every window {windows}, was lost"
        )
    for d in sent:  # judged somewhere in [before, receipt]: that interval must leave every window narrowed by GUARD
        if d.index in arrived:
            received = arrived[d.index]
            assert not any(start + GUARD <= d.before and received < end - GUARD for start, end in windows), (
                f"datagram {d.index} sent {(d.before - windows[0][0]) / MS:.1f} ms after the first window's start "
                f"and received {(received - windows[0][0]) / MS:.1f} ms after it arrived"
            )
    for start, end in windows:  # the test saw each window and both sides of it
        inside = [d for d in sent if start + GUARD <= d.before < end - GUARD]
        assert len(inside) > 50, f"only {len(inside)} datagrams sent inside window {(start, end)}"
    assert any(d.before < windows[0][0] - GUARD for d in sent)
    assert any(d.before >= windows[-1][1] + GUARD for d in sent)
    return [d.index for d in lost]


def test_nft_time_gated_partition_and_loss_switch_at_their_instants(link: Link) -> None:
    ok, why = kernel.time_gates()
    if not ok:
        pytest.skip(f"nft time gates unavailable: {why}")
    ns_b, ip_a = link.pair.ns_b, link.pair.ip_a
    link.listen()
    # Planned before anything is installed: a partition [s1, e1) and total loss [s2, e2) from a, seen at b.
    s1 = time.time_ns() + 500 * MS
    e1, s2 = s1 + 300 * MS, s1 + 450 * MS
    e2 = s2 + 250 * MS
    rules = kernel.NamespaceRules(
        timed_blocks=[kernel.TimedBlock(ip_a, kernel.Window(s1, e1))],
        timed_losses=[kernel.TimedLoss(ip_a, 1.0, kernel.Window(s2, e2))],
    )
    try:
        kernel.apply(ns_b, rules)
        ahead = s1 - time.time_ns()
        assert ahead > 100 * MS, f"installing took too long: only {ahead / MS:.0f} ms before the window"
        sent = link.send_until(time.time_ns, e2 + 250 * MS)
        arrived = link.arrived(time.time_ns)
        counts = kernel.counters(ns_b)
    finally:
        kernel.apply(ns_b, kernel.NamespaceRules())
    assert kernel.installed(ns_b) == {}
    lost = check_windows(sent, arrived, [(s1, e1), (s2, e2)])
    in_block = [d.index for d in sent if d.index in lost and d.before < (e1 + s2) // 2]
    assert counts == {"blocked": len(in_block), "lost": len(lost) - len(in_block), "dropped": 0, "queued": 0}


def test_handler_link_drop_with_a_window_switches_at_its_instants(link: Link) -> None:
    ns_b, ip_a = link.pair.ns_b, link.pair.ip_a
    sock_path = f"/tmp/{link.label}-b.nfq.sock"
    handler: HandlerProcess | None = None
    try:
        handler = HandlerProcess.start(ns_b, kernel.QUEUE_NUM, sock_path, tag=link.label, local_ip=link.pair.ip_b)
        link.listen()
        start = time.monotonic_ns() + 1500 * MS  # room for installing on a loaded machine (CI: 477 ms)
        end = start + 400 * MS
        # A timed partition of a in the handler: a link drop rule, installed before its window, as is the queue rule.
        rule = {"id": "p", "sources": [ip_a], "match": None, "action": "drop"}
        handler.set_rules([{**rule, "active_from_ns": start, "active_until_ns": end}])
        kernel.apply(ns_b, kernel.NamespaceRules(queue_all={ip_a}))
        ahead = start - time.monotonic_ns()
        assert ahead > 100 * MS, f"installing took too long: only {ahead / MS:.0f} ms before the window"
        sent = link.send_until(time.monotonic_ns, end + 300 * MS)
        arrived = link.arrived(time.monotonic_ns)
        kernel.apply(ns_b, kernel.NamespaceRules())  # the kernel stops queueing before the handler stops
        stats = handler.stop()
    finally:
        kernel.apply(ns_b, kernel.NamespaceRules())
        if handler is not None:
            handler.terminate()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(sock_path)
    lost = check_windows(sent, arrived, [(start, end)])
    assert stats["rules"]["p"]["dropped"] == stats["rules"]["p"]["matched"] == len(lost)
    assert stats["dropped"] == len(lost) and stats["packets"] == len(sent)
    assert handler is not None and not alive(handler.pid, link.label), "handler process left behind"
    assert not os.path.exists(sock_path), "control socket left behind"


def test_handler_judges_a_queued_packet_by_the_window_it_arrived_in(link: Link) -> None:
    """The handler stopped (SIGSTOP) from before a drop window until after it: every datagram waits in the queue and
    is read after the window has ended. Judged at its arrival (the kernel's stamp, chaos/nfqueue/arrival.py), those
    that arrived inside the window are dropped and those before and after it pass; judged when read, all would pass
    (and a handler behind by a window's length would drop what came before it)."""
    ns_b, ip_a = link.pair.ns_b, link.pair.ip_a
    sock_path = f"/tmp/{link.label}-b.nfq.sock"
    handler: HandlerProcess | None = None
    try:
        handler = HandlerProcess.start(ns_b, kernel.QUEUE_NUM, sock_path, tag=link.label, local_ip=link.pair.ip_b)
        link.listen()
        start = time.monotonic_ns() + 400 * MS
        end = start + 200 * MS
        rule = {"id": "p", "sources": [ip_a], "match": None, "action": "drop"}
        handler.set_rules([{**rule, "active_from_ns": start, "active_until_ns": end}])
        kernel.apply(ns_b, kernel.NamespaceRules(queue_all={ip_a}))
        os.kill(handler.pid, signal.SIGSTOP)
        try:
            sent = link.send_until(time.monotonic_ns, end + 150 * MS)
        finally:
            os.kill(handler.pid, signal.SIGCONT)
        arrived = link.arrived(time.monotonic_ns)
        kernel.apply(ns_b, kernel.NamespaceRules())
        stats = handler.stop()
    finally:
        kernel.apply(ns_b, kernel.NamespaceRules())
        if handler is not None:
            handler.terminate()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(sock_path)
    assert stats["queue"].get("queue_dropped", 0) == stats["queue"].get("queue_user_dropped", 0) == 0, (
        f"the queue overflowed while the handler was stopped: {stats}"
    )
    assert stats["stamped"] == stats["packets"] == len(sent), f"packets without the kernel's arrival stamp: {stats}"
    lost = check_windows(sent, arrived, [(start, end)])
    assert stats["rules"]["p"]["dropped"] == len(lost) > 50
