"""The control endpoint the orchestrator talks to: JSON lines over TCP, one request and one reply per line.

Every request carries the member's token: {"token": "...", "cmd": "...", ...}. Replies are {"ok": true, ...} or
{"ok": false, "error": "..."}. A malformed or unknown command gets an error reply and the member goes on.

This module is the transport: lines, the token, the endpoint's own counters. The commands themselves (ping | stats |
view | send | multicast | tasks | close | set | incarnation | flush | leave | shutdown) are node/commands.py's,
answered against `RuntimeMember`, the running member as a `ControlledMember`.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Collection

from node import commands
from node.commands import COMMANDS, Reply, Usage, process_usage
from node.runtime import Member
from node.stack import Stack
from node.workload import Progress

__all__ = ["COMMANDS", "MAX_LINE", "ControlServer", "RuntimeMember"]

MAX_LINE = 1 << 20


class RuntimeMember:
    """A running member (node/runtime.py) as node/commands.py's ControlledMember: its workload tasks and the
    endpoint's counters (`stats` reports them under "control") are the control server's."""

    def __init__(self, member: Member, control_counters: dict[str, int]) -> None:
        self.member = member
        self.tasks: dict[int, Progress] = {}  # task id -> its workload's progress
        self._control_counters = control_counters
        self._task_refs: set[asyncio.Task[None]] = set()

    @property
    def name(self) -> str:
        return self.member.cfg.name

    @property
    def address(self) -> str:
        return self.member.address

    @property
    def incarnation(self) -> int:
        return self.member.cfg.incarnation

    @property
    def pid(self) -> int | None:
        return os.getpid()

    @property
    def stack_name(self) -> str:
        return self.member.cfg.stack

    @property
    def stack(self) -> Stack:
        return self.member.stack

    @property
    def peers(self) -> Collection[str]:
        return self.member.peers.keys()

    def counters(self) -> dict[str, object]:
        stats = self.member.counters()
        stats["control"] = dict(self._control_counters)
        return stats

    def usage(self) -> Usage:
        return process_usage()

    def start_workload(self, kind: str, dest: str | None, count: int, size: int, rate: float | None) -> Progress:
        workload = self.member.new_workload(kind, dest, count, size, rate)
        task = asyncio.ensure_future(self.member.run_workload(workload))
        self._task_refs.add(task)
        task.add_done_callback(self._task_refs.discard)
        return workload.progress

    def close_connection(self, peer: str) -> None:
        m = self.member
        m.stack.unicast.close_connection(m.peer_address(peer), m.running_loop.time(), m.stack.out)
        m.after_io()

    def set_property(self, protocol: str, name: str, value: object) -> None:
        self.member.stack.set_property(protocol, name, value)
        self.member.after_io()

    def announce_incarnation(self, peer: str, incarnation: int) -> None:
        self.member.announced_incarnations[peer] = incarnation

    def flush_history(self) -> int:
        history = self.member.history
        history.flush()
        return history.events_written

    def leave(self) -> None:
        m = self.member
        m.stack.leave(m.running_loop.time())
        m.after_io()

    def shutdown(self) -> None:
        """Stops after this request's reply is on its way."""
        asyncio.get_running_loop().call_soon(asyncio.ensure_future, self.member.stop())


class ControlServer:
    def __init__(self, member: Member, ip: str, port: int, token: str) -> None:
        self.member = member
        self.ip = ip
        self.port = port
        self.token = token
        self.server: asyncio.base_events.Server | None = None
        self.c = {"requests": 0, "errors": 0, "bad_token": 0, "malformed": 0}
        self.controlled = RuntimeMember(member, self.c)

    @property
    def tasks(self) -> dict[int, Progress]:
        """The workload tasks the commands started, by id."""
        return self.controlled.tasks

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
        """The reply to one request line: the line parsed and the token checked here, the command answered by
        node/commands.py."""
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
        reply = commands.handle(self.controlled, req)
        if not reply["ok"]:
            self.c["errors"] += 1
        return reply
