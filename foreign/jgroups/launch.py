"""Start N JGroups members (foreign/jgroups/) outside the orchestrator: for tests, the golden-datagram capture and by
hand. Each member gets a config file like the one chaosbed writes, a history file and a log under a work folder.

Two placements:
- "netns" (root): one network namespace per member on a bridge in a switch namespace, the netns backend's layout
  (orchestration/backends/netns.py): member i at 10.a.b.(10+i), port 7800, the cluster's own multicast group, and a
  224.0.0.0/4 route via eth0. Network faults (iptables in a member's namespace) work here.
- "loopback" (no root): every member on 127.0.0.1, each with its own port (Java binds multicast only to an address
  an interface has, so not to chaosbed's 127.77.x.y process-backend addresses). Multicast over lo works; faults do not.
"auto" picks netns when running as root with namespaces, else loopback.

Subnets and port ranges are claimed (orchestration/claims.py) so that concurrent runs never share them, and labels
are chaosbed's (cb + 6 hex digits), so `chaosbed down --all` reaps namespaces a crashed run left. Everything started
is stopped by `close()` (also on an exception in `with JGroupsCluster(...)`): members by their pid only, then the
namespaces.

    python -m foreign.jgroups.launch [--members 3] [--stack unicast2-fast] [--mode auto]   # starts, waits, stops
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from foreign import jgroups
from node.addresses import make_address
from orchestration.backends.foreign import LOOPBACK_BLOCKS, loopback_ports
from orchestration.cluster import new_label
from orchestration.host import claims

NETNS_PORT = 7800
NETNS_MCAST_PORT = 7900


class LaunchError(RuntimeError):
    """A member or the network could not be started (the message says which and why)."""


def wait_until(condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    """Polls `condition` until it returns a true value (returned) or `timeout` seconds pass (LaunchError naming
    `what`). Waiting on a condition with a deadline, never a bare sleep."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise LaunchError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


def read_history(path: Path) -> list[dict[str, Any]]:
    """A member's history events; a cut-off or malformed line (a killed member's last) is skipped."""
    events = []
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        try:
            e = json.loads(raw)
        except ValueError:
            continue
        if isinstance(e, dict):
            events.append(e)
    return events


@dataclass
class JMember:
    name: str
    ip: str
    port: int
    netns: str | None
    incarnation: int = 1
    config: Path | None = None
    history: Path | None = None
    log: Path | None = None
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        return make_address(self.name, self.incarnation)

    @property
    def control_port(self) -> int:
        return self.port + 1

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise LaunchError(f"ip {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc


def netns_available() -> str | None:
    """Why the netns placement cannot run here (None: it can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "no `ip` tool (apt-get install iproute2)"
    if not os.path.exists("/proc/self/ns/net"):
        return "this kernel has no network namespaces"
    return None


class JGroupsCluster:
    """N JGroups members (names, e.g. ["A", "B", "C"]) with one stack, placed by `mode` (netns | loopback | auto),
    their files under `workdir` (default: a new temporary folder, removed by close() unless keep_files); `config`
    adds keys to every member's config (e.g. {"record_messages": False})."""

    def __init__(
        self,
        names: list[str],
        *,
        stack: str = "unicast2-fast",
        mode: str = "auto",
        workdir: Path | None = None,
        keep_files: bool = False,
        cluster: str | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        if mode == "auto":
            mode = "netns" if netns_available() is None else "loopback"
        if mode not in ("netns", "loopback"):
            raise ValueError(f"mode must be netns, loopback or auto, not {mode!r}")
        if mode == "netns" and (why := netns_available()):
            raise LaunchError(f"the netns placement cannot run here: {why}")
        if len(set(names)) != len(names) or not names:
            raise ValueError("member names must be distinct and at least one")
        self.names = list(names)
        self.stack = stack
        self.extra_config = dict(config or {})  # more keys for every member's config (record_messages, ...)
        self.mode = mode
        self.label = new_label()
        self.cluster = cluster or self.label
        self.token = secrets.token_hex(8)
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix=f"chaosbed-jgroups-{self.label}-"))
        self.keep_files = keep_files
        self.members: dict[str, JMember] = {}
        self.namespaces: list[str] = []
        self.mcast_group = ""
        self.mcast_port = 0
        self._claimed = False
        self._closed = False

    # --- lifecycle --------------------------------------------------------------------------------------------------

    def __enter__(self) -> JGroupsCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self, timeout: float = 60.0) -> JGroupsCluster:
        """Places the members (building the member if needed), starts the first and waits until it answers ping (it
        answers once it has joined, here as coordinator), then starts the others together and waits for each. With
        all started at once, two could each find nobody and become coordinators, and their first view together would
        be a merge view. On failure everything is stopped and removed again."""
        try:
            self.place()
            first, *rest = self.names
            self.spawn(first)
            self.wait_ready(first, timeout)
            for name in rest:
                self.spawn(name)
            for name in rest:
                self.wait_ready(name, timeout)
        except BaseException:
            self.close()
            raise
        return self

    def place(self) -> None:
        """Creates the network (namespaces and bridge, or the loopback ports) and assigns every member its ip and
        port, without starting any (start() does this first; call it alone to start members one by one with
        spawn and wait_ready). Idempotent."""
        if self.members:
            return
        jgroups.build()
        (self.workdir / "history").mkdir(parents=True, exist_ok=True)
        if self.mode == "netns":
            # the netns backend's address space; the claim lives while our switch namespace does (or we run)
            index = claims.claim(self.label, "netns", 100 * 250, Path(f"/run/netns/{self.label}-sw"))
            self._claimed = True
            a, b = 100 + index // 250, index % 250
            self.mcast_group, self.mcast_port = f"239.78.{a}.{b}", NETNS_MCAST_PORT
            sw = self.switch_ns
            _ip("netns", "add", sw)
            self.namespaces.append(sw)
            _ip("-n", sw, "link", "set", "lo", "up")
            _ip("-n", sw, "link", "add", "br0", "type", "bridge", "mcast_snooping", "0")
            _ip("-n", sw, "link", "set", "br0", "up")
            for i, name in enumerate(self.names):
                ns = f"{self.label}-{name}"
                _ip("netns", "add", ns)
                self.namespaces.append(ns)
                veth = f"{self.label}{i}"
                _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
                _ip("link", "set", veth, "netns", sw)
                _ip("-n", sw, "link", "set", veth, "master", "br0", "up")
                ip = f"10.{a}.{b}.{10 + i}"
                _ip("-n", ns, "link", "set", "lo", "up")
                _ip("-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
                _ip("-n", ns, "link", "set", "eth0", "up")
                _ip("-n", ns, "route", "add", "224.0.0.0/4", "dev", "eth0")
                self.members[name] = JMember(name, ip, NETNS_PORT, ns)
        else:
            # the process backend's blocks (backends/foreign.py), so the two never share a port
            index = claims.claim(self.label, "loopback", LOOPBACK_BLOCKS, Path(f"/proc/{os.getpid()}"))
            self._claimed = True
            ports, self.mcast_port = loopback_ports(index, len(self.names))
            self.mcast_group = f"239.79.{index // 250}.{index % 250}"
            for name, port in zip(self.names, ports, strict=True):
                self.members[name] = JMember(name, "127.0.0.1", port, None)

    @property
    def switch_ns(self) -> str:
        return f"{self.label}-sw"

    def config_of(self, m: JMember) -> dict[str, Any]:
        """The member's config: the keys chaosbed's foreign-member contract names (docs/scenario-format.md)."""
        return {
            "name": m.name,
            "address": m.address,
            "ip": m.ip,
            "port": m.port,
            "history": str(m.history),
            "incarnation": m.incarnation,
            "cluster": self.cluster,
            "token": self.token,
            "peers": {n: [o.ip, o.port] for n, o in self.members.items()},
            "mcast_group": self.mcast_group,
            "mcast_port": self.mcast_port,
            "stack": self.stack,
            **self.extra_config,
        }

    def spawn(self, name: str) -> JMember:
        """Starts member `name` (its current incarnation) without waiting for it."""
        m = self.members[name]
        if m.running():
            raise LaunchError(f"member {name} is running")
        m.history = self.workdir / "history" / f"{name}.jsonl"
        m.config = self.workdir / f"{name}.{m.incarnation}.json"
        m.log = self.workdir / f"{name}.{m.incarnation}.log"
        m.config.write_text(json.dumps(self.config_of(m), indent=1))
        argv = jgroups.member_command(m.config)
        if m.netns is not None:
            argv = ["ip", "netns", "exec", m.netns, *argv]
        env = {**os.environ, "CHAOSBED_TOKEN": self.token}
        with open(m.log, "wb") as log:
            m.proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, env=env
            )
        return m

    def log_tail(self, name: str, n: int = 3000) -> str:
        m = self.members[name]
        try:
            return m.log.read_text(errors="replace")[-n:] if m.log else ""
        except OSError:
            return ""

    def wait_ready(self, name: str, timeout: float = 60.0) -> None:
        """Waits until member `name` answers ping (it binds its control port first, and answers once joined)."""
        m = self.members[name]

        def ready() -> bool:
            if not m.running():
                code = m.proc.returncode if m.proc else None
                raise LaunchError(f"member {name} exited with {code} at start:\n{self.log_tail(name)}")
            try:
                return bool(self.control(name, "ping", timeout=1.0).get("ok"))
            except OSError:
                return False

        try:
            wait_until(ready, timeout, f"member {name} to answer ping")
        except LaunchError as e:
            if "timed out" in str(e):
                raise LaunchError(f"{e}; its log:\n{self.log_tail(name)}") from None
            raise

    def terminate(self, name: str, timeout: float = 15.0) -> int:
        """SIGTERM (the member writes `stop` and exits); returns its exit code."""
        m = self.members[name]
        if not m.running():
            raise LaunchError(f"member {name} is not running")
        assert m.proc is not None
        m.proc.send_signal(signal.SIGTERM)
        try:
            return m.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise LaunchError(f"member {name} did not exit within {timeout:g}s of SIGTERM") from None

    def kill(self, name: str) -> None:
        """SIGKILL (no stop event)."""
        m = self.members[name]
        if not m.running():
            raise LaunchError(f"member {name} is not running")
        assert m.proc is not None
        m.proc.kill()
        m.proc.wait(10)

    def restart(self, name: str, timeout: float = 60.0) -> JMember:
        """Starts a stopped member again as its next incarnation (address "B/2", ...), appending to its history."""
        m = self.members[name]
        if m.running():
            raise LaunchError(f"member {name} is running; stop it first")
        m.incarnation += 1
        self.spawn(name)
        self.wait_ready(name, timeout)
        return m

    def stop_all(self, timeout: float = 15.0) -> None:
        """SIGTERM to every running member at once (each writes `stop`), then waits for all of them."""
        running = [m for m in self.members.values() if m.running()]
        for m in running:
            m.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        deadline = time.monotonic() + timeout
        for m in running:
            try:
                m.proc.wait(max(0.1, deadline - time.monotonic()))  # type: ignore[union-attr]
            except subprocess.TimeoutExpired:
                raise LaunchError(f"member {m.name} did not exit within {timeout:g}s of SIGTERM") from None

    def close(self) -> None:
        """Stops every member this object started (SIGTERM, then SIGKILL), deletes the namespaces, releases the
        claim and (unless keep_files) the work folder. Idempotent."""
        if self._closed:
            return
        self._closed = True
        running = [m for m in self.members.values() if m.running()]
        for m in running:
            with contextlib.suppress(ProcessLookupError):
                m.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        deadline = time.monotonic() + 10.0
        for m in running:
            assert m.proc is not None
            try:
                m.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                m.proc.kill()
                m.proc.wait(10)
        for ns in reversed(self.namespaces):
            _ip("netns", "del", ns, check=False)
        self.namespaces.clear()
        if self._claimed:
            claims.release(self.label)
        if self._own_workdir and not self.keep_files:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # --- talking to members -----------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def in_member_ns(self, name: str) -> Iterator[None]:
        """Runs the block in member `name`'s namespace (nothing to do on loopback)."""
        ns = self.members[name].netns
        if ns is None:
            yield
            return
        from orchestration.backends.netns import in_namespace

        with in_namespace(ns):
            yield

    def connect(self, name: str, timeout: float = 5.0) -> socket.socket:
        """A TCP connection to member `name`'s control endpoint (from inside its namespace)."""
        m = self.members[name]
        with self.in_member_ns(name):
            return socket.create_connection((m.ip, m.control_port), timeout=timeout)

    def request(self, name: str, req: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
        """Sends one raw request line (token not added) and returns the reply."""
        with self.connect(name, timeout) as s:
            s.sendall(json.dumps(req).encode() + b"\n")
            with s.makefile("rb") as f:
                line = f.readline()
        if not line:
            raise ConnectionError(f"member {name} closed the control connection without a reply")
        return json.loads(line)

    def control(self, name: str, cmd: str, *, timeout: float = 10.0, **args: Any) -> dict[str, Any]:
        """One control command with the cluster's token; returns the reply (ok or not)."""
        return self.request(name, {"token": self.token, "cmd": cmd, **args}, timeout)

    def ns_run(self, name: str, *argv: str) -> subprocess.CompletedProcess[str]:
        """Runs a command in member `name`'s namespace (e.g. iptables); raises LaunchError if it fails."""
        ns = self.members[name].netns
        if ns is None:
            raise LaunchError("commands in a member's namespace need the netns placement")
        proc = subprocess.run(["ip", "netns", "exec", ns, *argv], capture_output=True, text=True)
        if proc.returncode != 0:
            raise LaunchError(f"{' '.join(argv)} in {ns} failed: {proc.stderr.strip()}")
        return proc

    # --- observing --------------------------------------------------------------------------------------------------

    def history(self, name: str) -> list[dict[str, Any]]:
        m = self.members[name]
        return read_history(m.history) if m.history else []

    def views(self, names: list[str] | None = None) -> dict[str, dict[str, Any] | None]:
        return {n: self.control(n, "view").get("view") for n in names or self.names}

    def wait_view(self, names: list[str] | None = None, timeout: float = 30.0) -> dict[str, Any]:
        """Waits until every member of `names` (default: all) has the same view, of exactly those members."""
        want = sorted(names or self.names)

        def agreed() -> dict[str, Any] | None:
            views = self.views(want)
            first = views[want[0]]
            if first is None or sorted(first["members"]) != want:
                return None
            return first if all(v == first for v in views.values()) else None

        return wait_until(agreed, timeout, f"one view of {want}")

    def wait_tasks(self, name: str, timeout: float = 30.0) -> dict[str, Any]:
        """Waits until every workload task of member `name` is done; returns the tasks."""

        def done() -> dict[str, Any] | None:
            tasks = self.control(name, "tasks")["tasks"]
            return tasks if all(t["done"] for t in tasks.values()) else None

        return wait_until(done, timeout, f"the tasks of {name} to finish")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Start JGroups 2.12 members, wait for one view, stop them.")
    ap.add_argument("--members", type=int, default=3)
    ap.add_argument("--stack", default="unicast2-fast", choices=jgroups.STACKS)
    ap.add_argument("--mode", default="auto", choices=("auto", "netns", "loopback"))
    ap.add_argument("--keep", type=Path, help="keep configs, histories and logs in this folder")
    args = ap.parse_args(argv)
    names = [chr(ord("A") + i) for i in range(args.members)]
    with JGroupsCluster(names, stack=args.stack, mode=args.mode, workdir=args.keep, keep_files=True) as c:
        c.start()
        view = c.wait_view()
        print(f"{c.mode}: one view {view['view_id']} of {view['members']}; files in {c.workdir}")
        c.stop_all()


if __name__ == "__main__":
    main()
