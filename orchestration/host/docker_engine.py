"""The Docker engine behind the docker backend: reach the one that runs, or (as root, for tests and CI) start one and
stop it again when the last user is done.

A user with Docker has an engine: we only talk to it. On a machine without one (CI here), `engine()` starts Debian's
dockerd, after `net.ipv4.ip_forward=1` (else Docker switches the FORWARD policy to DROP and breaks the netns
bridges), holds a lease on it (orchestration/host/leases.py, so every pytest-xdist worker shares one engine), and the
last lease's release stops it and removes what it left in the host: its iptables chains and rules, docker0, the
ip_forward value it changed. An engine someone else started is never stopped.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, cast

import psutil

from node.atomic import write_atomic
from orchestration.cluster import ClusterError
from orchestration.host import docker_listing, engine_processes, leases
from orchestration.host.claims import CLAIMS_DIR
from orchestration.host.filelock import locked

if TYPE_CHECKING:
    from docker import DockerClient

HostSnapshot = dict[str, object]  # what the engine changes in the host (host_snapshot), compared key by key


class EngineState(TypedDict, total=False):
    """engine.json: the engine we started, the host before it, and what the engine had when it came up."""

    before: HostSnapshot
    pid: int
    started: float | None  # the process's start time (leases.process_started)
    images: list[str]
    containers: list[str]
    networks: list[str]


ENGINE_DIR = CLAIMS_DIR.parent / ".docker-engine"  # machine-wide, like the network claims: there is one engine
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")
BRIDGE = re.compile(r"br-[0-9a-f]{12}")
# dockerd and its containerd make these; removed after the engine stopped if they were not there before it started
# (the data root too: its images are the tests' own, and a machine keeps none of them)
ENGINE_DIRS = ("/run/docker", "/run/containerd", "/var/lib/docker")


class DockerUnavailable(ClusterError):
    """No Docker engine can be reached or started here; the message says what is missing and what to do."""


def client(timeout: float = 60.0) -> DockerClient:
    """A docker SDK client of the running engine (DockerUnavailable if none answers)."""
    try:
        import docker
    except ImportError:
        raise DockerUnavailable(
            "the docker backend needs the docker SDK: pip install 'chaosbed[docker]' (make setup installs it)"
        ) from None
    try:
        c = docker.from_env(timeout=timeout)
        c.ping()
    except docker.errors.DockerException as e:
        raise DockerUnavailable(
            f"no Docker engine answers ({_short(e)}): start one (`dockerd`, or `systemctl start docker`); "
            "as root, the test suite starts Debian's docker.io itself (make setup installs it)"
        ) from None
    return c


def _short(e: BaseException) -> str:
    text = str(e)
    return text if len(text) < 160 else text[:157] + "..."


def running() -> bool:
    try:
        client(timeout=5.0)
    except DockerUnavailable:
        return False
    return True


def start_reason() -> str | None:
    """Why this process could not start an engine (None: it can)."""
    if os.geteuid() != 0:
        return "starting a Docker engine needs root"
    if shutil.which("dockerd") is None:
        return "no dockerd here (Debian: apt-get install docker.io; make setup does it as root)"
    try:
        import docker  # noqa: F401
    except ImportError:
        return "no docker SDK (pip install 'chaosbed[docker]')"
    return None


def unavailable_reason() -> str | None:
    """Why the docker backend cannot run here at all (None: an engine runs or can be started)."""
    if running():
        return None
    return start_reason()


def _locked() -> contextlib.AbstractContextManager[None]:
    return locked(ENGINE_DIR / "lock")


@contextlib.contextmanager
def engine(start_if_needed: bool = True) -> Iterator[DockerClient]:
    """A client of the running engine, starting one first if none runs and `start_if_needed` (root only). Stops the
    engine on exit if this module started it and no other lease is held."""
    with _locked():
        if not running():
            reason = start_reason() if start_if_needed else "no Docker engine runs"
            if reason is not None:
                raise DockerUnavailable(f"no Docker engine runs and none can be started: {reason}")
            _start()
        lease = leases.take(ENGINE_DIR / "leases")
    try:
        yield client()
    finally:
        with _locked():
            leases.give_back(lease)
            if _owned() is not None and leases.live(ENGINE_DIR / "leases") == 0:
                _stop()


def stop_if_unused() -> bool:
    """Stops an engine this module started if no live process holds a lease on it (a killed test session's).
    True if it stopped one."""
    with _locked():
        if _owned() is None or leases.live(ENGINE_DIR / "leases") > 0:
            return False
        _stop()
        return True


# --- an engine of our own ---------------------------------------------------------------------------------------------


def _state_path() -> Path:
    return ENGINE_DIR / "engine.json"


def _read_state() -> EngineState | None:
    try:
        return cast(EngineState, json.loads(_state_path().read_text()))  # written by _start
    except (OSError, ValueError):
        return None


def _owned() -> EngineState | None:
    """The state of the engine we started, if its dockerd still runs (else the state is dropped)."""
    state = _read_state()
    if state is None:
        return None
    proc = _dockerd(state)
    if proc is None:
        _restore_host(state)  # it died on its own: still undo what it changed in the host
        _state_path().unlink(missing_ok=True)
        return None
    return state


def _dockerd(state: EngineState) -> psutil.Process | None:
    """Our dockerd, identified by pid AND start time (pids are reused within minutes here)."""
    try:
        proc = psutil.Process(int(state["pid"]))
        if not leases.same_process(proc.pid, state["started"]) or "dockerd" not in proc.name():
            return None
        return proc
    except (psutil.NoSuchProcess, KeyError, ValueError):
        return None


class EngineCleanupError(ClusterError):
    """The engine we started left the host changed; the message says what."""


def host_snapshot() -> HostSnapshot:
    """What a Docker engine changes in the host and we must restore: forwarding, the FORWARD policy, the rules and
    chains of the filter and nat tables, Docker's bridges (docker0, br-<id>), its folders."""
    return {
        "ip_forward": IP_FORWARD.read_text().strip(),
        "forward_policy": _forward_policy(),
        "chains": sorted(_docker_chains()),
        "rules": sorted(_rules()),
        "links": sorted(_bridges()),
        "nft_tables": sorted(_iptables_tables()),
        "engine_dirs": [d for d in ENGINE_DIRS if Path(d).exists()],
    }


def _forward_policy() -> str | None:
    if shutil.which("iptables") is None:
        return None
    out = subprocess.run(["iptables", "-S", "FORWARD"], capture_output=True, text=True).stdout.splitlines()
    return next((line.split()[2] for line in out if line.startswith("-P FORWARD")), None)


def _rules() -> list[str]:
    """Every rule of the host's filter and nat tables, as "table:-A CHAIN ..." (iptables-save, no counters), each as
    often as it is there: one delete removes one copy (a second `-A FORWARD -j DOCKER-USER` was once left behind,
    with its chain, when these were compared as sets)."""
    if shutil.which("iptables-save") is None:
        return []
    rules: list[str] = []
    for table in ("filter", "nat"):
        out = subprocess.run(["iptables-save", "-t", table], capture_output=True, text=True).stdout
        rules += [f"{table}:{line}" for line in out.splitlines() if line.startswith("-A ")]
    return rules


def _iptables_tables() -> set[str]:
    """The iptables-nft tables (ip filter, ip nat) that exist: dockerd creates them, and they stay, empty, after its
    rules are gone."""
    if shutil.which("nft") is None:
        return set()
    out = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout.split("\n")
    return {line.split()[2] for line in out if line.startswith("table ip ") and line.split()[2] in ("filter", "nat")}


def _bridges() -> set[str]:
    """Docker's bridges in the host: docker0 and the br-<network id> of user-defined networks."""
    return {p.name for p in Path("/sys/class/net").iterdir() if p.name == "docker0" or BRIDGE.fullmatch(p.name)}


def _start() -> None:
    """Starts dockerd (the caller holds the lock and has checked no engine runs)."""
    state: EngineState = {"before": host_snapshot()}
    IP_FORWARD.write_text("1\n")  # before dockerd: with forwarding off it sets the FORWARD policy to DROP
    log = open(ENGINE_DIR / "dockerd.log", "wb")  # noqa: SIM115 - owned by the child
    proc = subprocess.Popen(
        ["dockerd", "--pidfile", str(ENGINE_DIR / "dockerd.pid")],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # a Ctrl-C of the test run reaches the tests, not the engine they share
    )
    log.close()
    state["pid"] = proc.pid
    state["started"] = leases.process_started(proc.pid)
    write_atomic(_state_path(), json.dumps(state))
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        if running():
            state.update(engine_objects(client()))
            write_atomic(_state_path(), json.dumps(state))
            return
        time.sleep(0.1)  # polling the engine's socket with a deadline
    tail = (ENGINE_DIR / "dockerd.log").read_text(errors="replace")[-1500:]
    _stop()
    raise DockerUnavailable(f"dockerd did not answer within {START_TIMEOUT:g}s; its log ends:\n{tail}")


def _stop() -> None:
    """Stops our dockerd (SIGTERM, then SIGKILL) and undoes what it changed in the host."""
    state = _read_state()
    if state is None:
        return
    proc = _dockerd(state)
    if proc is not None and "images" in state:
        _remove_new_objects(state)
    if proc is not None:
        engine_processes.stop(proc, STOP_TIMEOUT)  # containerd, its shims and their containers too
    _restore_host(state)
    _state_path().unlink(missing_ok=True)
    before, after = state.get("before"), host_snapshot()
    if before is not None and after != before:
        changed = {k: (before[k], after[k]) for k in before if before[k] != after.get(k)}
        raise EngineCleanupError(f"the Docker engine we stopped left the host changed (before, after): {changed}")


class EngineObjects(TypedDict):
    images: list[str]
    containers: list[str]
    networks: list[str]


def engine_objects(c: DockerClient) -> EngineObjects:
    """The ids of what the engine holds: every image, container (listed, so one removed meanwhile cannot fail
    it) and network."""
    return {
        "images": [image.id for image in c.images.list(all=True)],
        "containers": [container.id for container in docker_listing.listed(c, all=True)],
        "networks": [network.id for network in c.networks.list()],
    }


def remove_new_containers(c: DockerClient, known: list[str], filters: docker_listing.Filters | None = None) -> None:
    """Removes every container (matching `filters`) whose id is not in `known`; one already gone is no error."""
    import docker

    for container in docker_listing.listed(c, all=True, filters=filters):
        if container.id not in known:
            with contextlib.suppress(docker.errors.DockerException):
                c.api.remove_container(container.id, force=True)


def _remove_new_objects(state: EngineState) -> None:
    """Removes what was made while our engine ran and is still there (a killed test's containers and networks, the
    member and base images of the tests): a machine keeps none of it. The base image's root file system stays
    cached as a tarball (compose/base-image.sh)."""
    import docker

    try:
        c = client(timeout=30.0)
        remove_new_containers(c, state.get("containers", []))
        for network in c.networks.list():
            if network.id not in state.get("networks", []):
                with contextlib.suppress(docker.errors.DockerException):
                    network.remove()
        for _ in range(4):  # children first: an image with a child image cannot be removed, even with force
            new = [image for image in c.images.list(all=True) if image.id not in state["images"]]
            for image in new:
                with contextlib.suppress(docker.errors.DockerException):
                    c.images.remove(image.id, force=True)
            if not new:
                break
        c.images.prune(filters={"dangling": False})
    except (docker.errors.DockerException, DockerUnavailable):
        pass  # the engine is going away anyway; _restore_host undoes what it left in the host


def _restore_host(state: EngineState) -> None:
    """Undoes what the engine changed in the host (after it stopped): the rules it added, its chains, its bridges,
    ip_forward, the folders it made."""
    before: Mapping[str, object] = state.get("before", state)

    def listed(key: str, default: tuple[str, ...] = ()) -> list[str]:
        value = before.get(key, default)
        return [str(v) for v in value] if isinstance(value, list | tuple) else []

    def had(key: str, default: tuple[str, ...] = ()) -> set[str]:
        return set(listed(key, default))

    added = Counter(_rules()) - Counter(listed("rules"))  # a rule there twice and before once: one copy to delete
    for entry, copies in sorted(added.items()):
        table, rule = entry.split(":", 1)
        chain, *args = shlex.split(rule[3:])
        for _ in range(copies):
            subprocess.run(["iptables", "-w", "5", "-t", table, "-D", chain, *args], capture_output=True)
    for entry in sorted(_docker_chains() - had("chains")):
        table, chain = entry.split(":", 1)
        subprocess.run(["iptables", "-w", "5", "-t", table, "-F", chain], capture_output=True)
        subprocess.run(["iptables", "-w", "5", "-t", table, "-X", chain], capture_output=True)
    left = {entry.split(":", 1)[0] for entry in _rules()}
    for table in sorted(_iptables_tables() - had("nft_tables") - left):
        subprocess.run(["nft", "delete", "table", "ip", table], capture_output=True)  # empty now: dockerd made it
    for link in sorted(_bridges() - had("links")):
        subprocess.run(["ip", "link", "del", link], capture_output=True)
    if "ip_forward" in before:
        IP_FORWARD.write_text(f"{before['ip_forward']}\n")
    for folder in sorted(set(ENGINE_DIRS) - had("engine_dirs", ENGINE_DIRS)):
        _unmount_under(folder)
        shutil.rmtree(folder, ignore_errors=True)


def _unmount_under(folder: str) -> None:
    """Unmounts what is still mounted below folder (deepest first), so removing it removes only our files."""
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for mount in sorted((m for m in mounts if m == folder or m.startswith(folder + "/")), reverse=True):
        subprocess.run(["umount", "-l", mount], capture_output=True)


def _docker_chains() -> set[str]:
    """(table, chain) names of Docker's iptables chains, as "table:chain"."""
    chains: set[str] = set()
    if shutil.which("iptables-save") is None:
        return chains
    for table in ("filter", "nat"):
        out = subprocess.run(["iptables-save", "-t", table], capture_output=True, text=True).stdout
        chains |= {f"{table}:{line[1:].split()[0]}" for line in out.splitlines() if line.startswith(":DOCKER")}
    return chains
