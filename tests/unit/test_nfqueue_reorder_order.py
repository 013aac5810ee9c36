"""The handler's reorder, read as one batch from the queue: a drawn datagram is released right behind its source's
next accepted one, not behind the rest of the batch. (A starved handler reads hundreds of datagrams at once; when every
release waited for the batch's end, the reorders of one batch collapsed into one overtake: seen in CI under load as
162 overtakes where the draws promise ~320.)"""

from __future__ import annotations

import socket
import struct
import time

from chaos.nfqueue.arrival import NFQA_TIMESTAMP, STAMP, ArrivalClock
from chaos.nfqueue.handler import Handler
from chaos.nfqueue.judge import Judge
from chaos.nfqueue.netlink import BE32, NFQA_PACKET_HDR, NFQA_PAYLOAD, NLA
from chaos.nfqueue.rule import compile_rules


class RecordingQueue:
    """The kernel queue's verdicts, in order (ids). A batch verdict accepts every id up to its own that has no verdict
    yet, as the kernel's does: held ones too, which is why the handler must not give one while it holds any."""

    def __init__(self) -> None:
        self.offered: list[int] = []
        self.accepted: list[int] = []
        self.dropped: list[int] = []

    def verdict(self, pid: int, verdict: int = 1, packet: bytes | None = None) -> None:
        (self.accepted if verdict == 1 else self.dropped).append(pid)

    def accept_up_to(self, pid: int) -> None:
        self.accepted.extend(x for x in self.offered if x <= pid and x not in self.accepted and x not in self.dropped)


def packet(seq: int, src: str = "10.9.9.11") -> bytes:
    payload = seq.to_bytes(4, "big")
    udp = struct.pack("!HHHH", 40000, 7800, 8 + len(payload), 0) + payload
    ip = struct.pack(
        "!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0, socket.inet_aton(src), socket.inet_aton("10.9.9.12")
    )
    return ip + udp


def attr(kind: int, data: bytes) -> bytes:
    raw = NLA.pack(4 + len(data), kind) + data
    return raw + b"\0" * (-len(raw) % 4)


def handler_with(rules: list[dict]) -> tuple[Handler, RecordingQueue]:
    h = Handler.__new__(Handler)  # no kernel queue, no control socket: the packet path only
    h.judge = Judge(compile_rules(rules))
    h.held, h.timers, h.reorder_wait, h._release_after, h._timer_seq = {}, [], {}, [], 0
    h.packets = h.accepted = h.dropped = h.max_held = h.duplicates_sent = h.marked = 0
    h.last_id = h.stamped = 0
    h.arrival = ArrivalClock()
    h.q = queue = RecordingQueue()  # type: ignore[assignment]
    return h, queue


def read_batch(h: Handler, ids: list[int], drawn: set[int] | None = None) -> None:
    """The datagrams `ids`, read in one pass (one pending list, flushed at its end); with `drawn`, exactly those
    are reordered."""
    pending: list[int] = []
    for pid in ids:
        h.q.offered.append(pid)  # type: ignore[attr-defined]
        if drawn is not None:
            h.judge = Judge(compile_rules([{"id": "r", "action": "reorder"}] if pid in drawn else []))
        msg = attr(NFQA_PACKET_HDR, BE32.pack(pid) + b"\x08\x00\x01") + attr(NFQA_PAYLOAD, packet(pid))
        buf = bytearray(msg)
        h._on_packet(buf, memoryview(buf), 0, len(buf), pending, True)
    h._flush(pending)


def test_a_reordered_run_follows_its_source_next_datagram_within_a_batch() -> None:
    h, queue = handler_with([{"id": "r", "action": "reorder", "count": 2}])  # the first two drawn, the rest pass
    read_batch(h, [1, 2, 3, 4, 5, 6])
    assert queue.accepted == [3, 1, 2, 4, 5, 6]
    assert h.held == {} and h.reorder_wait == {}


def test_reorders_spread_over_one_batch_each_overtake_once() -> None:
    h, queue = handler_with([])
    read_batch(h, list(range(1, 9)), drawn={1, 3, 5, 7})
    assert queue.accepted == [2, 1, 4, 3, 6, 5, 8, 7]
    assert h.held == {} and h.reorder_wait == {}


def test_a_timed_rule_judges_a_packet_by_its_arrival_stamp_not_by_when_it_is_read() -> None:
    """A drop window that ended 50 ms ago: the packet stamped inside it is dropped, the ones stamped before and
    after it, and one without a stamp (read now), pass."""
    real = time.clock_gettime_ns(time.CLOCK_REALTIME)
    now = time.monotonic_ns()
    ms = 1_000_000
    rule = {"id": "w", "action": "drop", "active_from_ns": now - 150 * ms, "active_until_ns": now - 50 * ms}
    h, queue = handler_with([rule])
    h.arrival.sync()
    pending: list[int] = []
    for pid, back_ms in ((1, 200), (2, 100), (3, 20), (4, None)):
        h.q.offered.append(pid)  # type: ignore[attr-defined]
        msg = attr(NFQA_PACKET_HDR, BE32.pack(pid) + b"\x08\x00\x01") + attr(NFQA_PAYLOAD, packet(pid))
        if back_ms is not None:
            t = real - back_ms * ms
            msg += attr(NFQA_TIMESTAMP, STAMP.pack(t // 1_000_000_000, t % 1_000_000_000 // 1_000))
        buf = bytearray(msg)
        h._on_packet(buf, memoryview(buf), 0, len(buf), pending, True)
    h._flush(pending)
    assert queue.accepted == [1, 3, 4] and queue.dropped == [2] and h.stamped == 3
