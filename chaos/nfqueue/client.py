"""The one client of a handler: `HandlerClient` drives a running handler over its control socket (any process can,
knowing only the socket path: a later `chaosbed fault` drives the handler an earlier one started), and
`HandlerProcess` starts one and owns its process. The netns fault engine (chaos/netns_engine.py), the tests and the
benchmark all use these."""

from __future__ import annotations

import errno
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from chaos.nfqueue.netlink import QueueError
from chaos.nfqueue.rule import RuleValidationError
from node import jsonl

LOG_TAIL = 1500  # characters of the handler's log quoted when it did not start


class HandlerStartError(QueueError):
    """The handler process did not report ready; `reason` is its own error line, its log's tail, or the timeout."""

    def __init__(self, reason: str) -> None:
        super().__init__(errno.EIO, f"NFQUEUE handler did not start: {reason}")
        self.reason = reason


class HandlerClient:
    """Requests to the handler listening on `control_path` (JSON lines, one connection per request). The socket file
    lives in the root filesystem, so it is reachable from any namespace."""

    def __init__(self, control_path: str) -> None:
        self.control_path = control_path

    def _connect(self) -> socket.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(self.control_path)
        except BaseException:
            s.close()
            raise
        return s

    def request(self, req: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
        """The handler's reply to one request, ok or not (node/jsonl.py's errors when there is none)."""
        return jsonl.request(self._connect, req, timeout, peer="the NFQUEUE handler")

    def set_rules(self, rules: list[dict[str, Any]], timeout: float = 10.0) -> None:
        """Replaces the rules atomically; raises RuleValidationError with the handler's reason if it refused them."""
        reply = self.request({"cmd": "rules", "rules": rules}, timeout)
        if not reply.get("ok"):
            raise RuleValidationError(reply.get("error", "rules rejected"))

    def stats(self, timeout: float = 10.0) -> dict[str, Any]:
        return self.request({"cmd": "stats"}, timeout)["stats"]


class HandlerProcess(HandlerClient):
    """A handler this process started (see `start`) and can stop, signal and wait for."""

    def __init__(self, proc: subprocess.Popen[bytes], control_path: str, ready: dict[str, Any]) -> None:
        super().__init__(control_path)
        self.proc = proc
        self.ready = ready
        self.pid: int = proc.pid

    @classmethod
    def start(
        cls,
        ns: str | None,
        queue: int,
        control_path: str,
        *,
        max_len: int | None = None,
        local_ip: str | None = None,
        tag: str | None = None,
        timeout: float = 15.0,
        log: Path | None = None,
        new_session: bool = False,
        cwd: str | None = None,
    ) -> HandlerProcess:
        """Runs ``python -m chaos.nfqueue`` inside namespace `ns` (with `ip netns exec`; here if None) and waits up to
        `timeout` for its ready line. `log` receives its stderr (else it inherits ours); `new_session` detaches it
        from our terminal's signals, for a handler that outlives this process. Raises HandlerStartError (an
        OSError whose message carries the handler's reason, e.g. that the queue is already bound)."""
        cmd = [sys.executable, "-m", "chaos.nfqueue", "--queue", str(queue), "--control", control_path]
        if max_len:
            cmd += ["--max-len", str(max_len)]
        if local_ip:
            cmd += ["--local-ip", local_ip]
        if tag:
            cmd += ["--tag", tag]
        if ns is not None:
            cmd = ["ip", "netns", "exec", ns, *cmd]
        stderr = open(log, "ab") if log is not None else None  # noqa: SIM115 - owned by the child
        try:
            proc = subprocess.Popen(
                cmd,
                stdout=subprocess.PIPE,
                stderr=stderr,
                stdin=subprocess.DEVNULL,
                start_new_session=new_session,
                cwd=cwd,
            )
        finally:
            if stderr is not None:
                stderr.close()
        try:
            info = ready_line(proc, timeout)
            if not info.get("ready"):
                reason = info.get("error") or _log_tail(log) or f"no ready line within {timeout:g} s"
                raise HandlerStartError(reason)
        except BaseException:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)
            raise
        return cls(proc, control_path, info)

    def stop(self, timeout: float = 10.0) -> dict[str, Any]:
        """Stops the handler (held packets are released first); returns its final stats."""
        reply = self.request({"cmd": "stop"}, timeout)
        self.proc.wait(timeout)
        return reply["stats"]

    def terminate(self, timeout: float = 10.0) -> int:
        """SIGTERM (same as stop) and wait; kills it if it does not exit in time. Returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        return self.proc.returncode

    def alive(self) -> bool:
        return self.proc.poll() is None


def ready_line(proc: subprocess.Popen[bytes], timeout: float) -> dict[str, Any]:
    """A helper process's first stdout line as JSON ({} if none came within timeout): the NFQUEUE handler's, the wire
    tap's (orchestration/backends/netns_tap.py). Closes the pipe: the process writes
    nothing after it, and one that outlives us must not hold a pipe to a reader that is gone."""
    assert proc.stdout is not None
    line = b""
    deadline = time.monotonic() + timeout
    try:
        while not line.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([proc.stdout], [], [], remaining)[0]:
                break
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                break
            line += chunk
    finally:
        proc.stdout.close()
    try:
        info = json.loads(line)
    except ValueError:
        return {}
    return info if isinstance(info, dict) else {}


def _log_tail(log: Path | None) -> str:
    if log is None:
        return ""
    try:
        return log.read_text(errors="replace")[-LOG_TAIL:].strip()
    except OSError:
        return ""
