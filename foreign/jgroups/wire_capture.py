"""UDP datagrams as they reach a network namespace's interfaces: a raw AF_PACKET socket, read by a thread, with IP
fragments put together on request. The golden capture (capture.py, capture5.py), the discard bench and the JGroups 5
wire tests read the real members' traffic with it."""

from __future__ import annotations

import collections
import contextlib
import select
import socket
import struct
import threading
import time
from typing import Any

from chaos.profiles import jgroups212 as wire

ETH_P_ALL = 0x0003
ETH_P_IP = 0x0800
PACKET_OUTGOING = 4
SOL_PACKET = 263
PACKET_STATISTICS = 6  # struct tpacket_stats {tp_packets, tp_drops}
SO_RCVBUFFORCE = 33
RCVBUF = 32 << 20


class Capture:
    """UDP datagrams entering the bridge of namespace `ns` from its ports, each once, with their arrival instant."""

    def __init__(self, ns: str, *, reassemble: bool = False) -> None:
        """reassemble: IP fragments are put together into their datagram (as the receiver's kernel does before
        INPUT), instead of being counted in `fragments` and left out."""
        from orchestration.backends.netns import in_namespace

        with in_namespace(ns):
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        try:  # root: past net.core.rmem_max (a fresh machine's 208 KiB overflowed on a busy one)
            self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF)
        except OSError:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
        self.sock.setblocking(False)
        self.lost = 0  # frames the kernel dropped because this socket's buffer was full (PACKET_STATISTICS)
        self.datagrams: list[dict[str, Any]] = []
        self._drained = (0, 0)  # (an instant the socket was found empty, how many datagrams were kept by then)
        self._drained_moved = threading.Condition(threading.Lock())
        self.frames = Frames(reassemble)
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="capture", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            asked = time.monotonic_ns()
            try:
                frame, addr = self.sock.recvfrom(1 << 16)
            except BlockingIOError:
                with self.lock:
                    kept = len(self.datagrams)
                with self._drained_moved:
                    self._drained = (asked, kept)  # every frame queued before `asked` is read
                    self._drained_moved.notify_all()
                if self._stop.is_set():
                    return  # stopped, and the socket is drained
                select.select([self.sock], [], [], 0.1)
                continue
            record = self.frames.datagram(frame, addr, time.monotonic_ns())
            if record is not None:
                with self.lock:
                    self.datagrams.append(record)

    @property
    def fragments(self) -> int:
        return self.frames.fragments

    def caught_up(self, timeout: float = 10.0) -> int:
        """A barrier: the number n of datagrams kept once the capture has read every frame the kernel queued to it
        before this call. Datagrams [0, n) reached the interface before this call returned, datagrams from n on after
        it began, whatever instant the capture's thread stamped on them (a busy machine makes it late)."""
        called = time.monotonic_ns()
        with self._drained_moved:
            if not self._drained_moved.wait_for(lambda: self._drained[0] >= called, timeout):
                raise TimeoutError(f"the capture did not drain its socket within {timeout:g} s")
            return self._drained[1]

    def _read_lost(self) -> None:
        """Adds the kernel's drop count for this socket since the last reading (reading resets it)."""
        with contextlib.suppress(OSError):
            _packets, drops = struct.unpack("II", self.sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
            self.lost += drops

    def stop(self) -> None:
        """Stops the capture once its socket is drained; `lost` then counts the frames it never saw."""
        self._stop.set()
        self._thread.join(10)
        self._read_lost()
        self.sock.close()

    def carries(self, needle: bytes) -> bool:
        """Some datagram so far contains these bytes (e.g. a msg_id and its NUL)."""
        with self.lock:
            return any(needle in d["payload"] for d in self.datagrams)

    def keys(self) -> collections.Counter[str]:
        """How many of each header key (UNICAST2.STABLE, ...) the datagrams so far carry."""
        with self.lock:
            payloads = [d["payload"] for d in self.datagrams]
        counts: collections.Counter[str] = collections.Counter()
        for p in payloads:
            for m in wire.decode(p).messages:
                counts.update(h.key for h in m.headers)
        return counts


class Frames:
    """The UDP datagrams in captured Ethernet frames: frames leaving the interface, the bridge's own copies and what
    is not IPv4 UDP are skipped; an IP fragment is counted in `fragments` and, with `reassemble`, put together with
    the others of its datagram."""

    def __init__(self, reassemble: bool) -> None:
        self.reassemble = reassemble
        self.fragments = 0
        self._pieces: dict[tuple[bytes, bytes, int], dict[int, tuple[bytes, bool]]] = {}

    def datagram(self, frame: bytes, addr: tuple[Any, ...], t: int) -> dict[str, Any] | None:
        """The datagram a frame completes (src_ip, dst_ip, ports, payload, t: the instant given), or None."""
        ifname, proto, pkttype = addr[0], addr[1], addr[2]
        if pkttype == PACKET_OUTGOING or ifname == "br0" or proto != ETH_P_IP or len(frame) < 34:
            return None
        ip = frame[14:]
        ihl = (ip[0] & 0x0F) * 4
        if ip[9] != 17:
            return None  # not UDP (FD_SOCK's TCP, IGMP)
        total = int.from_bytes(ip[2:4], "big")
        udp = ip[ihl:total]
        if int.from_bytes(ip[6:8], "big") & 0x3FFF:
            # an IP fragment; a last one may carry less than a UDP header's 8 bytes (skipped as too short for one,
            # it kept its datagram out of the discard bench's truth)
            self.fragments += 1
            whole = self._fragment(ip, udp) if self.reassemble else None
            if whole is None:
                return None
            udp = whole
        if len(udp) < 8:
            return None
        return {
            "t": t,
            "src_ip": socket.inet_ntoa(ip[12:16]),
            "dst_ip": socket.inet_ntoa(ip[16:20]),
            "src_port": int.from_bytes(udp[0:2], "big"),
            "dst_port": int.from_bytes(udp[2:4], "big"),
            "payload": bytes(udp[8 : int.from_bytes(udp[4:6], "big")]),
        }

    def _fragment(self, ip: bytes, piece: bytes) -> bytes | None:
        """The whole UDP datagram once every fragment of it arrived (None until then)."""
        flags = int.from_bytes(ip[6:8], "big")
        key = (bytes(ip[12:16]), bytes(ip[16:20]), int.from_bytes(ip[4:6], "big"))
        pieces = self._pieces.setdefault(key, {})
        pieces[(flags & 0x1FFF) * 8] = (bytes(piece), bool(flags & 0x2000))
        at, parts = 0, []
        while at in pieces:
            data, more = pieces[at]
            parts.append(data)
            at += len(data)
            if not more:
                del self._pieces[key]
                return b"".join(parts)
        return None
