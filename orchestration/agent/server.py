"""The chaos agent's endpoint: JSON lines over TCP, like a member's control endpoint (node/control.py), one reply
line per request line, a connection may carry several. Every request carries the agent's token (compared in
constant time); a request without it, or with another, gets an error and nothing else.

Requests (`{"token": ..., "cmd": ..., ...}`; replies `{"ok": true, ...}` or `{"ok": false, "error": ...}`):

  hello                          host name, boot id, CLOCK_MONOTONIC and CLOCK_REALTIME now (the orchestrator
                                 estimates this host's clock offset from these, host.py's callers: client.py), and
                                 the agent's pid (in its host's pid namespace)
  prepare   cluster, lease_s     registers a cluster, its lease starts; returns its history folder on this host
  lease     cluster              renews the lease (every cluster request does); says whether it had run out
  attach    cluster, members, transport      attaches the local members' namespaces; their addresses and pids
  faults    cluster, endpoints, records, shift_ns, generation   the cluster's whole fault table, installed on the
                                 local members (unless a later generation is in force already)
  stats     cluster              the faults with what their handler rules did, kernel counters, queue bypass
  installed cluster              the kernel rules and handlers left in the local members' namespaces
                                 (these two do not renew the lease: an observer may ask them)
  member    cluster, name, action, timeout       kill | term | pause | resume | state of a local member
  control   cluster, name, request, port, timeout    a control request relayed to a local member
  history   cluster, name, offset                a chunk of a local member's history file
  release   cluster, remove_files                heal, detach, forget

A lease that runs out (no renewing request for the cluster within lease_s) heals the cluster's faults on this host:
an orchestrator that died or lost this host leaves no rule behind.
"""

from __future__ import annotations

import hmac
import json
import os
import socketserver
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from chaos.faults import FaultRecord
from orchestration.agent.host import AgentError, ClusterOnHost, Host
from orchestration.agent.replies import HelloReply

MAX_LINE = 64 << 20  # a `faults` request with many records, or a reply with a history chunk
EXPIRY_CHECK_S = 0.25
T = TypeVar("T")
Request = Mapping[str, object]  # a request line's JSON object


def boot_id() -> str:
    """This kernel's boot id: hosts that share it share CLOCK_MONOTONIC exactly (the engines of one machine)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _arg(req: Request, key: str, kind: type[T] | tuple[type[T], ...]) -> T:
    value = req.get(key)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise AgentError(f"{req.get('cmd')}: {key} must be {getattr(kind, '__name__', kind)}, not {value!r}")
    return value


def _seconds(req: Request, key: str, default: float) -> float:
    """An optional number of seconds (float() of it, as JSON gives it: a number; TypeError for what float() refuses,
    a bad request)."""
    value = req.get(key, default)
    if not isinstance(value, int | float | str):
        raise TypeError(f"{key} must be a number of seconds, not {value!r}")
    return float(value)


class Agent:
    """The requests of one agent (see the module docstring), on its Host."""

    def __init__(self, host: Host, token: str) -> None:
        self.host = host
        self.token = token.encode()
        self.stopping = threading.Event()

    def handle(self, req: object) -> dict[str, object]:
        if not isinstance(req, dict):
            return {"ok": False, "error": "a request is a JSON object"}
        token = req.get("token")
        if not isinstance(token, str) or not hmac.compare_digest(token.encode(), self.token):
            return {"ok": False, "error": "bad or missing token"}
        cmd = req.get("cmd")
        handler = self._commands().get(cmd if isinstance(cmd, str) else "")
        if handler is None:
            return {"ok": False, "error": f"unknown command {cmd!r}; commands: {', '.join(self._commands())}"}
        try:
            return {"ok": True, **handler(req)}
        except AgentError as e:
            return {"ok": False, "error": str(e)}
        except (KeyError, TypeError, ValueError) as e:
            return {"ok": False, "error": f"{cmd}: bad request ({type(e).__name__}: {e})"}

    def _commands(self) -> dict[str, Callable[[Request], Mapping[str, object]]]:
        return {
            "hello": self.hello,
            "prepare": lambda r: self.host.prepare(_arg(r, "cluster", str), float(_arg(r, "lease_s", (int, float)))),
            "lease": lambda r: self.host.renew(self._cluster(r)),
            "attach": lambda r: self.host.attach(
                self._cluster(r), _arg(r, "members", list), _arg(r, "transport", str), _seconds(r, "timeout", 30.0)
            ),
            "faults": self.faults,
            "stats": lambda r: self.host.stats(self._cluster(r, renew=False)),
            "installed": lambda r: self.host.installed(self._cluster(r, renew=False)),
            "member": self.member,
            "control": self.control,
            "history": lambda r: self.host.history(self._cluster(r), _arg(r, "name", str), _arg(r, "offset", int)),
            "release": self.release,
        }

    def _cluster(self, req: Request, *, renew: bool = True) -> ClusterOnHost:
        """The request's cluster, its lease renewed (not by the questions an observer may ask too)."""
        c = self.host.cluster(req.get("cluster"))
        if renew:
            self.host.renew(c)
        return c

    def hello(self, req: Request) -> HelloReply:
        return {"host": self.host.name, "boot_id": boot_id(), "mono_ns": time.monotonic_ns(), "real_ns": time.time_ns(),
                "pid": os.getpid()}  # fmt: skip

    def faults(self, req: Request) -> dict[str, object]:
        c = self._cluster(req)
        records = [FaultRecord.from_json(r) for r in _arg(req, "records", list)]
        endpoints = {str(n): str(ip) for n, ip in _arg(req, "endpoints", dict).items()}
        installed = self.host.install(c, endpoints, records, _arg(req, "shift_ns", int), _arg(req, "generation", int))
        return {"installed": len(records) if installed else None}

    def member(self, req: Request) -> dict[str, object]:
        c = self._cluster(req)
        timeout = _seconds(req, "timeout", 10.0)
        return self.host.member(c, _arg(req, "name", str), _arg(req, "action", str), timeout)

    def control(self, req: Request) -> dict[str, object]:
        c = self._cluster(req)
        timeout = _seconds(req, "timeout", 10.0)
        name, request, port = _arg(req, "name", str), _arg(req, "request", dict), _arg(req, "port", int)
        return {"reply": self.host.control(c, name, request, port, timeout)}

    def release(self, req: Request) -> dict[str, object]:
        c = self.host.cluster(req.get("cluster"))
        self.host.release(c, bool(req.get("remove_files", True)))
        return {}

    def watch_leases(self) -> None:
        """Heals the clusters whose lease ran out, until the agent stops."""
        while not self.stopping.wait(EXPIRY_CHECK_S):
            self.host.expire()


class _Connection(socketserver.StreamRequestHandler):
    server: Server

    def handle(self) -> None:
        while not self.server.agent.stopping.is_set():
            line = self.rfile.readline(MAX_LINE)
            if not line:
                return
            try:
                req = json.loads(line)
            except ValueError:
                reply: dict[str, object] = {"ok": False, "error": "a request is one JSON object per line"}
            else:
                reply = self.server.agent.handle(req)
            self.wfile.write(json.dumps(reply).encode() + b"\n")
            self.wfile.flush()


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], agent: Agent) -> None:
        self.agent = agent
        super().__init__(address, _Connection)
