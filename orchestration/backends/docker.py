"""Members as Docker containers on a user-defined bridge network, with the SAME faults as the netns backend.

Layout for cluster label L: a bridge network L (subnet 10.(250+i/250).(i%250).0/24 from the machine-wide claims,
bridge device L-br, multicast snooping off) and per member M
- a sandbox container L-M that only holds the member's network namespace (address .(10+j)), attached on the host
  as the named namespace L-M (`ip netns attach`), so the netns fault engine (chaos/netns_engine.py) installs the same
  nft rules and NFQUEUE handlers in it as in a netns member's namespace, and the control connection is made from
  inside it;
- the member container L-M.<incarnation> (`python3 -m node CONFIG`, init: true) in the sandbox's namespace
  (network_mode container:L-M). A restart is a new container in the same namespace: its address, and the faults in
  force on it, stay, as they do for a netns member.

kill = SIGKILL (docker kill), pause = docker pause (the cgroup freezer), restart = a new incarnation. Every
container, the network and the namespaces carry the label and are removed by `down` (also `down --all`).
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from orchestration.backends import container_netns
from orchestration.backends.netns import NetnsCluster, check_netns_available, reap_namespaces
from orchestration.backends.real import state_str
from orchestration.cluster import ClusterError, ClusterSpec, MemberInfo
from orchestration.host import claims, docker_engine, docker_images, docker_listing

if TYPE_CHECKING:
    from docker import DockerClient
    from docker.models.containers import Container

DATA_PORT = 7800
LABEL = "chaosbed.cluster"  # docker label of everything a cluster creates; value: the cluster's label
STOP_TIMEOUT = 10.0
PARALLEL = 8  # containers created at once


class DockerCluster(NetnsCluster):
    backend_name = "docker"
    _client: DockerClient | None = None
    _image: str = ""

    @property
    def docker(self) -> DockerClient:
        if self._client is None:
            self._client = docker_engine.client()
        return self._client

    # --- network and sandboxes ------------------------------------------------------------------------------------

    def _place(self, names: list[str]) -> None:
        check_netns_available()  # the faults enter the containers' namespaces as root, as on netns
        import docker

        self._image = docker_images.member_image(self.docker)
        index = claims.claim(self.label, "docker", 4 * 250, self.state_dir)
        a, b = 250 + index // 250, index % 250
        self._prefix = f"10.{a}.{b}"
        self._group = f"239.79.{a}.{b}"
        ipam = docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(subnet=f"{self._prefix}.0/24")])
        self.docker.networks.create(
            self.label,
            driver="bridge",
            ipam=ipam,
            labels={LABEL: self.label},
            options={"com.docker.network.bridge.name": self.bridge},
        )
        # members find each other by multicast: no IGMP querier runs, so do not let snooping prune the group
        snooping = Path(f"/sys/class/net/{self.bridge}/bridge/multicast_snooping")
        with contextlib.suppress(OSError):
            snooping.write_text("0\n")
        # a container is a few engine round trips (~0.3 s): make the sandboxes concurrently
        with ThreadPoolExecutor(PARALLEL) as pool:
            placed = list(pool.map(self._sandbox, names, [f"{self._prefix}.{10 + i}" for i in range(len(names))]))
        for m in placed:
            self.members[m.name] = m

    def _sandbox(self, name: str, ip: str) -> MemberInfo:
        """The container that holds member `name`'s network namespace at `ip`, attached on the host."""
        ns = self.member_ns(name)
        sandbox = self.docker.containers.create(
            self._image,
            entrypoint=["sleep", "infinity"],  # only holds the namespace: no interpreter to start
            name=ns,
            hostname=name,
            labels={LABEL: self.label, "chaosbed.role": "sandbox", "chaosbed.member": name},
            init=True,
            network=self.label,
            networking_config={self.label: self.docker.api.create_endpoint_config(ipv4_address=ip)},
            detach=True,
        )
        sandbox.start()
        container_netns.attach(ns, sandbox)
        return MemberInfo(name, ip, DATA_PORT, netns=ns)

    @property
    def bridge(self) -> str:
        return f"{self.label}-br"

    def _container_name(self, m: MemberInfo) -> str:
        return f"{self.member_ns(m.name)}.{m.incarnation}"

    # --- members ----------------------------------------------------------------------------------------------------

    def __init__(self, spec: ClusterSpec, *, label: str | None = None, workdir: Path | None = None) -> None:
        super().__init__(spec, label=label, workdir=workdir)
        self.workdir = self.workdir.resolve()  # bind mounts and the paths in the members' configs are absolute

    def start(self, timeout: float = 30.0) -> DockerCluster:
        import docker

        try:
            super().start(timeout)
        except docker.errors.DockerException as e:  # the engine refused: say what it said, not a traceback
            raise ClusterError(f"the Docker engine: {e}") from None
        self._save_state()  # with the members' own pids (wait_ready found them), for `chaosbed status`
        return self

    def _spawn_all(self, members: list[MemberInfo]) -> None:
        with ThreadPoolExecutor(PARALLEL) as pool:
            list(pool.map(self._spawn, members))

    def _spawn(self, m: MemberInfo) -> None:
        self._write_config(m)
        if not self._image:
            self._image = docker_images.member_image(self.docker)
        container = self.docker.containers.run(
            name=self._container_name(m),
            labels={LABEL: self.label, "chaosbed.role": "member", "chaosbed.member": m.name},
            init=True,  # SIGTERM reaches the member through docker-init, and `down` takes seconds
            network_mode=f"container:{self.member_ns(m.name)}",
            detach=True,
            **self._member_run(m),
        )
        container.reload()
        m.pid = container.attrs["State"]["Pid"]  # docker-init's host pid until the member runs (wait_ready)
        m.paused = False

    def _member_run(self, m: MemberInfo) -> dict[str, object]:
        """What a member's container runs: image, entrypoint, command, mounts (the config read-only, the histories),
        and for a foreign member its environment and working directory (backends/foreign.py)."""
        history = str(Path(m.history).parent)
        return {
            "image": self._image,
            "entrypoint": ["python3", "-m", "node"],
            "command": [m.config],
            "volumes": {
                str(self.state_dir): {"bind": str(self.state_dir), "mode": "ro"},
                history: {"bind": history, "mode": "rw"},
            },
        }

    def wait_ready(self, name: str, timeout: float) -> None:
        m = self.members[name]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.control(name, "ping", timeout=1.0).get("ok"):
                    m.pid = member_pid(m.pid) if m.pid is not None else None
                    return
            except (OSError, ClusterError):
                pass
            container = self._member_container(m)
            if container is not None and container.status == "exited":
                logs = container.logs(tail=40).decode(errors="replace")
                raise ClusterError(f"member {name} exited at start:\n{logs}")
            time.sleep(0.05)  # polling a condition with a deadline
        raise ClusterError(f"member {name} did not answer on its control port within {timeout:g}s")

    def _member_container(self, m: MemberInfo) -> Container | None:
        import docker

        try:
            return self.docker.containers.get(self._container_name(m))
        except docker.errors.NotFound:
            return None

    def _container_of(self, name: str) -> Container:
        """The container of a member that must have one (ClusterError if it is gone)."""
        container = self._member_container(self.members[name])
        if container is None:
            raise ClusterError(f"member {name} is not running (its container is gone)")
        return container

    def kill(self, name: str) -> None:
        """SIGKILL (docker kill): the member's history may end in a partial line."""
        m = self.members[name]
        container = self._member_container(m)
        if container is None or m.pid is None or name not in self.running():
            raise ClusterError(f"member {name} is not running")
        container.kill("SIGKILL")
        container.wait(timeout=STOP_TIMEOUT)
        self._keep_log(container)
        container.remove(force=True)
        m.pid = None

    def pause(self, name: str) -> None:
        m = self.members[name]
        if m.pid is None or name not in self.running():
            raise ClusterError(f"member {name} is not running")
        self._container_of(name).pause()
        m.paused = True

    def resume(self, name: str) -> None:
        m = self.members[name]
        container = self._member_container(m)
        if container is None:
            raise ClusterError(f"member {name} is not running")
        container.unpause()
        m.paused = False

    def restart(self, name: str, timeout: float = 30.0) -> None:
        m = self.members[name]
        old = self._member_container(m)
        if old is not None:
            if name in self._leaving:  # finishing its leave: the new incarnation starts once it has exited
                old.wait(timeout=timeout)
            old.reload()
            if old.status == "running":
                raise ClusterError(f"member {name} is running; kill it first")
            self._keep_log(old)
            old.remove(force=True)
        self._leaving.discard(name)
        m.pid = None
        super().restart(name, timeout)
        self._save_state()

    def stop_members(self) -> None:
        """Graceful stop of every running member (each writes its `stop` event), waiting for them to exit."""
        running = self.running()
        for name in running:
            if self.members[name].paused:
                self.resume(name)
            self._container_of(name).kill("SIGTERM")
        for name in running:
            container = self._container_of(name)
            try:
                container.wait(timeout=STOP_TIMEOUT)
            except Exception as e:  # requests' ReadTimeout: the engine's wait did not return in time
                raise ClusterError(f"member {name} did not stop within {STOP_TIMEOUT:g}s of SIGTERM") from e
            self.members[name].pid = None

    def down(self) -> None:
        """Stops every member (SIGTERM, then SIGKILL), removes containers, network, namespaces and state.
        Idempotent."""
        try:
            client = self.docker
        except docker_engine.DockerUnavailable:
            client = None
        if client is not None:
            remove_containers(client, self.label, before_removal=self._keep_log)
        if self.members:
            self.chaos.shutdown()
        reap_namespaces(self.label)
        if client is not None:
            remove_networks(client, self.label)
        claims.release(self.label)
        shutil.rmtree(self.state_dir, ignore_errors=True)

    def _keep_log(self, container: Container) -> None:
        """Writes a member container's output (stdout and stderr as the engine kept them) into the run folder's
        logs/<name>.<incarnation>.log before the container is removed, as down keeps a process member's output: a
        failure's triage starts from what the members said. Nothing to keep without a run folder of its own; an
        engine that fails here costs the log, never the teardown."""
        incarnation = container.name.rpartition(".")[2]
        member = container.labels.get("chaosbed.member")
        if not member or not incarnation.isdigit() or self.workdir == self.state_dir.resolve():
            return
        with contextlib.suppress(Exception):
            output = container.logs(stdout=True, stderr=True)
            kept = self.workdir / "logs"
            kept.mkdir(parents=True, exist_ok=True)
            (kept / f"{member}.{incarnation}.log").write_bytes(output)

    def _network_state(self) -> dict[str, object]:
        return {**super()._network_state(), "image": self._image}

    def _restore_network(self, network: Mapping[str, object]) -> None:
        super()._restore_network(network)
        self._image = state_str(network, "image") or ""


def member_pid(init_pid: int) -> int:
    """The host pid of the member process (python3 -m node) under a container's docker-init, whose command line
    names the cluster; its RSS and CPU are what `chaosbed status` shows. docker-init's own pid if it has no child."""
    import psutil

    try:
        children = psutil.Process(init_pid).children()
    except psutil.NoSuchProcess:
        return init_pid
    return children[0].pid if children else init_pid


def remove_containers(
    client: DockerClient, label: str | None = None, before_removal: Callable[[Container], None] | None = None
) -> list[str]:
    """Removes the containers of one cluster (label) or of every chaosbed cluster (None): members first, with
    SIGTERM and a deadline (they write their `stop` event), then `before_removal` on each member, then the
    sandboxes."""
    selector = f"{LABEL}={label}" if label else LABEL
    containers = docker_listing.containers(client, all=True, filters={"label": selector})
    members = [c for c in containers if c.labels.get("chaosbed.role") == "member"]
    for c in members:
        with contextlib.suppress(Exception):
            if c.status == "paused":
                c.unpause()
            if c.status in ("running", "paused"):
                c.kill("SIGTERM")
    deadline = time.monotonic() + STOP_TIMEOUT
    for c in members:
        with contextlib.suppress(Exception):
            c.wait(timeout=max(0.1, deadline - time.monotonic()))
        if before_removal is not None:
            before_removal(c)

    def remove(c: Container) -> str | None:
        with contextlib.suppress(Exception):
            c.remove(force=True)
            return c.name
        return None

    with ThreadPoolExecutor(PARALLEL) as pool:  # members before their sandboxes: they use its namespace
        removed = [n for n in pool.map(remove, members) if n]
        removed += [n for n in pool.map(remove, [c for c in containers if c not in members]) if n]
    return removed


def remove_networks(client: DockerClient, label: str | None = None) -> list[str]:
    selector = f"{LABEL}={label}" if label else LABEL
    removed = []
    for net in client.networks.list(filters={"label": selector}):
        with contextlib.suppress(Exception):
            net.remove()
            removed.append(net.name)
    return removed


def reap_orphans(keep: set[str]) -> list[str]:
    """`down --all`: removes the containers and networks of chaosbed clusters whose label is not in keep (clusters
    with a state file, or a live claim); nothing without our label. Does nothing if no engine runs."""
    if not docker_engine.running():
        return []
    client = docker_engine.client()
    labels = {c.labels.get(LABEL) for c in docker_listing.listed(client, all=True, filters={"label": LABEL})}
    labels |= {n.attrs.get("Labels", {}).get(LABEL) for n in client.networks.list(filters={"label": LABEL})}
    removed = []
    for label in sorted(x for x in labels if x and x not in keep):
        remove_containers(client, label)
        reap_namespaces(label)
        remove_networks(client, label)
        removed.append(f"docker cluster {label}")
    return removed
