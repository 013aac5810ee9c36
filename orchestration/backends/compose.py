"""A cluster that `docker compose` started (compose/docker-compose.yml), attached so that `chaosbed status`, `send`,
`fault`, `kill`/`pause` and `check` work on it as on a cluster of our own.

`chaosbed compose attach` finds the project's running member containers, names them as the members name
themselves (replica n is the n-th letter), reads their control token from the containers' environment and attaches
each one's network namespace on the host as L-<member>, so the netns fault engine installs the same rules as on netns.
Faults and heals go to faults.jsonl next to the histories (the folder mounted at /history), so `chaosbed check` of
that folder sees them. `chaosbed down` detaches (faults healed, namespaces unnamed, state removed); the containers
stay until `docker compose down`. A container restarted by compose gets a new network namespace: attach again.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from orchestration.backends.docker import DockerCluster, member_pid
from orchestration.backends.netns import check_netns_available, reap_namespaces
from orchestration.backends.real import state_str
from orchestration.cluster import ClusterError, ClusterSpec, MemberInfo, new_label
from orchestration.host import docker_engine

if TYPE_CHECKING:
    from docker.models.containers import Container

DATA_PORT = 7800
HISTORY_MOUNT = "/history"


def _replica(container: Container) -> str | None:
    number = container.labels.get("com.docker.compose.container-number", "")
    return chr(ord("A") + int(number) - 1) if number.isdigit() and 1 <= int(number) <= 26 else None


def _env(container: Container) -> dict[str, str]:
    return dict(item.split("=", 1) for item in container.attrs["Config"].get("Env") or [] if "=" in item)


class ComposeCluster(DockerCluster):
    backend_name = "compose"

    @classmethod
    def attach_project(cls, project: str = "chaosbed", service: str = "member") -> ComposeCluster:
        """Attaches the running members of a compose project (ClusterError if it has none)."""
        check_netns_available()
        client = docker_engine.client()
        filters = {"label": [f"com.docker.compose.project={project}", f"com.docker.compose.service={service}"]}
        containers = sorted(
            (c for c in client.containers.list(filters=filters) if _replica(c)), key=lambda c: str(_replica(c))
        )
        if not containers:
            raise ClusterError(
                f"no running container of service {service!r} in compose project {project!r} "
                "(docker compose -f compose/docker-compose.yml up -d)"
            )
        envs = [_env(c) for c in containers]
        history = {m["Source"] for c in containers for m in c.attrs["Mounts"] if m["Destination"] == HISTORY_MOUNT}
        if len(history) != 1:
            raise ClusterError(f"the members do not share one history folder mounted at {HISTORY_MOUNT}: {history}")
        spec = ClusterSpec(
            members=[str(_replica(c)) for c in containers],
            stack=envs[0].get("CHAOSBED_STACK", "unicast3+nakack2"),
            transport=envs[0].get("CHAOSBED_TRANSPORT", "udp"),
            backend="compose",
        )
        cluster = cls(spec, label=new_label(), workdir=Path(history.pop()).parent)
        cluster.token = envs[0].get("CHAOSBED_TOKEN", "")
        cluster._project, cluster._service = project, service
        cluster._client = client
        cluster.state_dir.mkdir(parents=True, exist_ok=True)
        try:
            for c in containers:
                name = str(_replica(c))
                ns = cluster.member_ns(name)
                (net,) = c.attrs["NetworkSettings"]["Networks"].values()
                pid = c.attrs["State"]["Pid"]
                proc = subprocess.run(["ip", "netns", "attach", ns, str(pid)], capture_output=True, text=True)
                if proc.returncode != 0:
                    raise ClusterError(f"ip netns attach {ns} {pid}: {proc.stderr.strip()}")
                cluster.members[name] = MemberInfo(name, net["IPAddress"], DATA_PORT, pid=member_pid(pid), netns=ns)
                cluster._containers[name] = c.name
            cluster._save_state()
        except BaseException:
            cluster.down()
            raise
        return cluster

    def __init__(self, spec: ClusterSpec, *, label: str | None = None, workdir: Path | None = None) -> None:
        super().__init__(spec, label=label, workdir=workdir)
        self._project = "chaosbed"
        self._service = "member"
        self._containers: dict[str, str] = {}

    def _member_container(self, m: MemberInfo) -> Container | None:
        import docker

        try:
            return self.docker.containers.get(self._containers[m.name])
        except (docker.errors.NotFound, KeyError):
            return None

    def running(self) -> list[str]:
        return [n for n, m in self.members.items() if (c := self._member_container(m)) and c.status == "running"]

    def kill(self, name: str) -> None:
        m = self.members[name]
        container = self._member_container(m)
        if container is None or container.status != "running":
            raise ClusterError(f"member {name} is not running")
        container.kill("SIGKILL")
        m.pid = None

    def restart(self, name: str, timeout: float = 30.0) -> None:
        raise ClusterError(
            "a compose member is restarted by compose (docker compose start), in a new network namespace: "
            "then run `chaosbed compose attach` again"
        )

    def start(self, timeout: float = 30.0) -> ComposeCluster:
        raise ClusterError("compose clusters are started by docker compose; use `chaosbed compose attach`")

    def down(self) -> None:
        """Detaches: heals every fault, unnames the namespaces, removes the state. The containers stay.
        Idempotent."""
        if self.members and self.state_dir.exists():
            if all(Path(f"/run/netns/{self.member_ns(n)}").exists() for n in self.members):
                self.chaos.heal()  # the containers live on: take our rules out of their namespaces
            # else compose stopped them: their namespaces, and our rules in them, are gone
            self.chaos.shutdown()
        reap_namespaces(self.label)
        shutil.rmtree(self.state_dir, ignore_errors=True)

    def _network_state(self) -> dict[str, object]:
        return {
            **super()._network_state(),
            "project": self._project,
            "service": self._service,
            "containers": self._containers,
        }

    def _restore_network(self, network: Mapping[str, object]) -> None:
        super()._restore_network(network)
        self._project = state_str(network, "project") or "chaosbed"
        self._service = state_str(network, "service") or "member"
        containers = network.get("containers")
        self._containers = {str(k): str(v) for k, v in containers.items()} if isinstance(containers, dict) else {}
