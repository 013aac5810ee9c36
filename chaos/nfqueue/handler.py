"""The handler process: one single-threaded loop per member namespace that judges the packets iptables queues to it
(see the package docstring for the command line, the control protocol and the rules).

Stopping never loses a packet the rules did not drop: the handler first sets the queue length to 0 (with fail-open
every new packet then bypasses the queue), accepts every held packet and every packet still queued, and only then
unbinds (the kernel drops whatever is still queued at unbind).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import heapq
import json
import os
import select
import signal
import socket
import struct
import sys
import time
from typing import Any

from chaos.nfqueue.arrival import NFQA_TIMESTAMP, STAMP, ArrivalClock
from chaos.nfqueue.judge import Judge
from chaos.nfqueue.netlink import (
    BE32,
    DEFAULT_MAX_LEN,
    ERRNO,
    MSG_PACKET,
    NF_ACCEPT,
    NF_DROP,
    NFQA_MARK,
    NFQA_PACKET_HDR,
    NFQA_PAYLOAD,
    NLA,
    NLH_HEAD,
    NLMSG_ERROR,
    SO_MARK,
    KernelQueue,
    QueueError,
    kernel_queue_stats,
)
from chaos.nfqueue.rule import ACCEPT, DELAY, DROP, DUPLICATE, REORDER, RuleValidationError, compile_rules
from node import jsonl

REORDER_MAX_HOLD = 0.100  # seconds a reordered packet waits for the next packet of its source
DUP_MARK = 0xCB0D  # SO_MARK of injected duplicates: the handler accepts them untouched
MAX_CONTROL_LINE = 1 << 20
DESCRIPTION = (  # `python -m chaos.nfqueue --help` (the package docstring's first paragraph)
    'Stateful chaos on NFQUEUE: count rules ("drop the 50th ACK once"), message stripping inside a batch, and '
    "userspace delay / duplicate / reorder where the kernel has no netem. One handler process runs in ONE member's "
    "network namespace (the receiver, DESIGN principle 4) and judges the packets that iptables rules queue to it::"
)


_U16 = struct.Struct("!H")


class _Conn:
    __slots__ = ("inbuf", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.inbuf = b""


class Handler:
    """The single-threaded loop: epoll on the queue socket, the control socket and its connections, a signal pipe;
    a timer heap for held packets (delayed ones, and reordered ones waiting for their source's next packet).

    Control requests (JSON lines, one reply line each):
    - ``{"cmd": "rules", "rules": [RULE, ...]}`` replaces the rules atomically (all valid, or none changed);
      a rule whose id existed keeps its counters (see Rule.inherit) -> ``{"ok": true}``.
    - ``{"cmd": "stats"}`` -> ``{"ok": true, "stats": {...}}`` (see `stats`).
    - ``{"cmd": "stop"}`` accepts every held and queued packet, replies ``{"ok": true, "stats": ...}``, exits 0.
    - anything else -> ``{"ok": false, "error": "..."}``.
    Verdicts: packets accepted unchanged in one read burst go out as one batch verdict when nothing is held (a
    batch verdict would also accept held packets), else one verdict each; a rewritten packet first flushes the
    accepts before it, so stripping never reorders. Rules with windows are judged at the packet's arrival: the
    kernel's receive stamp moved to the monotonic clock (chaos/nfqueue/arrival.py), so a packet that waited in the
    queue while the handler was behind is judged by the window it arrived in; a packet without a usable stamp is
    judged against the monotonic clock read as it is judged (Judge.judge reads it only when some rule has a window).
    A delayed packet's delay also runs from its arrival."""

    BURST = 512  # packets read per pass before timers and control get a turn

    def __init__(self, queue: int, control_path: str, max_len: int = DEFAULT_MAX_LEN, local_ip: str | None = None):
        self.queue_num = queue
        self.control_path = control_path
        self.local_ip = local_ip
        self.judge = Judge()
        self.arrival = ArrivalClock()
        self.conns: dict[int, _Conn] = {}
        self.held: dict[int, tuple[bytes | None, bytes, int]] = {}  # id -> (new packet or None, src, kind)
        self.timers: list[tuple[float, int, int]] = []  # (deadline, seq, packet id)
        self.reorder_wait: dict[bytes, list[int]] = {}  # src -> ids held until src's next accepted packet
        self._release_after: list[int] = []
        self._timer_seq = 0
        self._dup_sockets: tuple[socket.socket, socket.socket] | None = None
        self.packets = self.accepted = self.dropped = self.max_held = self.duplicates_sent = 0
        self.dup_errors = self.marked = self.verdict_errors = 0
        self.stamped = 0  # packets judged at their kernel arrival stamp (the others: at the clock when read)
        self.last_id = 0
        self.stopping = False
        self.buf = bytearray(1 << 17)
        self.view = memoryview(self.buf)
        self.listener: socket.socket | None = None
        self.q = KernelQueue(queue, max_len)
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(control_path)
            self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.listener.bind(control_path)
            self.listener.listen(16)
            self.listener.setblocking(False)
        except BaseException:
            self.close()
            raise

    # --- packets ---

    def _dup_socks(self) -> tuple[socket.socket, socket.socket]:
        if self._dup_sockets is None:
            uni = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            mc = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            for s in (uni, mc):
                s.setsockopt(socket.SOL_SOCKET, SO_MARK, DUP_MARK)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
                s.setblocking(False)
            mc.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 0)
            mc.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
            if self.local_ip:
                mc.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(self.local_ip))
            self._dup_sockets = (uni, mc)
        return self._dup_sockets

    def _inject_copy(self, pkt: bytes) -> None:
        """One copy of the packet's UDP payload to its destination, from this namespace, marked DUP_MARK (see the
        package docstring)."""
        ihl = (pkt[0] & 0x0F) * 4
        if pkt[9] != 17 or len(pkt) < ihl + 8 or _U16.unpack_from(pkt, 2)[0] != len(pkt):
            return  # not UDP, or a truncated copy: accepted once
        dst = socket.inet_ntoa(pkt[16:20])
        port = _U16.unpack_from(pkt, ihl + 2)[0]
        uni, mc = self._dup_socks()
        try:
            (mc if 224 <= pkt[16] <= 239 else uni).sendto(pkt[ihl + 8 :], (dst, port))
            self.duplicates_sent += 1
        except OSError:
            self.dup_errors += 1

    def _hold(self, pid: int, out: bytes | None, src: bytes, kind: int, delay: float, at_ns: int | None) -> None:
        """Holds the packet for `delay` s after its arrival at_ns (monotonic ns; None: from now)."""
        self.held[pid] = (out, src, kind)
        if len(self.held) > self.max_held:
            self.max_held = len(self.held)
        self._timer_seq += 1
        start = time.monotonic() if at_ns is None else at_ns / 1e9
        heapq.heappush(self.timers, (start + delay, self._timer_seq, pid))

    def _source_accepted(self, src: bytes) -> None:
        waiting = self.reorder_wait.pop(src, None)
        if waiting:
            self._release_after.extend(waiting)

    def _release(self, pid: int) -> None:
        entry = self.held.pop(pid, None)
        if entry is None:
            return
        self.q.verdict(pid, NF_ACCEPT, entry[0])
        self.accepted += 1
        if entry[2] == DELAY and self.reorder_wait:
            self._source_accepted(entry[1])

    def _flush(self, pending: list[int]) -> None:
        """Accepts the pending ids (one batch verdict when nothing is held), then the reorder releases."""
        if pending:
            if self.held:
                verdict = self.q.verdict
                for pid in pending:
                    verdict(pid)
            else:
                self.q.accept_up_to(pending[-1])
            pending.clear()
        while self._release_after:
            ids, self._release_after = self._release_after, []
            for pid in ids:
                self._release(pid)

    def read_queue(self, limit: int = BURST, judge: bool = True) -> int:
        """Reads up to `limit` netlink messages and judges their packets (or accepts them all if not judge)."""
        n_read = 0
        pending: list[int] = []
        recv_into, buf, view = self.q.sock.recv_into, self.buf, self.view
        early, self.q.early = self.q.early, []
        self.arrival.sync()
        while n_read < limit:
            if early:
                data = early.pop(0)
                n = len(data)
                buf[:n] = data
            else:
                try:
                    n = recv_into(buf)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError as e:
                    if e.errno == errno.ENOBUFS:
                        continue
                    raise
            n_read += 1
            pos = 0
            while pos + 16 <= n:
                nlen, ntype = NLH_HEAD.unpack_from(buf, pos)
                if nlen < 16 or pos + nlen > n:
                    break
                if ntype == MSG_PACKET:
                    self._on_packet(buf, view, pos + 20, pos + nlen, pending, judge)
                elif ntype == NLMSG_ERROR and ERRNO.unpack_from(buf, pos + 16)[0]:
                    self.verdict_errors += 1
                pos += (nlen + 3) & ~3
        self.q.early[:0] = early
        self._flush(pending)
        return n_read

    def _on_packet(self, buf: bytearray, view: memoryview, p: int, end: int, pending: list[int], judge: bool) -> None:
        pid = -1
        mark = 0
        pkt = b""
        at_ns: int | None = None
        while p + 4 <= end:
            alen, atype = NLA.unpack_from(buf, p)
            if alen < 4:
                break
            atype &= 0x3FFF
            if atype == NFQA_PAYLOAD:
                pkt = view[p + 4 : p + alen].tobytes()
            elif atype == NFQA_PACKET_HDR:
                pid = BE32.unpack_from(buf, p + 4)[0]
            elif atype == NFQA_MARK:
                mark = BE32.unpack_from(buf, p + 4)[0]
            elif atype == NFQA_TIMESTAMP and alen >= 4 + STAMP.size:
                at_ns = self.arrival.monotonic_ns(*STAMP.unpack_from(buf, p + 4))
            p += (alen + 3) & ~3
        if pid < 0:
            return
        self.packets += 1
        self.last_id = pid
        if mark == DUP_MARK or not judge or not pkt:
            self.marked += mark == DUP_MARK
            pending.append(pid)
            self.accepted += 1
            return
        self.stamped += at_ns is not None
        kind, out, delay = self.judge.judge(pkt, at_ns)
        if kind in (ACCEPT, DUPLICATE):
            if out is None:
                pending.append(pid)
            else:
                self._flush(pending)  # keep the order: earlier accepts go first
                self.q.verdict(pid, NF_ACCEPT, out)
            self.accepted += 1
            if self.reorder_wait:
                self._source_accepted(pkt[12:16])
                if self._release_after:  # right behind this one, not behind the rest of the batch read with it
                    self._flush(pending)
            if kind == DUPLICATE:
                self._inject_copy(out or pkt)
        elif kind == DROP:
            self.q.verdict(pid, NF_DROP)
            self.dropped += 1
        elif kind == DELAY:
            self._hold(pid, out, pkt[12:16], DELAY, delay, at_ns)
        else:  # REORDER
            src = pkt[12:16]
            self._hold(pid, out, src, REORDER, REORDER_MAX_HOLD, at_ns)
            self.reorder_wait.setdefault(src, []).append(pid)

    def fire_timers(self) -> None:
        timers = self.timers
        now = time.monotonic()
        while timers and timers[0][0] <= now:
            self._release(heapq.heappop(timers)[2])
        self._flush([])

    def release_all(self) -> None:
        """Accepts every held packet, oldest first."""
        for pid in sorted(self.held):
            self._release(pid)
        self._release_after.clear()
        self.timers.clear()
        self.reorder_wait.clear()

    # --- control ---

    def numbered(self) -> int:
        """How many packets the kernel has numbered for this queue (handed to us, or lost from our socket buffer)."""
        return kernel_queue_stats(self.queue_num).get("id_sequence", self.last_id)

    def stats(self) -> dict[str, Any]:
        """packets judged, accepted / dropped (verdicts), rewritten (stripped), held now and at most, unparsed (a
        message rule could not parse it), unknown_shapes (of those, the datagrams of the rules' wire of a shape its
        walker does not know: passed untouched), duplicates_sent, marked_copies (our own copies, passed untouched),
        missed_ids (numbered by the kernel but not received: socket overflow with fail-open, or still in flight),
        stamped (judged at their kernel arrival stamp), the kernel's queue counters and per-rule counters."""
        kq = kernel_queue_stats(self.queue_num)
        return {
            "packets": self.packets,
            "accepted": self.accepted,
            "dropped": self.dropped,
            "rewritten": self.judge.rewritten,
            "held": len(self.held),
            "max_held": self.max_held,
            "unparsed": self.judge.unparsed,
            "unknown_shapes": self.judge.unknown,
            "duplicates_sent": self.duplicates_sent,
            "duplicate_errors": self.dup_errors,
            "marked_copies": self.marked,
            "verdict_errors": self.verdict_errors + self.q.send_errors,
            "missed_ids": max(0, kq.get("id_sequence", self.last_id) - self.packets),
            "fail_open": self.q.fail_open,
            "stamped": self.stamped,
            "queue": kq,
            "rules": self.judge.rule_stats(),
        }

    def handle_request(self, line: bytes) -> dict[str, Any]:
        try:
            req = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            return {"ok": False, "error": f"bad JSON: {e}"}
        if not isinstance(req, dict):
            return {"ok": False, "error": "a request is a JSON object with a 'cmd'"}
        cmd = req.get("cmd")
        if cmd == "rules":
            try:
                self.judge.set_rules(compile_rules(req.get("rules")))
            except RuleValidationError as e:
                return {"ok": False, "error": str(e)}
            # the kernel's packet numbering when these rules took over: NetnsFaultEngine.queue_bypass counts from here
            return {"ok": True, "numbered": self.numbered()}
        if cmd == "stats":
            return {"ok": True, "stats": self.stats()}
        if cmd == "stop":
            self.drain_for_stop()
            self.stopping = True
            return {"ok": True, "stats": self.stats()}
        return {"ok": False, "error": f"unknown command {cmd!r}; commands: rules, stats, stop"}

    def _on_conn(self, fd: int, poller: select.epoll) -> None:
        conn = self.conns[fd]
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._close_conn(fd, poller)
            return
        conn.inbuf += data
        while b"\n" in conn.inbuf and not self.stopping:
            line, conn.inbuf = conn.inbuf.split(b"\n", 1)
            if not line.strip():
                continue
            reply = self.handle_request(line)
            try:
                conn.sock.setblocking(True)
                conn.sock.settimeout(5.0)
                conn.sock.sendall(jsonl.encode(reply))
                conn.sock.setblocking(False)
            except OSError:
                self._close_conn(fd, poller)
                return
        if len(conn.inbuf) > MAX_CONTROL_LINE:
            with contextlib.suppress(OSError):
                conn.sock.sendall(b'{"ok": false, "error": "request line too long"}\n')
            self._close_conn(fd, poller)

    def _close_conn(self, fd: int, poller: select.epoll) -> None:
        conn = self.conns.pop(fd, None)
        if conn is not None:
            with contextlib.suppress(OSError, ValueError):
                poller.unregister(fd)
            conn.sock.close()

    # --- lifecycle ---

    def drain_for_stop(self) -> None:
        """Let new packets bypass the queue (length 0 + fail-open), accept every held and every queued packet."""
        if self.q.fail_open:  # without fail-open a length of 0 would drop every new packet
            with contextlib.suppress(OSError):
                self.q.set_max_len(0)
        self.release_all()
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and self.read_queue(judge=False):
            pass

    def run(self) -> None:
        sig_r, sig_w = os.pipe()
        os.set_blocking(sig_r, False)
        os.set_blocking(sig_w, False)
        try:
            old_wakeup = signal.set_wakeup_fd(sig_w)
            install_signal_handlers()
        except ValueError:  # not the main thread: the caller stops us with the stop command
            old_wakeup = None
        poller = select.epoll()
        qfd = self.q.fileno()
        assert self.listener is not None
        lfd = self.listener.fileno()
        try:
            poller.register(qfd, select.EPOLLIN)
            poller.register(lfd, select.EPOLLIN)
            poller.register(sig_r, select.EPOLLIN)
            if self.q.early:
                self.read_queue()
            while not self.stopping:
                if _signalled:
                    self.drain_for_stop()
                    self.stopping = True
                    break
                timeout = max(0.0, self.timers[0][0] - time.monotonic()) if self.timers else 1.0
                try:
                    events = poller.poll(timeout)
                except InterruptedError:
                    events = []
                for fd, _ev in events:
                    if fd == qfd:
                        self.read_queue()
                    elif fd == lfd:
                        self._accept_conns(poller)
                    elif fd == sig_r:
                        with contextlib.suppress(OSError):
                            os.read(sig_r, 64)
                    elif fd in self.conns:
                        self._on_conn(fd, poller)
                    if self.stopping:
                        break
                if self.timers:
                    self.fire_timers()
        finally:
            # Whatever ended the loop (stop, a signal, an error), release what we hold before unbinding.
            if not self.stopping:
                with contextlib.suppress(Exception):
                    self.drain_for_stop()
            if old_wakeup is not None:
                signal.set_wakeup_fd(old_wakeup)
            poller.close()
            os.close(sig_r)
            os.close(sig_w)
            for fd in list(self.conns):
                self.conns.pop(fd).sock.close()
            self.close()

    def _accept_conns(self, poller: select.epoll) -> None:
        assert self.listener is not None
        for _ in range(64):
            try:
                sock, _addr = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            sock.setblocking(False)
            self.conns[sock.fileno()] = _Conn(sock)
            poller.register(sock.fileno(), select.EPOLLIN)

    def close(self) -> None:
        """Unbinds the queue and removes the control socket. Call only after drain_for_stop()."""
        q = getattr(self, "q", None)
        if q is not None and q.sock.fileno() >= 0:
            q.unbind()
            q.close()
        if self.listener is not None:
            self.listener.close()
            self.listener = None
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.control_path)
        if self._dup_sockets:
            for s in self._dup_sockets:
                s.close()
            self._dup_sockets = None
        arrival = getattr(self, "arrival", None)
        if arrival is not None:
            arrival.close()


_signalled = False


def _on_signal(_signum: int, _frame: Any) -> None:
    global _signalled
    _signalled = True  # the loop sees it (the wakeup fd wakes its poll) and stops like the stop command


def install_signal_handlers() -> None:
    """SIGTERM and SIGINT stop the handler cleanly (held packets accepted first). Main thread only."""
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, _on_signal)


def main(argv: list[str] | None = None) -> int:
    install_signal_handlers()  # before binding: a signal during start-up still ends in a clean stop
    ap = argparse.ArgumentParser(prog="python -m chaos.nfqueue", description=DESCRIPTION)
    ap.add_argument("--queue", type=int, required=True, help="NFQUEUE number (iptables --queue-num)")
    ap.add_argument("--control", required=True, help="path of the unix control socket to create")
    ap.add_argument("--max-len", type=int, default=DEFAULT_MAX_LEN, help="kernel queue length (see default_max_len)")
    ap.add_argument("--local-ip", help="this member's address: the interface for duplicated multicasts")
    ap.add_argument("--tag", help="opaque text that identifies the handler's owner in its command line")
    args = ap.parse_args(argv)
    if not 0 <= args.queue <= 65535 or not 1 <= args.max_len <= (1 << 31):
        print(json.dumps({"ready": False, "error": "--queue must be 0..65535 and --max-len positive"}), flush=True)
        return 2
    try:
        handler = Handler(args.queue, args.control, args.max_len, args.local_ip)
    except OSError as e:
        msg = str(e) if isinstance(e, QueueError) else f"cannot create the control socket {args.control}: {e}"
        print(json.dumps({"ready": False, "error": msg}), flush=True)
        return 2
    try:
        print(json.dumps({"ready": True, "queue": args.queue, "pid": os.getpid(), "fail_open": handler.q.fail_open}))
        sys.stdout.flush()
    except BaseException:
        handler.close()
        raise
    handler.run()
    return 0
