"""Drives a member's stack with real time and real sockets.

Transports:
- `udp`: unicast datagrams between members and IP multicast for group messages. Sockets are non-blocking and read
  until EAGAIN from `loop.add_reader` callbacks (asyncio's DatagramProtocol reads one datagram per loop pass), then
  the whole batch is handled and the stack's output bundled and sent once. With `ip_mcast = false` (JGroups' UDP
  `ip_mcast=false`) a group message is a unicast datagram to every known peer instead, and no multicast socket is
  opened: for networks that carry no IP multicast (Docker's overlay networks, most clouds).
- `tcp`: one connection per pair of members, carrying length-prefixed datagrams; a multicast is sent to every
  peer (TCP does the retransmission, so NAKACK2 may run with xmit_interval <= 0).

Standard library only. Peers are static: the orchestrator gives every member the name -> (ip, port) table.
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import struct
from dataclasses import dataclass, field

from node.addresses import make_address, name_of
from node.history import HistoryWriter
from node.payload import make_payload, msg_id_prefix
from node.stack import Stack, build_stack
from node.wire import datagram_source
from node.workload import POLL, Workload

RECV_BUFFER = 4 * 1024 * 1024
MAX_DATAGRAM = 65_535
_FRAME = struct.Struct("!I")
TCP_MAX_BUFFERED = 8 * 1024 * 1024  # bytes queued to one peer before frames are dropped (the protocols recover)
TCP_MAX_PENDING = 10_000  # frames queued while connecting


@dataclass
class MemberConfig:
    """Everything a member needs to start; the orchestrator writes it as JSON (see node/__main__.py)."""

    name: str
    ip: str
    port: int
    peers: dict[str, tuple[str, int]]  # every member's name -> (ip, data port), this one included
    history: str
    incarnation: int = 1
    cluster: str = "chaosbed"
    stack: str = "unicast3"
    properties: dict[str, dict[str, object]] = field(default_factory=dict)
    transport: str = "udp"
    mcast_group: str = "239.255.77.1"
    mcast_port: int = 0  # 0: port + 10000
    mcast_loop: bool = False  # True when members share a host (process backend)
    ip_mcast: bool = True  # False: a multicast is a unicast to every peer (networks without IP multicast)
    control_port: int = 0  # 0: port + 1
    token: str = ""
    conn_id_start: int = 0  # 0: from the pid and time
    # learn a peer's unicast address from the datagrams it sends (compose replicas, whose addresses DNS gives only
    # late): a member that answers a newcomer's discovery must know where to send the answer
    learn_peers: bool = False

    def validate(self) -> None:
        if self.transport not in ("udp", "tcp"):
            raise ValueError(f"transport must be udp or tcp, not {self.transport!r}")
        if self.name not in self.peers:
            raise ValueError(f"peers must include this member ({self.name})")
        if not self.token:
            raise ValueError("a control token is required")


class Member:
    """One running member: sockets, the stack, the history, the workload senders."""

    def __init__(self, cfg: MemberConfig) -> None:
        cfg.validate()
        self.cfg = cfg
        self.address = make_address(cfg.name, cfg.incarnation)
        conn_id_start = cfg.conn_id_start or ((os.getpid() << 16) ^ (int.from_bytes(os.urandom(4), "big")))
        self.stack: Stack = build_stack(
            self.address, cfg.stack, cfg.properties, cluster=cfg.cluster, conn_id_start=conn_id_start
        )
        self.history = HistoryWriter(cfg.history, cfg.name, cfg.incarnation)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.peers = {name: (ip, int(port)) for name, (ip, port) in cfg.peers.items()}
        self.c = {
            "send_errors": 0,
            "recv_batches": 0,
            "unknown_peer": 0,
            "tcp_connects": 0,
            "tcp_frames_in": 0,
            "tcp_bad_frames": 0,
            "peers_learned": 0,
        }
        self._learned: set[tuple[str, int]] = set()  # addresses whose sender is known (learn_peers)
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = float("inf")
        self._sockets: list[socket.socket] = []
        self._tcp_out: dict[str, asyncio.StreamWriter] = {}
        self._tcp_pending: dict[str, list[bytes]] = {}
        self._tasks: set[asyncio.Future[None]] = set()
        self._tcp_server: asyncio.base_events.Server | None = None
        self._msg_counter: dict[str, int] = {}  # dest name ("*": multicast) -> messages this incarnation sent
        # peer name -> incarnation, as the orchestrator announced it (stacks without membership have no view)
        self.announced_incarnations: dict[str, int] = {}
        self.stopped = asyncio.Event()

    # --- start and stop -------------------------------------------------------------------------------------------

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        if self.cfg.transport == "udp":
            self._start_udp()
        else:
            await self._start_tcp()
        self.history.start(self.address, self.cfg.stack, self.cfg.transport)
        self.after_io()

    def _start_udp(self) -> None:
        cfg = self.cfg
        uc = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        uc.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECV_BUFFER)
        uc.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, RECV_BUFFER)
        uc.bind((cfg.ip, cfg.port))
        uc.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(cfg.ip))
        uc.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1 if cfg.mcast_loop else 0)
        uc.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
        uc.setblocking(False)
        self.ucast = uc
        self._sockets = [uc]
        if cfg.ip_mcast:
            self._sockets.append(self._multicast_socket())
        assert self.loop is not None
        for s in self._sockets:
            self.loop.add_reader(s.fileno(), self._read_udp, s)

    def _multicast_socket(self) -> socket.socket:
        cfg = self.cfg
        mc = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        mc.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        mc.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        mc.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECV_BUFFER)
        mc.bind((cfg.mcast_group, self.mcast_port))
        mreq = socket.inet_aton(cfg.mcast_group) + socket.inet_aton(cfg.ip)
        mc.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
        mc.setblocking(False)
        return mc

    @property
    def running_loop(self) -> asyncio.AbstractEventLoop:
        """The event loop the member runs on (from `start` on)."""
        loop = self.loop
        assert loop is not None, "the member has not started"
        return loop

    @property
    def mcast_port(self) -> int:
        return self.cfg.mcast_port or self.cfg.port + 10000

    async def stop(self) -> None:
        """Graceful end: the `stop` event with the final counters, history flushed, sockets closed."""
        if self.stopped.is_set():
            return
        mcast = self.stack.multicast_protocol
        if mcast is not None:
            mcast.close()
        self.history.stop(self.counters())
        self.history.close()
        if self._timer:
            self._timer.cancel()
        assert self.loop is not None
        for s in self._sockets:
            self.loop.remove_reader(s.fileno())
            s.close()
        for w in self._tcp_out.values():
            w.close()
        if self._tcp_server is not None:
            self._tcp_server.close()
        self.stopped.set()

    # --- UDP ------------------------------------------------------------------------------------------------------

    def _read_udp(self, sock: socket.socket) -> None:
        """Reads until EAGAIN, then handles the output of the whole batch once."""
        receive = self.stack.receive
        now = self.running_loop.time()
        recv = sock.recvfrom
        learn, learned = self.cfg.learn_peers, self._learned
        for _ in range(10_000):  # bounded: let timers and the control endpoint run under a flood
            try:
                data, _addr = recv(MAX_DATAGRAM)
            except BlockingIOError:
                break
            except OSError:
                self.c["send_errors"] += 1  # e.g. ECONNREFUSED surfaced by an earlier send on Linux
                break
            if learn and _addr not in learned:
                self._learn_peer(data, _addr)
            receive(data, now)
        self.c["recv_batches"] += 1
        self.after_io()

    def _learn_peer(self, data: bytes, addr: tuple[str, int]) -> None:
        """Records the sender's address (its unicast socket, which multicasts go out of too)."""
        head = datagram_source(data)
        if head is None or head[0] != self.cfg.cluster:
            return  # the stack counts it as malformed or foreign
        name = name_of(head[1])
        if name != self.cfg.name:
            self.peers[name] = addr
            self._learned.add(addr)
            self.c["peers_learned"] += 1

    def _send_udp(self, dest: str | None, data: bytes) -> None:
        if dest is None and not self.cfg.ip_mcast:
            for name, addr in list(self.peers.items()):
                if name != self.cfg.name:
                    self._sendto(data, addr)
            return
        target = (self.cfg.mcast_group, self.mcast_port) if dest is None else self.peers.get(name_of(dest))
        if target is None:
            self.c["unknown_peer"] += 1
            return
        self._sendto(data, target)

    def _sendto(self, data: bytes, target: tuple[str, int]) -> None:
        try:
            self.ucast.sendto(data, target)
        except OSError as e:
            # a full socket buffer or an unreachable peer: the datagram is lost, the protocols retransmit
            if e.errno not in (errno.EAGAIN, errno.ENOBUFS, errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH):
                raise
            self.c["send_errors"] += 1

    # --- TCP ------------------------------------------------------------------------------------------------------

    async def _start_tcp(self) -> None:
        self._tcp_server = await asyncio.start_server(self._tcp_accept, self.cfg.ip, self.cfg.port)

    async def _tcp_accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readexactly(_FRAME.size)
                (n,) = _FRAME.unpack(head)
                if n > MAX_DATAGRAM:
                    self.c["tcp_bad_frames"] += 1
                    break
                data = await reader.readexactly(n)
                self.c["tcp_frames_in"] += 1
                self.stack.receive(data, self.running_loop.time())
                self.after_io()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def _send_tcp(self, dest: str | None, data: bytes) -> None:
        names = [n for n in self.peers if n != self.cfg.name] if dest is None else [name_of(dest)]
        frame = _FRAME.pack(len(data)) + data
        for name in names:
            writer = self._tcp_out.get(name)
            if writer is not None and not writer.is_closing():
                if writer.transport.get_write_buffer_size() > TCP_MAX_BUFFERED:
                    self.c["send_errors"] += 1  # a peer that does not read (paused, partitioned): drop, not grow
                else:
                    writer.write(frame)
                continue
            pending = self._tcp_pending.get(name)
            if pending is not None:  # a connection attempt is under way: keep the order
                if len(pending) < TCP_MAX_PENDING:
                    pending.append(frame)
                else:
                    self.c["send_errors"] += 1
                continue
            if name not in self.peers:
                self.c["unknown_peer"] += 1
                continue
            self._tcp_pending[name] = [frame]
            task = asyncio.ensure_future(self._tcp_connect(name))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _tcp_connect(self, name: str) -> None:
        ip, port = self.peers[name]
        try:
            _, writer = await asyncio.open_connection(ip, port)
        except OSError:
            self.c["send_errors"] += len(self._tcp_pending.pop(name, []))
            return
        self._tcp_out[name] = writer
        self.c["tcp_connects"] += 1
        for frame in self._tcp_pending.pop(name, []):
            writer.write(frame)

    # --- the stack's output ---------------------------------------------------------------------------------------

    def after_io(self) -> None:
        """Sends what the stack produced, records history, re-arms the timer. The send lines written so far reach the
        OS before their datagrams leave: a member killed (SIGKILL) between the two would otherwise leave a message
        that its receiver delivers and whose send its history lacks (a phantom; seen in a 10-minute soak)."""
        out = self.stack.drain()
        h = self.history
        h.flush()
        send = self._send_udp if self.cfg.transport == "udp" else self._send_tcp
        for dest, data in out.datagrams:
            send(dest, data)
        for d in out.delivers:
            h.delivered(d)
        if out.events:
            h.protocol_events(out.events)
        h.flush()
        if self.stack.has_left and not self.stopped.is_set():
            # left the group gracefully: the member ends (stop event, exit) as a disconnected JGroups member does
            self.running_loop.call_soon(asyncio.ensure_future, self.stop())
            return
        self._arm_timer()

    def _arm_timer(self) -> None:
        wake = self.stack.next_wakeup()
        if wake >= self._timer_at and self._timer is not None:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = wake
        if wake != float("inf"):
            self._timer = self.running_loop.call_at(wake, self._on_timer)
        else:
            self._timer = None

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = float("inf")
        self.stack.tick(self.running_loop.time())
        self.after_io()

    # --- workload -------------------------------------------------------------------------------------------------

    def _next_msg_ids(self, dest: str, n: int) -> tuple[str, range]:
        """The msg_id prefix and the counters of this incarnation's next n messages to `dest` (a member name, "*"
        for multicast): the ids are prefix + str(counter) (node/payload.py)."""
        first = self._msg_counter.get(dest, 0) + 1
        self._msg_counter[dest] = first + n - 1
        return msg_id_prefix(self.address, dest), range(first, first + n)

    def multicast_burst(self, n: int, size: int) -> None:
        """n workload multicasts, each with its msg_id, payload, seqno and `send` line; the clock and the history
        line's constant part are looked up once."""
        multicast = self.stack.multicast
        now = self.running_loop.time()
        prefix, counters = self._next_msg_ids("*", n)
        write = self.history.sends("multicast", None, None, None)
        for i in counters:
            msg_id = f"{prefix}{i}"
            payload = make_payload(msg_id, size)
            write(multicast(payload, now), msg_id, len(payload))

    def send_burst(self, dest_name: str, dest: str, n: int, size: int) -> None:
        """n workload unicasts to dest_name at address `dest` (Stack.peer_address), each with its msg_id, payload,
        seqno and `send` line; what is the same for all of them is looked up once: nothing between them (no receive,
        no timer) can change the destination's address or, after the first, the connection."""
        stack = self.stack
        now = self.running_loop.time()
        send, out = stack.unicast.send, stack.out
        prefix, counters = self._next_msg_ids(dest_name, n)
        write = None
        for i in counters:
            msg_id = f"{prefix}{i}"
            payload = make_payload(msg_id, size)
            seqno = send(dest, payload, now, out)
            if write is None:  # the connection is known once the first message opened it
                write = self.history.sends("unicast", dest_name, stack.unicast.send_conn_id(dest), dest)
            write(seqno, msg_id, len(payload))

    def peer_address(self, name: str) -> str:
        """The address this member sends to for peer `name` (Stack.peer_address: its view, else what the
        orchestrator announced)."""
        if name not in self.peers:
            raise ValueError(f"unknown peer {name!r}; peers: {', '.join(sorted(self.peers))}")
        return self.stack.peer_address(name, self.announced_incarnations)

    def new_workload(self, kind: str, dest: str | None, count: int, size: int, rate: float | None) -> Workload:
        """A workload task starting now (node/workload.py); run it with `run_workload`."""
        loop = self.loop
        assert loop is not None
        return Workload(kind, dest, count, size=size, rate=rate, start=loop.time(), granularity=POLL)

    async def run_workload(self, task: Workload) -> None:
        """Runs a workload task until it is done or the member stops: sends what is due (in bursts), hands the
        stack's output to the network, then sleeps until the task's next wakeup (after a burst without a rate: a
        zero sleep), so that receiving, acks and timers interleave with sending."""
        loop = self.loop
        assert loop is not None
        while True:
            if self.stopped.is_set():
                task.stop()
                return
            name = task.dest  # a member name for unicast, None for multicast
            dest = self.stack.peer_address(name, self.announced_incarnations) if name is not None else None
            n = task.due_on(self.stack, loop.time(), dest)
            if n and name is not None and dest is not None:
                self.send_burst(name, dest, n, task.size)
            elif n:
                self.multicast_burst(n, task.size)
            if n:
                self.after_io()
            if task.done:
                return
            await asyncio.sleep(max(0.0, task.next_wakeup() - loop.time()))

    # --- introspection --------------------------------------------------------------------------------------------

    def counters(self) -> dict[str, object]:
        stats: dict[str, object] = dict(self.stack.counters())
        stats["runtime"] = dict(self.c)
        stats.update(self.stack.progress())
        return stats
