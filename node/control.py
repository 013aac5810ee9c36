"""The control endpoint the orchestrator talks to: JSON lines over TCP, one request and one reply per line.

Every request carries the member's token: {"token": "...", "cmd": "...", ...}. Replies are {"ok": true, ...} or
{"ok": false, "error": "..."}. A malformed or unknown command gets an error reply and the member goes on.

Commands: ping | stats | view | send (to, count, size, rate) | multicast (count, size, rate) | tasks |
close (peer) | set (protocol, property, value) | incarnation (peer, incarnation) | flush | leave | shutdown
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
from typing import Any

from node.runtime import Member
from node.workload import Progress

MAX_LINE = 1 << 20

# A request as json.loads gives it: each command converts the fields it reads (int(), float(), a peer name checked
# against the member's peers), and a field of the wrong type is an error reply.
Request = dict[str, Any]
Reply = dict[str, object]  # JSON-encodable


class ControlServer:
    def __init__(self, member: Member, ip: str, port: int, token: str) -> None:
        self.member = member
        self.ip = ip
        self.port = port
        self.token = token
        self.server: asyncio.base_events.Server | None = None
        self.tasks: dict[int, Progress] = {}  # task id -> its workload's progress
        self._task_refs: set[asyncio.Task[None]] = set()
        self.c = {"requests": 0, "errors": 0, "bad_token": 0, "malformed": 0}

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._client, self.ip, self.port, limit=MAX_LINE)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    line = await reader.readline()
                except (ValueError, asyncio.LimitOverrunError):
                    self.c["malformed"] += 1
                    await self._reply(writer, {"ok": False, "error": f"request longer than {MAX_LINE} bytes"})
                    break
                if not line:
                    break
                reply = await self.handle_line(line)
                await self._reply(writer, reply)
                if reply.get("bye"):
                    break
        except ConnectionError:
            pass
        finally:
            writer.close()

    @staticmethod
    async def _reply(writer: asyncio.StreamWriter, reply: Reply) -> None:
        writer.write(json.dumps(reply, separators=(",", ":"), default=str).encode() + b"\n")
        await writer.drain()

    async def handle_line(self, line: bytes) -> Reply:
        self.c["requests"] += 1
        try:
            req = json.loads(line)
            if not isinstance(req, dict):
                raise ValueError("a request is a JSON object")
        except (ValueError, UnicodeDecodeError) as e:
            self.c["malformed"] += 1
            return {"ok": False, "error": f"malformed request: {e}"}
        if req.get("token") != self.token:
            self.c["bad_token"] += 1
            return {"ok": False, "error": "bad or missing token"}
        cmd = req.get("cmd")
        handler = getattr(self, f"cmd_{cmd}", None) if isinstance(cmd, str) else None
        if handler is None:
            self.c["errors"] += 1
            return {"ok": False, "error": f"unknown command {cmd!r}; commands: {', '.join(COMMANDS)}"}
        try:
            result = await handler(req)
        except (KeyError, TypeError, ValueError) as e:
            self.c["errors"] += 1
            return {"ok": False, "error": f"{cmd}: {e}"}
        return {"ok": True, **result}

    # --- commands -------------------------------------------------------------------------------------------------

    async def cmd_ping(self, req: Request) -> Reply:
        m = self.member
        return {"member": m.cfg.name, "address": m.address, "pid": os.getpid(), "incarnation": m.cfg.incarnation}

    async def cmd_stats(self, req: Request) -> Reply:
        stats = self.member.counters()
        stats["control"] = dict(self.c)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return {"counters": stats, "max_rss_kib": usage.ru_maxrss, "cpu_s": usage.ru_utime + usage.ru_stime}

    async def cmd_view(self, req: Request) -> Reply:
        gms = self.member.stack.gms
        view = getattr(gms, "view", None) if gms is not None else None
        if view is None:
            return {"view": None}
        return {"view": {"view_id": str(view.view_id), "members": list(view.members), "merge": view.is_merge}}

    def _start_task(self, kind: str, dest: str | None, req: Request) -> Reply:
        count = int(req.get("count", 1))
        size = int(req.get("size", 0))
        rate = req.get("rate")
        rate = float(rate) if rate is not None else None
        if count < 0 or size < 0 or (rate is not None and rate <= 0):
            raise ValueError("count and size must be >= 0, rate > 0")
        workload = self.member.new_workload(kind, dest, count, size, rate)
        task_id = len(self.tasks) + 1
        self.tasks[task_id] = workload.progress  # {"kind", "dest", "count", "sent", "done"}, updated as it runs
        task = asyncio.ensure_future(self.member.run_workload(workload))
        self._task_refs.add(task)
        task.add_done_callback(self._task_refs.discard)
        return {"task": task_id}

    async def cmd_send(self, req: Request) -> Reply:
        dest = req["to"]
        if dest not in self.member.peers or dest == self.member.cfg.name:
            raise ValueError(f"unknown destination {dest!r}; peers: {', '.join(sorted(self.member.peers))}")
        return self._start_task("unicast", dest, req)

    async def cmd_multicast(self, req: Request) -> Reply:
        if self.member.stack.multicast_protocol is None:
            raise ValueError(f"stack {self.member.cfg.stack} has no multicast protocol")
        return self._start_task("multicast", None, req)

    async def cmd_tasks(self, req: Request) -> Reply:
        return {"tasks": self.tasks}

    async def cmd_close(self, req: Request) -> Reply:
        m = self.member
        peer = req["peer"]
        m.stack.unicast.close_connection(m.peer_address(peer), m.loop.time(), m.stack.out)  # type: ignore[union-attr]
        m.after_io()
        return {}

    async def cmd_set(self, req: Request) -> Reply:
        m = self.member
        m.stack.set_property(req["protocol"], req["property"], req["value"])
        m.after_io()
        return {}

    async def cmd_incarnation(self, req: Request) -> Reply:
        """The orchestrator announces a peer's new incarnation (for stacks without membership)."""
        peer, incarnation = req["peer"], int(req["incarnation"])
        if peer not in self.member.peers or incarnation < 1:
            raise ValueError(f"unknown peer {peer!r} or bad incarnation {incarnation}")
        self.member.announced_incarnations[peer] = incarnation
        return {}

    async def cmd_flush(self, req: Request) -> Reply:
        self.member.history.flush()
        return {"events_written": self.member.history.events_written}

    async def cmd_leave(self, req: Request) -> Reply:
        m = self.member
        if m.stack.gms is None:
            raise ValueError(f"stack {m.cfg.stack} has no membership")
        m.stack.leave(m.loop.time())  # type: ignore[union-attr]
        m.after_io()
        return {}

    async def cmd_shutdown(self, req: Request) -> Reply:
        asyncio.get_running_loop().call_soon(asyncio.ensure_future, self.member.stop())
        return {"bye": True}


COMMANDS = sorted(name[4:] for name in dir(ControlServer) if name.startswith("cmd_"))
