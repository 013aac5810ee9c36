"""Docker engines in network namespaces of this machine: the "hosts" of the local swarm (local_swarm.py).

Layout for label L and N engines: engine i (1..N) gets namespace L-h<i>, lo up, forwarding on, at address
10.90.<x>.(10+i)/24 from a machine-wide claim: engine 1 on bridge br0 of its own namespace (bridged frames kept out
of its netfilter hooks, as for netns clusters), engine i > 1 on eth0, a veth whose peer h<i> sits on that bridge.
Its dockerd runs

    nsenter --net=/run/netns/L-h<i> unshare --mount --uts --propagation slave -- sh -c \
        'mount -t tmpfs tmpfs /run/docker && hostname L-h<i> && exec dockerd --data-root ... --exec-root ... \
         -H unix://<state>/h<i>/docker.sock --pidfile ... --cgroup-parent L-h<i> --bridge none'

- its own network namespace: its iptables rules, docker_gwbridge, overlay (VXLAN) devices and ports 2377, 7946
  and 4789 are its host's, so the engines reach each other over br0 and a partition between namespaces is one
  between engines;
- its own data root (/var/lib/chaosbed-swarm/L/h<i>), exec root and socket;
- its own mount namespace (slave: it sees the machine's mounts, its own stay in it) with a tmpfs over /run/docker,
  where every dockerd puts its plugin sockets whatever its exec root, and over /etc/docker (its key.json), so the
  engines (and the test suite's own engine, orchestration/host/docker_engine.py) never share a file there; its
  containers' mounts die with it;
- its own UTS namespace: the swarm sees N hosts by name;
- its own cgroup parent, removed when it stops.

`ip netns exec` cannot start an engine: it remounts /sys for the namespace, which hides /sys/fs/cgroup, and dockerd
exits with "Devices cgroup isn't mounted". nsenter enters only the network namespace.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from orchestration.backends.netns import _bridge_without_netfilter, _ip, list_namespaces
from orchestration.cluster import ClusterError
from orchestration.host import engine_processes
from orchestration.host.leases import process_started, same_process

DATA_ROOT = Path("/var/lib/chaosbed-swarm")
RUN_DOCKER = Path("/run/docker")
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
TOOLS = ("dockerd", "nsenter", "unshare", "ip", "iptables", "docker")


class EngineError(ClusterError):
    """An engine could not be started (the message says what failed, with its log) or stopped cleanly."""


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None]


@dataclass
class Engine:
    """One dockerd in its namespace."""

    label: str
    index: int  # 1..N
    address: str  # eth0 of its namespace
    folder: str  # its state folder (socket, pid file, exec root, log)
    pid: int = 0
    started: float | None = None  # the process's start time: with the pid, names it

    @property
    def name(self) -> str:
        return f"h{self.index}"

    @property
    def netns(self) -> str:
        return f"{self.label}-h{self.index}"

    @property
    def socket(self) -> str:
        return f"unix://{self.folder}/docker.sock"

    @property
    def data_root(self) -> Path:
        return DATA_ROOT / self.label / self.name

    @property
    def cgroup(self) -> str:
        return self.netns

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    def process(self) -> psutil.Process | None:
        """The engine's dockerd if it still runs (pid, start time and data root checked)."""
        if not self.pid:
            return None
        try:
            proc = psutil.Process(self.pid)
            if not same_process(self.pid, self.started) or str(self.data_root) not in " ".join(proc.cmdline()):
                return None
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return None
        return proc

    def start(self) -> None:
        """Starts dockerd in the namespace and waits until it answers (EngineError with its log otherwise)."""
        folder = Path(self.folder)
        (folder / "exec").mkdir(parents=True, exist_ok=True)
        (folder / "daemon.json").write_text("{}\n")  # not the machine's /etc/docker/daemon.json
        self.data_root.mkdir(parents=True, exist_ok=True)
        dockerd = [
            "dockerd", "--data-root", str(self.data_root), "--exec-root", str(folder / "exec"),
            "--pidfile", str(folder / "docker.pid"), "-H", self.socket, "--cgroup-parent", self.cgroup,
            "--bridge", "none", "--log-level", "warn", "--config-file", str(folder / "daemon.json"),
        ]  # fmt: skip
        # /etc/docker: its key.json (the engine's id) and daemon.json stay the machine's, and are not shared
        script = (
            f"mount -t tmpfs -o mode=0700 tmpfs {RUN_DOCKER} && {{ [ ! -d /etc/docker ] || mount -t tmpfs tmpfs "
            f"/etc/docker; }} && hostname {self.netns} && exec {' '.join(dockerd)}"
        )
        cmd = ["nsenter", f"--net=/run/netns/{self.netns}", "unshare", "--mount", "--uts", "--propagation", "slave",
               "--", "sh", "-c", script]  # fmt: skip
        with open(folder / "dockerd.log", "wb") as log:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)  # fmt: skip
        self.pid, self.started = proc.pid, process_started(proc.pid)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            if self.answers():
                self.started = process_started(proc.pid)  # after the execs: the same process, settled
                return
            time.sleep(0.2)  # polling the engine's socket with a deadline
        tail = (folder / "dockerd.log").read_text(errors="replace").strip().splitlines()[-6:]
        why = f"exited with {proc.returncode}" if proc.poll() is not None else f"no answer within {START_TIMEOUT:g} s"
        raise EngineError(f"the Docker engine in namespace {self.netns} {why}: " + " | ".join(tail))

    def answers(self) -> bool:
        try:
            self.client(timeout=5).ping()
        except Exception:  # docker.errors.DockerException, requests' errors: not up yet
            return False
        return True

    def client(self, timeout: float = 60.0):  # type: ignore[no-untyped-def]  # docker.DockerClient
        import docker

        return docker.DockerClient(base_url=self.socket, timeout=timeout)

    def stop(self) -> list[str]:
        """Stops dockerd (SIGTERM: it stops its containers; SIGKILL to what is left of its tree after a deadline),
        removes its cgroup parent, data root and folder. Returns what could not be removed."""
        proc = self.process()
        if proc is not None:
            with contextlib.suppress(Exception):  # leaving the swarm first: dockerd then stops in a second, not 20
                self.client(timeout=10).swarm.leave(force=True)
            engine_processes.stop(proc, STOP_TIMEOUT)  # containerd, its shims and their containers too
        left = remove_cgroups(self.cgroup)
        shutil.rmtree(self.data_root, ignore_errors=True)
        shutil.rmtree(self.folder, ignore_errors=True)
        return left


def remove_cgroups(name: str) -> list[str]:
    """Removes the cgroup `name` (the engine's cgroup parent) below every controller, children first; returns those
    that would not go (a process still in them)."""
    left = []
    for top in Path("/sys/fs/cgroup").iterdir() if Path("/sys/fs/cgroup").is_dir() else []:
        root = top / name
        if not root.is_dir():
            continue
        for d in [*sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)), root]:
            try:
                d.rmdir()
            except OSError:
                left.append(str(d))
    return left


def make_network(label: str, subnet: str, n: int) -> list[str]:
    """N host namespaces on one bridge (see the module docstring); returns their addresses. The bridge lives in the
    first host's namespace, which holds its address: no namespace of the swarm is ever without a process (a
    `chaosbed down --all` elsewhere reaps labelled namespaces that have none)."""
    first = f"{label}-h1"
    addresses = [f"{subnet}.{10 + i}" for i in range(1, n + 1)]
    for i in range(1, n + 1):
        ns = f"{label}-h{i}"
        _ip("netns", "add", ns)
        _ip("-n", ns, "link", "set", "lo", "up")
        subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.ip_forward=1"], check=True)
    _ip("-n", first, "link", "add", "br0", "type", "bridge")
    _ip("-n", first, "addr", "add", f"{addresses[0]}/24", "dev", "br0")
    _ip("-n", first, "link", "set", "br0", "up")
    _bridge_without_netfilter(first)
    for i in range(2, n + 1):
        ns, port = f"{label}-h{i}", f"h{i}"
        _ip("-n", first, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _ip("-n", first, "link", "set", port, "master", "br0", "up")
        _ip("-n", ns, "addr", "add", f"{addresses[i - 1]}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
    return addresses


def remove_network(label: str) -> list[str]:
    """Deletes the host namespaces of `label` (and every veth and the bridge with them); returns any that still has
    a process in it (left alone)."""
    busy = []
    for ns in list_namespaces():
        if ns.startswith(f"{label}-h") and ns[len(label) + 2 :].isdigit():
            pids = _ip("netns", "pids", ns, check=False).stdout.split()
            if pids:
                busy.append(f"{ns} (pids {' '.join(pids)})")
                continue
            _ip("netns", "del", ns, check=False)
    return busy


def prepare_run_docker() -> bool:
    """The mount point of each engine's private /run/docker; True if it had to be made (removed again at the end
    when empty, see release_run_docker)."""
    if RUN_DOCKER.is_dir():
        return False
    RUN_DOCKER.mkdir(mode=0o700)
    return True


def release_run_docker(made: bool) -> None:
    if made:
        with contextlib.suppress(OSError):
            RUN_DOCKER.rmdir()  # only if empty: an engine of someone else's may have moved in


def save(path: Path, doc: dict[str, object]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, path)
