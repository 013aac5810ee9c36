"""naive-rb: a deliberately naive "reliable" messaging member, to show chaosbed finding what it gets wrong.

Unicast: each message goes out as one UDP datagram; the receiver delivers whatever arrives and acks it; a message
not acked within RETRY_AFTER is sent once more, then given up. Multicast: one datagram to the group, no retry.
Its flaws (what a one-way partition shows): a retry is delivered again (no duplicate check: a lost ack means a
duplicate), and a message whose datagram and retry are both lost is gone. Standard library only; it speaks chaosbed's
two contracts (docs/contracts/): the history (JSON lines) and the control endpoint (JSON lines on TCP port + 1).

    python3 member.py CONFIG.json          (chaosbed writes the config; the token may come from CHAOSBED_TOKEN)
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import socketserver
import sys
import threading
import time
from typing import Any

RETRY_AFTER, RETRIES = 0.5, 1


class History:
    """Append-only JSON lines, CLOCK_MONOTONIC ns, one whole line per write; nothing after `stop`."""

    def __init__(self, path: str, name: str, incarnation: int) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        size = os.fstat(self.fd).st_size
        if size and os.pread(self.fd, 1, size - 1) != b"\n":
            os.write(self.fd, b"\n")  # end the line a killed incarnation cut off
        self.base = {"member": name, "incarnation": incarnation}
        self.lock, self.closed, self.events = threading.RLock(), False, 0  # a SIGTERM may come mid-write

    def clock(self) -> int:
        return time.monotonic_ns()

    def write(self, event: str, **fields: Any) -> None:
        with self.lock:
            if self.closed:
                return
            line = {"t": self.clock(), **self.base, "event": event, **fields}
            os.write(self.fd, (json.dumps(line, separators=(",", ":")) + "\n").encode())
            self.events += 1
            self.closed = event == "stop"


class Member:
    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg, self.name, self.address = cfg, cfg["name"], cfg["address"]
        self.token = os.environ.get("CHAOSBED_TOKEN") or cfg["token"]
        self.peers = {n: (ip, port) for n, (ip, port) in cfg["peers"].items() if n != self.name}
        self.history = History(cfg["history"], self.name, cfg["incarnation"])
        self.lock = threading.Lock()
        self.next = {}  # dest name ("*" for multicast) -> next seqno
        self.unacked = {}  # (dest, seqno) -> [datagram, sent at, retries left]
        self.tasks, self.counters = {}, {"sent": 0, "delivered": 0, "retries": 0, "given_up": 0}
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind((cfg["ip"], cfg["port"]))
        self.udp.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(cfg["ip"]))
        self.mcast = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.mcast.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.mcast.bind((cfg["mcast_group"], cfg["mcast_port"]))
        mreq = socket.inet_aton(cfg["mcast_group"]) + socket.inet_aton(cfg["ip"])
        self.mcast.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)

    def send(self, dest: str, size: int) -> None:
        """One message to `dest`: a member's name, or "*" (the group)."""
        with self.lock:
            seqno = self.next[dest] = self.next.get(dest, 0) + 1
        msg_id = f"{self.address}>{dest}#{seqno}"
        payload = (msg_id + "\0").ljust(size, "x")
        head = {"kind": "multicast" if dest == "*" else "unicast", "from": self.name, "seq": seqno, "body": payload}
        data = json.dumps(head).encode()
        fields = {"sender": self.name, "seqno": seqno, "msg_id": msg_id, "size": len(payload)}
        if dest == "*":
            self.history.write("send", kind="multicast", dest=None, conn_id=None, **fields)
            self.udp.sendto(data, (self.cfg["mcast_group"], self.cfg["mcast_port"]))
            self.deliver(head)  # a sender delivers its own multicasts too
        else:
            self.history.write("send", kind="unicast", dest=dest, conn_id=self.address, **fields)
            with self.lock:
                self.unacked[(dest, seqno)] = [data, time.monotonic(), RETRIES]
            self.udp.sendto(data, self.peers[dest])
        self.counters["sent"] += 1

    def deliver(self, head: dict[str, Any]) -> None:
        kind = head["kind"]
        msg_id = head["body"].split("\0", 1)[0]
        dest, conn = (None, None) if kind == "multicast" else (self.name, msg_id.split(">", 1)[0])
        self.history.write("deliver", kind=kind, sender=head["from"], dest=dest, conn_id=conn, seqno=head["seq"],
                           msg_id=msg_id, size=len(head["body"]))  # fmt: skip
        self.counters["delivered"] += 1

    def receive(self, sock: socket.socket) -> None:
        data, source = sock.recvfrom(65536)
        head = json.loads(data)
        if head["from"] == self.name:
            return  # our own multicast, looped back
        if head["kind"] == "ack":
            with self.lock:
                self.unacked.pop((head["from"], head["seq"]), None)
            return
        self.deliver(head)  # the naive part: whatever arrives is delivered, a retry again
        if head["kind"] == "unicast":
            self.udp.sendto(json.dumps({"kind": "ack", "from": self.name, "seq": head["seq"]}).encode(), source)

    def network(self) -> None:
        sel = selectors.DefaultSelector()
        for sock in (self.udp, self.mcast):
            sel.register(sock, selectors.EVENT_READ)
        while True:
            for key, _ in sel.select(timeout=0.05):
                self.receive(key.fileobj)
            now = time.monotonic()
            with self.lock:
                due = [(k, v) for k, v in self.unacked.items() if now - v[1] >= RETRY_AFTER]
                for (dest, seqno), entry in due:
                    if entry[2] == 0:
                        del self.unacked[(dest, seqno)]
                        self.counters["given_up"] += 1
                        continue
                    entry[1], entry[2] = now, entry[2] - 1
                    self.counters["retries"] += 1
                    self.udp.sendto(entry[0], self.peers[dest])

    def run_task(self, task: dict[str, Any], dest: str, count: int, size: int, rate: float | None) -> None:
        for i in range(count):
            if rate:
                time.sleep(max(0.0, task["start"] + i / rate - time.monotonic()))
            self.send(dest, size)
            task["sent"] += 1
        task["done"] = True

    def command(self, req: dict[str, Any]) -> dict[str, Any]:
        cmd = req.get("cmd")
        if req.get("token") != self.token:
            return {"ok": False, "error": "bad or missing token"}
        if cmd == "ping":
            inc = self.cfg["incarnation"]
            return {"ok": True, "member": self.name, "address": self.address, "pid": os.getpid(), "incarnation": inc}
        if cmd in ("send", "multicast"):
            dest = "*" if cmd == "multicast" else req.get("to")
            if dest != "*" and dest not in self.peers:
                return {"ok": False, "error": f"unknown destination {dest!r}"}
            count, size, rate = int(req.get("count", 1)), int(req.get("size", 0)), req.get("rate")
            task = {"kind": "multicast" if dest == "*" else "unicast", "dest": dest, "count": count, "sent": 0,
                    "done": False, "start": time.monotonic()}  # fmt: skip
            self.tasks[str(len(self.tasks) + 1)] = task
            threading.Thread(target=self.run_task, args=(task, dest, count, size, rate), daemon=True).start()
            return {"ok": True, "task": len(self.tasks)}
        replies = {
            "tasks": lambda: {"tasks": self.tasks},
            "view": lambda: {"view": None},  # naive-rb has no membership
            "stats": lambda: {"counters": dict(self.counters, unacked=len(self.unacked))},
            "flush": lambda: {"events_written": self.history.events},
        }
        if cmd == "shutdown":
            threading.Timer(0.05, self.stop).start()
            return {"ok": True, "bye": True}
        if cmd in replies:
            return {"ok": True, **replies[cmd]()}
        return {"ok": False, "error": f"unknown command {cmd!r}"}

    def stop(self, *_: object) -> None:
        self.history.write("stop", counters=dict(self.counters))
        os._exit(0)


def serve_control(member: Member, ip: str, port: int) -> None:
    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            for line in self.rfile:
                try:
                    reply = member.command(json.loads(line))
                except (ValueError, TypeError, AttributeError) as e:
                    reply = {"ok": False, "error": f"bad request: {e}"}
                self.wfile.write(json.dumps(reply).encode() + b"\n")

    socketserver.ThreadingTCPServer.allow_reuse_address = True
    server = socketserver.ThreadingTCPServer((ip, port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()


def main(argv: list[str], member_class: type[Member] = Member) -> None:
    with open(argv[1] if len(argv) > 1 else os.environ["CHAOSBED_CONFIG"]) as f:
        cfg = json.load(f)
    member = member_class(cfg)
    signal.signal(signal.SIGTERM, member.stop)
    member.history.write("start", address=member.address, stack="naive-rb", transport="udp")
    serve_control(member, cfg["ip"], cfg["port"] + 1)
    member.network()


if __name__ == "__main__":
    main(sys.argv)
