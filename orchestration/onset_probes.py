"""When network faults actually took effect, observed on the real network of a cluster of namespaces (netns, docker).

faults.jsonl's `t` of a scheduled network fault is its planned instant: the fault table installs the fault ahead and
the kernel's clock (or the NFQUEUE handler's) switches it, so nothing is measured then. A probe run measures it:
`LinkProbes` sends a datagram on every directed link every millisecond, from a socket of its own (PROBE_PORT) in the
source member's namespace, stamped with its CLOCK_MONOTONIC send time, and records which ones arrive. A fault's
observed onset is the send time of the first probe it dropped (`Onset`); the run records it in faults.jsonl as
`observed_t` (run_schedule with `probes`). Probes are valid UNICAST3.DATA messages, so a `discard` of
UNICAST3.DATA drops them as it would a member's; faults that do not drop probes (delay, reorder, duplicate, a
discard whose match a probe does not meet) are not observed here, and their lines get no `observed_t`.
"""

from __future__ import annotations

import select
import socket
import struct
import threading
import time
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass

from chaos.faults import FaultRecord
from node import wire
from node.fault_kinds import KINDS, Category
from node.wire_headers import UNICAST3_DATA
from orchestration.backends.netns import NetnsCluster, in_namespace
from orchestration.cluster import Clock

PROBE_PORT = 7900  # members use 7800 (data) and 7801 (control)
PROBE_EVERY_S = 0.001
LOOKBACK_NS = 100_000_000  # probes judged from this long before a fault's planned instant (an early one shows)
SETTLE_NS = 200_000_000  # a probe sent later than this before the judging is not judged yet (it may be in flight)
OBSERVE_NS = 500_000_000  # observe() judges this long after the last planned onset: one up to 300 ms late shows
_STAMP = struct.Struct("!q")

Link = tuple[str, str]  # (source, receiver)


@dataclass(frozen=True)
class Onset:
    """A fault's observed onset on one of its links: `observed` is the send time of the first probe it dropped, and
    `last_through` the send time of the last probe that got through before that one (None: none in the window
    judged), so the fault took effect in (last_through, observed], give or take a probe's transit time. A probe is
    stamped just before its `sendto`, and a sender the scheduler stalls there sends it later: `observed_sent_by` is
    when the first dropped probe's `sendto` returned, so the fault surely acted on a probe sent no earlier than that."""

    fault_id: str
    link: Link
    planned: int
    observed: int
    last_through: int | None
    observed_sent_by: int


def drops_probes(record: FaultRecord) -> bool:
    """The fault drops the packets it acts on (partition, split, loss, a discard with action drop): its onset shows
    as the first probe lost (delays, reorders and duplicates let probes through)."""
    category = KINDS[record.kind].category
    return category is Category.LINK or (category is Category.DISCARD and record.fault.action == "drop")


class LinkProbes:
    """Probes on every directed link of a started namespace cluster, while the context is open (two threads: one
    sends, one receives)."""

    def __init__(self, cluster: NetnsCluster, *, port: int = PROBE_PORT) -> None:
        self.socks: dict[str, socket.socket] = {}
        self.addr = {n: (m.ip, port) for n, m in cluster.members.items()}
        for name, m in cluster.members.items():
            with in_namespace(m.netns or cluster.member_ns(name)):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind((m.ip, port))
            s.setblocking(False)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
            self.socks[name] = s
        names = list(cluster.members)
        self.sent: dict[Link, list[int]] = {(a, b): [] for a in names for b in names if a != b}  # seq -> send ns
        self.returned: dict[Link, list[int]] = {link: [] for link in self.sent}  # seq -> ns its sendto returned
        self.got: dict[Link, dict[int, int]] = {link: {} for link in self.sent}  # seq -> receive ns
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._send), threading.Thread(target=self._receive)]

    def __enter__(self) -> LinkProbes:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(10)
        for s in self.socks.values():
            s.close()

    def observe(self, faults: Sequence[FaultRecord], clock: Clock) -> dict[str, Onset]:
        """The onsets of planned faults (their windows on `clock`), judged OBSERVE_NS after the last planned one
        (waiting on the clock until then)."""
        starts = [f.window.start for f in faults if f.window is not None]
        clock.sleep_until(max(starts, default=0) + OBSERVE_NS)
        return self.onsets(faults, clock.now_ns())

    def onsets(self, faults: Sequence[FaultRecord], now_ns: int) -> dict[str, Onset]:
        """The onsets the probes so far show (see `observed_onsets`)."""
        returned = {link: list(times) for link, times in self.returned.items()}  # first: sent is appended first
        sent = {link: list(times[: len(returned[link])]) for link, times in self.sent.items()}
        return observed_onsets(sent, self.got, faults, now_ns, returned)

    def _send(self) -> None:
        nxt = time.monotonic()
        while not self._stop.is_set():
            for (a, b), times in self.sent.items():
                now = time.monotonic_ns()
                msg = UNICAST3_DATA(len(times), 1, False, _STAMP.pack(now))
                self.socks[a].sendto(wire.encode_datagram("probe", a, b, [msg]), self.addr[b])
                times.append(now)
                self.returned[(a, b)].append(time.monotonic_ns())
            nxt += PROBE_EVERY_S
            time.sleep(max(0.0, nxt - time.monotonic()))

    def _receive(self) -> None:
        by_fd = {s.fileno(): (n, s) for n, s in self.socks.items()}
        poller = select.epoll()
        for fd in by_fd:
            poller.register(fd, select.EPOLLIN)
        try:
            while not self._stop.is_set():
                for fd, _ in poller.poll(0.05):
                    name, s = by_fd[fd]
                    while True:
                        try:
                            data = s.recv(2048)
                        except BlockingIOError:
                            break
                        now, d = time.monotonic_ns(), wire.decode_datagram(data)
                        probe = d.messages[0]
                        if isinstance(probe, UNICAST3_DATA) and (d.src, name) in self.got:
                            self.got[(d.src, name)][probe.seqno] = now
        finally:
            poller.close()


def observed_onsets(
    sent: Mapping[Link, Sequence[int]],
    got: Mapping[Link, Container[int]],
    faults: Sequence[FaultRecord],
    now_ns: int,
    returned: Mapping[Link, Sequence[int]] | None = None,
) -> dict[str, Onset]:
    """The observed onset of each planned fault (with a window) that dropped a probe, by fault id: the earliest over
    its links. `sent[link][seq]` is probe seq's send time (its stamp), `returned[link][seq]` when its sendto returned
    (default: the stamp), `got[link]` the probes that arrived. On each link only the probes this fault alone can have
    dropped are judged (`_judged_span`), and none sent within SETTLE_NS of now_ns."""
    out: dict[str, Onset] = {}
    for record in faults:
        if record.window is None or not drops_probes(record):
            continue
        for link in record.links():
            span = _judged_span(link, record, faults, now_ns)
            found = None if span is None else _first_dropped(sent[link], got[link], *span)
            if found is None:
                continue
            seq, last_through = found
            observed, sent_by = sent[link][seq], (returned or sent)[link][seq]
            if record.id not in out or observed < out[record.id].observed:
                out[record.id] = Onset(record.id, link, record.window.start, observed, last_through, sent_by)
    return out


def _judged_span(link: Link, record: FaultRecord, faults: Sequence[FaultRecord], now_ns: int) -> tuple[int, int] | None:
    """[lo, hi): the send times of the probes on `link` that tell about `record`: from LOOKBACK_NS before its start
    (but after every earlier fault on the link has ended) to its end, the start of a later fault on the link, or
    SETTLE_NS before now. None if another fault on the link is in force at its start."""
    window = record.window
    assert window is not None
    lo, hi = window.start - LOOKBACK_NS, now_ns - SETTLE_NS
    if window.until is not None:
        hi = min(hi, window.until)
    for other in faults:
        w = other.window
        if other is record or w is None or link not in other.links():
            continue
        if w.start <= window.start and (w.until is None or w.until > window.start):
            return None
        if w.start > window.start:
            hi = min(hi, w.start)
        elif w.until is not None:
            lo = max(lo, w.until + SETTLE_NS // 10)
    return (lo, hi) if lo < hi else None


def _first_dropped(sent: Sequence[int], got: Container[int], lo: int, hi: int) -> tuple[int, int | None] | None:
    """(seq of the first probe sent in [lo, hi) that never arrived, send time of the last one before it that did), or
    None if every one arrived."""
    last_through = None
    for seq, t in enumerate(sent):
        if t < lo:
            continue
        if t >= hi:
            return None
        if seq not in got:
            return seq, last_through
        last_through = t
    return None
