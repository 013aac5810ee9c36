"""What a chaos agent does on its host for each cluster: find the cluster's member containers on the local Docker
engine and attach their network namespaces (`<cluster>-<member>`, as the docker backend does), install the
cluster's faults in them (engine.py: the netns engine restricted to the local receivers), act on the local members
(kill, pause, resume, stop), relay control requests to them from inside their namespaces, hand out their histories,
and heal everything when the orchestrator's lease runs out or it releases the cluster.

Each cluster's files on the host: `<state>/clusters/<label>/`: `chaos.json` (the engine's table and handlers),
`members.json` (the endpoints, so a restarted agent can heal what an earlier one installed), `history/` (bind-mounted
into the members' containers as /history).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from chaos.faults import ChaosError, FaultRecord
from chaos.render import Endpoint
from node import jsonl
from orchestration.agent.engine import HostFaultEngine
from orchestration.agent.replies import AttachedMember, AttachReply, HistoryReply, StatsReply, bypass_reply
from orchestration.backends.netns import _socket_in_namespace, list_namespaces
from orchestration.host import docker_listing

if TYPE_CHECKING:
    from docker import DockerClient
    from docker.models.containers import Container

LABEL = "chaosbed.cluster"  # the docker label of everything a cluster creates (orchestration/backends/docker.py)
HISTORY_CHUNK = 4 << 20  # bytes of a history file per `history` reply


class AgentError(RuntimeError):
    """A request the agent could not carry out; the reply's error says why."""


@dataclass
class ClusterOnHost:
    """One cluster as this host sees it."""

    label: str
    folder: Path
    lease_s: float
    expires: float  # time.monotonic() when the lease runs out
    transport: str = "udp"
    endpoints: dict[str, Endpoint] = field(default_factory=dict)  # every member of the cluster
    local: dict[str, str] = field(default_factory=dict)  # member -> its container's id, for the members here
    expired_at: float | None = None  # when the lease ran out and the agent healed the cluster (epoch seconds)
    generation: int = 0  # of the fault table installed last (the orchestrator's CLOCK_MONOTONIC when it sent it)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def engine(self) -> HostFaultEngine:
        return HostFaultEngine(self.folder, self.label, self.endpoints, self.local, transport=self.transport)

    def save(self) -> None:
        doc = {"transport": self.transport, "local": self.local,
               "endpoints": {n: [e.ip, e.ns] for n, e in self.endpoints.items()}}  # fmt: skip
        (self.folder / "members.json").write_text(json.dumps(doc))


def member_ns(label: str, name: str) -> str:
    return f"{label}-{name}"


class Host:
    """The clusters of this host's agent; every method is one request of the protocol (server.py)."""

    def __init__(self, name: str, state: Path, docker_url: str) -> None:
        self.name = name
        self.state = state
        self.docker_url = docker_url
        self.clusters: dict[str, ClusterOnHost] = {}
        self._lock = threading.Lock()
        self._client: DockerClient | None = None

    @property
    def docker(self) -> DockerClient:
        if self._client is None:
            import docker

            self._client = docker.DockerClient(base_url=self.docker_url, timeout=60)
        return self._client

    def cluster(self, label: object, *, create: bool = False, lease_s: float = 10.0) -> ClusterOnHost:
        if not isinstance(label, str) or not label.isalnum():
            raise AgentError(f"bad cluster label {label!r}")
        with self._lock:
            c = self.clusters.get(label)
            if c is None:
                if not create:
                    raise AgentError(f"no cluster {label} on host {self.name} (never prepared, or released)")
                folder = self.state / "clusters" / label
                (folder / "history").mkdir(parents=True, exist_ok=True)
                c = self.clusters[label] = ClusterOnHost(label, folder, lease_s, time.monotonic() + lease_s)
            return c

    # --- lifecycle of a cluster on this host --------------------------------------------------------------------

    def prepare(self, label: str, lease_s: float) -> dict[str, object]:
        """Registers a cluster (its lease starts) and makes its history folder: the bind mount of its members."""
        c = self.cluster(label, create=True, lease_s=lease_s)
        c.lease_s = lease_s
        self.renew(c)
        return {"history_dir": str(c.folder / "history")}

    def renew(self, c: ClusterOnHost) -> dict[str, object]:
        """Renews the lease; a lease that has run out is not renewed but expires now, if the watchdog has not got
        to it yet (a request that waited while this agent was stopped or cut off must not bring faults back)."""
        if c.expired_at is None and time.monotonic() > c.expires:
            self.expire()
        c.expires = time.monotonic() + c.lease_s
        return {"lease_s": c.lease_s, "expired_at": c.expired_at}

    def attach(self, c: ClusterOnHost, names: list[str], transport: str, timeout: float) -> AttachReply:
        """Finds the running container of each member in `names` on this engine, attaches its network namespace and
        returns its address on the cluster's network and its host pid."""
        found: dict[str, AttachedMember] = {}
        with c.lock:
            c.transport = transport
            for name in names:
                container = self._running_container(c.label, name, timeout)
                pid = int(container.attrs["State"]["Pid"])
                ns = member_ns(c.label, name)
                if ns in list_namespaces():
                    _ip("netns", "del", ns)
                _ip("netns", "attach", ns, str(pid))
                ip = _address(container, c.label)
                c.local[name] = container.id
                c.endpoints[name] = Endpoint(name, ip, ns)
                found[name] = {"ip": ip, "pid": _member_pid(pid), "container": container.id[:12]}
            c.save()
        return {"members": found}

    def _running_container(self, label: str, name: str, timeout: float = 30.0) -> Container:
        """The member's running container (its task's), waited for up to `timeout`: swarm starts it shortly after
        the task is assigned."""
        filters = {"label": [f"{LABEL}={label}", f"chaosbed.member={name}"], "status": "running"}
        deadline = time.monotonic() + timeout
        while True:
            running = docker_listing.containers(self.docker, filters=filters)  # a replaced task's may vanish
            if running:
                return running[0]
            if time.monotonic() > deadline:
                raise AgentError(f"no running container of member {name} of {label} on host {self.name}")
            time.sleep(0.1)  # polling the engine with a deadline

    def install(
        self, c: ClusterOnHost, endpoints: dict[str, str], records: list[FaultRecord], shift_ns: int, generation: int
    ) -> bool:
        """The cluster's faults (every record of the orchestrator's table) in force on the local members; False
        when a later table (a higher `generation`) is already installed: pushes may arrive out of order."""
        with c.lock:
            if generation < c.generation:
                return False
            c.generation = generation
            for name, ip in endpoints.items():
                ns = c.endpoints[name].ns if name in c.endpoints else member_ns(c.label, name)
                c.endpoints[name] = Endpoint(name, ip, ns)
            c.save()
            if c.expired_at is not None and records:
                raise AgentError(
                    f"the lease of {c.label} on host {self.name} ran out at {time.ctime(c.expired_at)} and its faults "
                    "were healed; the orchestrator lost this host"
                )
            try:
                c.engine().install(records, shift_ns)
            except ChaosError as e:
                raise AgentError(str(e)) from None
        return True

    def stats(self, c: ClusterOnHost) -> StatsReply:
        with c.lock:
            engine = c.engine()
            faults = [f.to_json() for f in engine.faults(stats=True)]
            bypass = {m: bypass_reply(b) for m, b in engine.queue_bypass().items()}
            return {"faults": faults, "kernel": engine.kernel_counters(), "bypass": bypass}

    def installed(self, c: ClusterOnHost) -> dict[str, object]:
        with c.lock:
            engine = c.engine()
            live = set(list_namespaces())
            rules = {m: r for m, r in engine.installed().items() if engine.members[m].ns in live}
            return {"rules": rules, "handlers": sorted(engine.handlers())}

    def heal(self, c: ClusterOnHost, why: str) -> None:
        """Removes every fault of the cluster from the local members and stops its handlers."""
        with c.lock:
            engine = c.engine()
            with contextlib.suppress(ChaosError, OSError):
                engine.heal()
            engine.shutdown()
        print(json.dumps({"healed": c.label, "why": why, "t": time.time()}), flush=True)

    def expire(self) -> None:
        """Heals the clusters whose lease ran out (the orchestrator is gone, or cannot reach this host)."""
        now = time.monotonic()
        for c in list(self.clusters.values()):
            with self._lock:
                due = c.expired_at is None and now > c.expires
                if due:
                    c.expired_at = time.time()
            if due:
                self.heal(c, f"lease of {c.lease_s:g} s ran out")

    def release(self, c: ClusterOnHost, remove_files: bool) -> None:
        """Heals the cluster, detaches its namespaces and forgets it (with its files, histories included, if
        `remove_files`: the orchestrator has collected them; else a later agent's `recover` finds them)."""
        self.heal(c, "released" if remove_files else "the agent stopped")
        with c.lock:
            for name in c.local:
                _ip("netns", "del", member_ns(c.label, name), check=False)
        with self._lock:
            self.clusters.pop(c.label, None)
        if remove_files:
            shutil.rmtree(c.folder, ignore_errors=True)

    def recover(self) -> list[str]:
        """At start: heals what an earlier agent of this host installed and could not remove (it was killed), from
        the clusters' files: the members' namespaces are attached again from their containers (an agent's
        attachments may have died with it: the service's agents keep them in a private /run/netns)."""
        healed = []
        for folder in sorted((self.state / "clusters").glob("*")) if (self.state / "clusters").is_dir() else []:
            try:
                doc = json.loads((folder / "members.json").read_text())
            except (OSError, ValueError):
                continue
            endpoints = {n: Endpoint(n, str(v[0]), str(v[1])) for n, v in doc.get("endpoints", {}).items()}
            c = ClusterOnHost(folder.name, folder, 0.0, 0.0, str(doc.get("transport", "udp")), endpoints,
                              dict(doc.get("local", {})), expired_at=time.time())  # fmt: skip
            c.local = {n: cid for n, cid in c.local.items() if n in endpoints and self._reattach(endpoints[n].ns, cid)}
            self.heal(c, "an earlier agent of this host left it")
            self.clusters[c.label] = c
            healed.append(c.label)
        return healed

    def _reattach(self, ns: str, container_id: str) -> bool:
        """Whether namespace `ns` is attached: still (this agent's own, or one an agent in this host's namespaces
        left), or again, to the container's if it still runs."""
        import docker

        if ns in list_namespaces():
            return True
        try:
            container = self.docker.containers.get(container_id)
            pid = int(container.attrs["State"]["Pid"])
        except (docker.errors.DockerException, KeyError, ValueError):
            return False
        return pid > 0 and _ip("netns", "attach", ns, str(pid), check=False)

    # --- members ------------------------------------------------------------------------------------------------

    def member(self, c: ClusterOnHost, name: str, action: str, timeout: float) -> dict[str, object]:
        """kill (SIGKILL, then waits for the exit), term (SIGTERM, then waits), pause, resume, or state."""
        import docker

        if name not in c.local:
            raise AgentError(f"member {name} of {c.label} does not run on host {self.name}")
        try:
            container = self.docker.containers.get(c.local[name])
            if action in ("kill", "term"):
                if container.status == "paused":
                    container.unpause()
                if container.status in ("running", "paused"):
                    container.kill("SIGKILL" if action == "kill" else "SIGTERM")
                exit_code = container.wait(timeout=timeout)["StatusCode"]
                return {"exit_code": exit_code}
            if action == "pause":
                container.pause()
            elif action == "resume":
                container.unpause()
            elif action != "state":
                raise AgentError(f"unknown member action {action!r}: kill | term | pause | resume | state")
            container.reload()
            return {"state": container.status}
        except docker.errors.NotFound:
            return {"state": "gone", "exit_code": None}
        except docker.errors.DockerException as e:
            raise AgentError(f"member {name}: the engine: {e}") from None
        except Exception as e:  # requests' ReadTimeout from wait(): the container did not exit in time
            raise AgentError(f"member {name} did not end within {timeout:g} s ({type(e).__name__})") from None

    def control(self, c: ClusterOnHost, name: str, request: dict[str, object], port: int, timeout: float) -> object:
        """A member's control request, made from inside its namespace; returns its reply."""
        ep = c.endpoints.get(name)
        if ep is None or name not in c.local:
            raise AgentError(f"member {name} of {c.label} does not run on host {self.name}")
        try:
            return jsonl.request(lambda: _socket_in_namespace(ep.ns, (ep.ip, port), timeout), request, timeout,
                                 peer=f"member {name}")  # fmt: skip
        except (OSError, ValueError) as e:
            raise AgentError(f"member {name}: {e}") from None

    def history(self, c: ClusterOnHost, name: str, offset: int) -> HistoryReply:
        """Up to HISTORY_CHUNK bytes of a member's history file from `offset` (whole lines, unless a line is longer
        than a chunk), as text."""
        path = c.folder / "history" / f"{name}.jsonl"
        if not path.exists():
            return {"data": "", "size": 0, "next": 0}
        size = path.stat().st_size
        with path.open("rb") as f:
            f.seek(offset)
            data = f.read(HISTORY_CHUNK)
        if offset + len(data) < size and b"\n" in data:
            data = data[: data.rindex(b"\n") + 1]
        return {"data": data.decode("utf-8", "surrogateescape"), "size": size, "next": offset + len(data)}


def _address(container: Container, label: str) -> str:
    """The container's address on the cluster's overlay network (named after the cluster's label)."""
    for net, info in container.attrs["NetworkSettings"]["Networks"].items():
        if net == label and info.get("IPAddress"):
            return str(info["IPAddress"])
    raise AgentError(f"container {container.name} has no address on network {label}")


def _member_pid(init_pid: int) -> int:
    """The member process under the container's init (its own pid if it has no child yet)."""
    import psutil

    with contextlib.suppress(psutil.NoSuchProcess):
        children = psutil.Process(init_pid).children()
        if children:
            return children[0].pid
    return init_pid


def _ip(*args: str, check: bool = True) -> bool:
    """Runs `ip ARGS`; whether it succeeded (AgentError saying why if not and `check`)."""
    proc = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AgentError(f"ip {' '.join(args)}: {proc.stderr.strip()}")
    return proc.returncode == 0
