"""Members as real OS processes: spawn them from a config file, talk to their control endpoints over TCP, signal
them, and keep the cluster's state file so another process (`chaosbed status`, `down --all`) can attach.

Teardown is idempotent and kills only pids this cluster started (checked against /proc/<pid>/cmdline, which names
the cluster's config files). Subclasses (process, netns) place the members on a network.
"""

from __future__ import annotations

import json
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import cast

from node import jsonl
from orchestration.cluster import (
    Cluster,
    ClusterError,
    ClusterSpec,
    ControlReply,
    MemberInfo,
    MemberNotRunning,
    RealClock,
)
from orchestration.host import claims
from orchestration.host.member_python import ENV, MemberPythonError, member_env, member_python
from orchestration.host.processes import alive, send_signal


class RealCluster(Cluster):
    """Members as processes. Backends differ in how they place them on the network (_place)."""

    backend_name = "base"

    def __init__(self, spec: ClusterSpec, *, label: str | None = None, workdir: Path | None = None) -> None:
        super().__init__(spec, label=label, workdir=workdir)
        self.clock = RealClock()
        self.token = secrets.token_hex(8)
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        # members asked to leave: they finish the leave protocol and exit on their own; until then their control
        # endpoint may already be closed, so the orchestrator no longer counts them as running
        self._leaving: set[str] = set()
        self.before_members: Callable[[RealCluster], None] | None = None

    # --- to be provided by a backend ------------------------------------------------------------------------------

    def _place(self, names: list[str]) -> None:
        """Assigns ip/port (and creates the network) for every member."""
        raise NotImplementedError

    def _command(self, m: MemberInfo) -> list[str]:
        return [member_python(), "-m", "node", m.config]

    def _teardown_network(self) -> None:
        """Removes what _place created. Idempotent."""

    def _extra_config(self) -> dict[str, object]:
        return {}

    def _member_env(self, m: MemberInfo) -> dict[str, str]:
        """The environment a member starts with."""
        return member_env()

    def _signal(self, pid: int, sig: int) -> bool:
        """Sends sig to a member's process if it is still this cluster's (False when it is gone)."""
        return send_signal(pid, self.label, sig)

    # --- lifecycle ------------------------------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> Cluster:
        """Creates the network, starts the members and waits until each is ready. `before_members`, when set, is
        called once the network is there and before any member starts (a capture of every datagram from the first
        hooks in here: foreign/jgroups/capture.py)."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "history").mkdir(parents=True, exist_ok=True)
        try:
            self._place(self.spec.members)
            self._save_state()
            if self.before_members is not None:
                self.before_members(self)
            self._spawn_all([self.members[name] for name in self.spec.members])
            self._save_state()
            for name in self.spec.members:
                self.wait_ready(name, timeout)
        except BaseException:
            self.down()
            raise
        return self

    def _spawn_all(self, members: list[MemberInfo]) -> None:
        """Starts every member (a backend whose start is a slow round trip does them concurrently)."""
        for m in members:
            self._spawn(m)

    def _write_config(self, m: MemberInfo) -> None:
        peers = {n: [o.ip, o.port] for n, o in self.members.items()}
        m.history = str(self.workdir / "history" / f"{m.name}.jsonl")
        m.config = str(self.state_dir / f"{m.name}.{m.incarnation}.json")
        cfg = {
            "name": m.name,
            "ip": m.ip,
            "port": m.port,
            "peers": peers,
            "history": m.history,
            "incarnation": m.incarnation,
            "cluster": self.label,
            "stack": self.spec.stack,
            "properties": self.spec.properties,
            "transport": self.spec.transport,
            "token": self.token,
            **self._extra_config(),
        }
        Path(m.config).write_text(json.dumps(cfg, indent=1))

    def _spawn(self, m: MemberInfo) -> None:
        self._write_config(m)
        log = open(self.state_dir / f"{m.name}.{m.incarnation}.log", "wb")  # noqa: SIM115 - owned by the child
        try:
            command = self._command(m)
        except MemberPythonError as e:
            log.close()
            raise ClusterError(str(e)) from None
        proc = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=self._member_env(m),
        )
        log.close()
        self._procs[m.name] = proc
        m.pid = proc.pid
        m.paused = False

    def wait_ready(self, name: str, timeout: float) -> None:
        m = self.members[name]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            proc = self._procs.get(name)
            if proc is not None and proc.poll() is not None:
                log = (self.state_dir / f"{name}.{m.incarnation}.log").read_text(errors="replace")[-2000:]
                raise ClusterError(
                    f"member {name} exited with {proc.returncode} at start (members run {member_python()}; "
                    f"{ENV} picks another interpreter):\n{log}"
                )
            try:
                reply = self.control(name, "ping", timeout=1.0)
                if reply.get("ok"):
                    return
            except (OSError, MemberNotRunning):  # not listening yet, or just exited (the next poll says how)
                pass
            time.sleep(0.02)  # polling a condition with a deadline, not hiding a race
        raise ClusterError(f"member {name} did not answer on its control port within {timeout:g}s")

    def down(self) -> None:
        """Stops every member (SIGTERM, then SIGKILL), removes the network and the state. Idempotent."""
        for m in self.members.values():
            if m.pid is not None and m.paused:
                self._signal(m.pid, signal.SIGCONT)
            if m.pid is not None:
                self._signal(m.pid, signal.SIGTERM)
        deadline = time.monotonic() + 5.0
        for m in self.members.values():
            proc = self._procs.get(m.name)
            if proc is not None:
                try:
                    proc.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    if m.pid is None or not self._signal(m.pid, signal.SIGKILL):
                        proc.kill()
                    proc.wait(5)
            elif m.pid is not None:
                while alive(m.pid, self.label) and time.monotonic() < deadline:
                    time.sleep(0.02)
                self._signal(m.pid, signal.SIGKILL)
        self._teardown_network()
        claims.release(self.label)
        self._keep_member_logs()
        shutil.rmtree(self.state_dir, ignore_errors=True)

    def _keep_member_logs(self) -> None:
        """Moves each member's output (`<name>.<incarnation>.log`, stdout and stderr) from the state folder, which
        down removes, into the run folder's logs/: a failure's triage starts from what the members said. Nothing to
        keep when the cluster has no run folder of its own."""
        if self.workdir.resolve() == self.state_dir.resolve():
            return
        logs = sorted(self.state_dir.glob("*.log"))
        if not logs:
            return
        kept = self.workdir / "logs"
        try:
            kept.mkdir(parents=True, exist_ok=True)
            for log in logs:
                shutil.move(log, kept / log.name)
        except OSError:  # a run folder that is gone or full costs the logs, never the teardown
            pass

    # --- faults on processes ----------------------------------------------------------------------------------------

    def kill(self, name: str) -> None:
        """SIGKILL: the member's history may end in a partial line."""
        m = self.members[name]
        if m.pid is None or not self._signal(m.pid, signal.SIGKILL):
            raise ClusterError(f"member {name} is not running")
        proc = self._procs.get(name)
        if proc is not None:
            proc.wait(5)
        m.pid = None

    def pause(self, name: str) -> None:
        m = self.members[name]
        if m.pid is None or not self._signal(m.pid, signal.SIGSTOP):
            raise ClusterError(f"member {name} is not running")
        m.paused = True

    def resume(self, name: str) -> None:
        m = self.members[name]
        if m.pid is None or not self._signal(m.pid, signal.SIGCONT):
            raise ClusterError(f"member {name} is not running")
        m.paused = False

    def leave(self, name: str) -> None:
        super().leave(name)
        self._leaving.add(name)

    def restart(self, name: str, timeout: float = 30.0) -> None:
        """Starts a killed (or left) member again as a new incarnation."""
        m = self.members[name]
        if name in self._leaving and name in self._procs:
            try:  # it is finishing its leave: a new incarnation starts once the old one has exited
                self._procs[name].wait(timeout)
            except subprocess.TimeoutExpired:
                raise ClusterError(f"member {name} did not finish leaving within {timeout:g}s") from None
        self._leaving.discard(name)
        if m.pid is not None and alive(m.pid, self.label):
            raise ClusterError(f"member {name} is running; kill it first")
        m.incarnation += 1
        self._spawn(m)
        self._save_state()
        self.wait_ready(name, timeout)
        self._announce_incarnation(name)

    def _announce_incarnation(self, name: str) -> None:
        """Tells the other running members a restarted member's incarnation (stacks without membership learn the
        new address from us)."""
        for other in self.running():
            if other != name and not self.members[other].paused:
                self.control(other, "incarnation", peer=name, incarnation=self.members[name].incarnation)

    # --- control --------------------------------------------------------------------------------------------------

    def _connect(self, m: MemberInfo, timeout: float) -> socket.socket:
        return socket.create_connection((m.ip, m.control_port), timeout=timeout)

    def control(self, name: str, cmd: str, *, timeout: float = 10.0, **args: object) -> ControlReply:
        """One request to a member's control endpoint; returns the reply (raises ClusterError if not ok)."""
        m = self.members.get(name)
        if m is None:
            raise ClusterError(f"no member {name!r} in cluster {self.label}: {', '.join(self.members)}")
        req = {"token": self.token, "cmd": cmd, **args}
        try:
            reply = jsonl.request(lambda: self._connect(m, timeout), req, timeout, peer=f"member {name}")
        except jsonl.PeerClosed as e:
            raise ClusterError(str(e)) from None
        except OSError:
            if m.pid is None or not alive(m.pid, self.label):
                raise MemberNotRunning(name) from None
            raise
        if not reply.get("ok"):
            raise ClusterError(f"member {name}: {reply.get('error')}")
        return cast(ControlReply, reply)  # the member's JSON reply (node/control.py)

    def running(self) -> list[str]:
        return [
            n
            for n, m in self.members.items()
            if m.pid is not None and n not in self._leaving and alive(m.pid, self.label)
        ]

    def stop_members(self) -> None:
        """Graceful stop of every running member (each writes its `stop` event), waiting for them to exit."""
        for name in self.running():
            m = self.members[name]
            if m.paused:
                self.resume(name)
            self._signal(m.pid, signal.SIGTERM)  # type: ignore[arg-type]
        for name, proc in self._procs.items():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired as e:
                raise ClusterError(f"member {name} did not stop within 10s of SIGTERM") from e

    # --- state ----------------------------------------------------------------------------------------------------

    def _save_state(self) -> None:
        self._write_state(self.token, self._network_state())

    def _network_state(self) -> dict[str, object]:
        return {}

    def _restore_network(self, network: Mapping[str, object]) -> None:
        pass


def state_str(network: Mapping[str, object], key: str) -> str | None:
    """A string of a state file's network section (None if it is missing)."""
    value = network.get(key)
    return value if isinstance(value, str) else None
