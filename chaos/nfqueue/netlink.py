"""The kernel queue over raw nfnetlink: bind and configure one NFQUEUE, receive its packets, send (batch)
verdicts; its counters from /proc; the queue length for a delayed link.

Why the handler talks netlink itself instead of using NetfilterQueue 1.1 (checked against its _impl.pyx and on this
kernel): late verdicts work there (``retain()``, then ``accept()`` after the callback returned, also after
``set_payload``), but (1) it clamps the copy range to 4016 bytes (its recv buffer is 4096 bytes), so a member's
bundled datagram (up to 60,000 bytes, node/stack.py) arrives truncated and cannot be parsed, stripped or
duplicated; (2) it has no way to set the queue flags, so no fail-open. The NFQUEUE netlink protocol is small
(config, packet, verdict, batch verdict messages), so this module speaks it with struct on a plain
``socket(AF_NETLINK, SOCK_RAW, NETLINK_NETFILTER)``: full copy range (the kernel caps it at 65531 bytes; longer
packets arrive truncated, are detected and accepted untouched), a socket receive buffer sized from max_len, and
NFQA_CFG_F_FAIL_OPEN: when the queue is full (or our socket buffer is), the kernel ACCEPTS the packet instead of
dropping it -- those packets escape the rules, but nothing is lost that no rule dropped. Kernel counters from
/proc/net/netfilter/nfnetlink_queue are in the stats (queue_dropped / queue_user_dropped stay 0 with fail-open).
The kernel counts no packet that bypassed a full queue; one that overflowed our socket buffer shows in
`missed_ids`. Compare `packets` with what the receiver got to see the bypass share (bench/bench_nfqueue.py does).
On kernels without fail-open (before 3.6) the handler still runs, reports ``"fail_open": false`` and relies on
--max-len sizing (`default_max_len`); a full queue then drops (queue_dropped).
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import socket
import struct
import time

DEFAULT_MAX_LEN = 4096
MAX_MAX_LEN = 65535
COPY_RANGE = 0xFFFF  # the kernel clamps this to 65531 (0xFFFF - NLA_HDRLEN)


def default_max_len(rate_pps: float, delay_ms: float, jitter_ms: float = 0.0) -> int:
    """The --max-len for a link of `rate_pps` packets/s delayed by delay_ms +- jitter_ms.

    Every packet waiting for its verdict occupies a queue slot, and a delayed packet waits up to delay + jitter, so
    in steady state rate x (delay + jitter) slots are in use; x2 leaves room for bursts. The floor of 4096 covers
    un-delayed traffic while the handler lags behind (a few ms at tens of thousands of packets/s). The cap of
    65535 bounds memory: the kernel keeps every queued packet (~2-4 KB each with its skb, up to ~60 KB for a big
    bundle) and the handler's socket buffer is sized from max_len. With fail-open (see the module docstring) an
    undersized queue lets packets bypass the rules rather than drops them."""
    need = math.ceil(max(rate_pps, 0.0) * max(delay_ms + jitter_ms, 0.0) / 1000.0 * 2)
    return max(DEFAULT_MAX_LEN, min(MAX_MAX_LEN, need))


NETLINK_NETFILTER = 12
SOL_NETLINK = 270
NETLINK_NO_ENOBUFS = 5
SO_RCVBUFFORCE = 33
SO_MARK = getattr(socket, "SO_MARK", 36)
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2
_SUBSYS_QUEUE = 3 << 8
MSG_PACKET, MSG_VERDICT, MSG_CONFIG, MSG_VERDICT_BATCH = (_SUBSYS_QUEUE | t for t in range(4))
NFQA_PACKET_HDR, NFQA_VERDICT_HDR, NFQA_MARK, NFQA_PAYLOAD = 1, 2, 3, 10
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN, NFQA_CFG_MASK, NFQA_CFG_FLAGS = 1, 2, 3, 4, 5
CMD_BIND, CMD_UNBIND = 1, 2
COPY_PACKET = 2
F_FAIL_OPEN = 1
NF_DROP, NF_ACCEPT = 0, 1

_NLH = struct.Struct("=IHHII")
NLH_HEAD = struct.Struct("=IH")
NLA = struct.Struct("=HH")
ERRNO = struct.Struct("=i")
BE32 = struct.Struct("!I")
_VERDICT = struct.Struct("!II")


class QueueError(OSError):
    """The queue could not be bound or configured; str() says what is missing and what to do."""


def _attr(kind: int, data: bytes) -> bytes:
    return NLA.pack(4 + len(data), kind) + data + b"\0" * (-len(data) % 4)


def _bind_hint(err: int | None, queue: int) -> str:
    if err in (errno.EPERM, errno.EACCES) and os.geteuid() != 0:
        return "binding an NFQUEUE needs root (CAP_NET_ADMIN in the namespace): run the handler as root"
    if err in (errno.EPERM, errno.EBUSY):  # the kernel says EPERM when another socket owns the queue
        return (
            f"queue {queue} is already bound by another process in this namespace: stop it "
            "(see /proc/net/netfilter/nfnetlink_queue, column 2 is its netlink port id) or use another --queue"
        )
    if err in (errno.EPROTONOSUPPORT, errno.ENOENT, errno.EOPNOTSUPP, errno.EINVAL, errno.ENODEV):
        return (
            "this kernel has no NFQUEUE support (nfnetlink_queue): `modprobe nfnetlink_queue`, or build with "
            "CONFIG_NETFILTER_NETLINK_QUEUE"
        )
    return "see the kernel log (dmesg)"


class KernelQueue:
    """One NFQUEUE bound over a raw nfnetlink socket: config, packet reception and (batch) verdicts."""

    def __init__(self, num: int, max_len: int = DEFAULT_MAX_LEN, rcvbuf: int | None = None) -> None:
        self.num = num
        self.early: list[bytes] = []  # packet messages that arrived while we waited for a config ack
        self._seq = 0
        try:
            self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        except OSError as e:
            raise QueueError(
                e.errno, f"cannot open a netfilter netlink socket ({e}): {_bind_hint(e.errno, num)}"
            ) from e
        try:
            self.sock.bind((0, 0))
            size = rcvbuf or max(8 << 20, min(max_len * 4096, 256 << 20))
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, size)
            except OSError:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)
            self.rcvbuf = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
            with contextlib.suppress(OSError):
                self.sock.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)
            self.sock.settimeout(5.0)
            try:
                self._config(
                    _attr(NFQA_CFG_CMD, struct.pack("!BBH", CMD_BIND, 0, socket.AF_INET)),
                    _attr(NFQA_CFG_PARAMS, struct.pack("!IB", COPY_RANGE, COPY_PACKET)),
                    _attr(NFQA_CFG_QUEUE_MAXLEN, BE32.pack(max_len)),
                )
            except QueueError as e:
                raise QueueError(e.errno, f"cannot bind NFQUEUE {num}: {e.strerror}: {_bind_hint(e.errno, num)}") from e
            try:
                self._config(
                    _attr(NFQA_CFG_MASK, BE32.pack(F_FAIL_OPEN)), _attr(NFQA_CFG_FLAGS, BE32.pack(F_FAIL_OPEN))
                )
                self.fail_open = True
            except QueueError:
                self.fail_open = False  # kernels before 3.6: a full queue drops (see default_max_len)
            self.sock.setblocking(False)
        except BaseException:
            self.sock.close()
            raise
        prefix = _NLH.pack(32, MSG_VERDICT, NLM_F_REQUEST, 0, 0) + self._nfgen()
        self._verdict_head = prefix + NLA.pack(12, NFQA_VERDICT_HDR)
        self._batch_head = _NLH.pack(32, MSG_VERDICT_BATCH, NLM_F_REQUEST, 0, 0) + self._nfgen()
        self._batch_head += NLA.pack(12, NFQA_VERDICT_HDR)
        self.send_errors = 0

    def _nfgen(self) -> bytes:
        return struct.pack("!BBH", socket.AF_UNSPEC, 0, self.num)

    def fileno(self) -> int:
        return self.sock.fileno()

    def _config(self, *attrs: bytes) -> None:
        """Sends one config message and waits for its ack; raises QueueError with the kernel's errno."""
        self._seq += 1
        body = self._nfgen() + b"".join(attrs)
        self.sock.send(_NLH.pack(16 + len(body), MSG_CONFIG, NLM_F_REQUEST | NLM_F_ACK, self._seq, 0) + body)
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            data = self.sock.recv(1 << 17)
            pos = 0
            while pos + 16 <= len(data):
                nlen, ntype, _flags, seq, _pid = _NLH.unpack_from(data, pos)
                if nlen < 16:
                    break
                if ntype == NLMSG_ERROR and seq == self._seq:
                    err = -ERRNO.unpack_from(data, pos + 16)[0]
                    if err:
                        raise QueueError(err, os.strerror(err))
                    return
                if ntype == MSG_PACKET:
                    self.early.append(data[pos : pos + nlen])
                pos += (nlen + 3) & ~3
        raise QueueError(errno.ETIMEDOUT, "no answer from the kernel to an NFQUEUE config message")

    def configure(self, *attrs: bytes) -> None:
        """A config change on a running queue (blocking until acked; packets arriving meanwhile go to `early`)."""
        self.sock.setblocking(True)
        self.sock.settimeout(5.0)
        try:
            self._config(*attrs)
        finally:
            self.sock.setblocking(False)

    def set_max_len(self, n: int) -> None:
        self.configure(_attr(NFQA_CFG_QUEUE_MAXLEN, BE32.pack(n)))

    def verdict(self, packet_id: int, verdict: int = NF_ACCEPT, payload: bytes | None = None) -> None:
        if payload is None:
            msg = self._verdict_head + _VERDICT.pack(verdict, packet_id)
        else:
            pattr = _attr(NFQA_PAYLOAD, payload)
            msg = b"".join(
                [
                    _NLH.pack(32 + len(pattr), MSG_VERDICT, NLM_F_REQUEST, 0, 0),
                    self._nfgen(),
                    NLA.pack(12, NFQA_VERDICT_HDR),
                    _VERDICT.pack(verdict, packet_id),
                    pattr,
                ]
            )
        try:
            self.sock.send(msg)
        except OSError:
            self.send_errors += 1

    def accept_up_to(self, packet_id: int) -> None:
        """A batch verdict: accepts every queued packet with an id <= packet_id (held ones too!)."""
        try:
            self.sock.send(self._batch_head + _VERDICT.pack(NF_ACCEPT, packet_id))
        except OSError:
            self.send_errors += 1

    def unbind(self) -> None:
        with contextlib.suppress(OSError):
            self.configure(_attr(NFQA_CFG_CMD, struct.pack("!BBH", CMD_UNBIND, 0, socket.AF_INET)))

    def close(self) -> None:
        self.sock.close()


def kernel_queue_stats(queue: int) -> dict[str, int]:
    """This namespace's counters of one queue from /proc/net/netfilter/nfnetlink_queue ({} if not bound)."""
    names = (
        "queue_number",
        "peer_portid",
        "queue_total",
        "copy_mode",
        "copy_range",
        "queue_dropped",
        "queue_user_dropped",
        "id_sequence",
    )
    try:
        with open("/proc/net/netfilter/nfnetlink_queue") as f:
            for line in f:
                parts = line.split()
                if parts and parts[0] == str(queue):
                    return dict(zip(names, map(int, parts[: len(names)]), strict=False))
    except (OSError, ValueError):
        pass
    return {}
