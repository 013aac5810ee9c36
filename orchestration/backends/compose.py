"""A cluster that `docker compose` started (compose/docker-compose.yml, or any compose project), attached so that
`chaosbed status`, `send`, `fault`, `kill`/`pause`/`leave` and `check` work on it as on a cluster of our own.

`chaosbed compose attach` finds the project's running member containers, names them (compose_members.py: replica n
of one service is the n-th letter, as chaosbed's members name themselves), reads their control token from the
containers' environment and attaches each one's network namespace on the host as L-<member>, so the netns fault engine
installs the same rules as on netns. Faults and heals go to faults.jsonl next to the histories (the folder mounted at
/history, or --history), so `chaosbed check` of that folder sees them. Containers that are not chaosbed's members
(any image) are a foreign system (ForeignCompose): every network fault works on them; control only where they answer
the control contract; their histories are checked against the history contract when they write them to the mounted
folder (the attach writes a scenario.toml there naming the system). `chaosbed down` detaches (faults healed,
namespaces unnamed, state removed); the containers stay until `docker compose down`. A container restarted by compose
gets a new network namespace: attach again.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from orchestration.backends import container_netns
from orchestration.backends.compose_members import (
    Found,
    env_of,
    foreign_system,
    has_member_service,
    history_folders,
    is_chaosbed_member,
    project_members,
)
from orchestration.backends.docker import DockerCluster, member_pid
from orchestration.backends.foreign import ForeignMembers
from orchestration.backends.netns import check_netns_available, reap_namespaces
from orchestration.backends.real import state_str
from orchestration.cluster import ClusterError, ClusterSpec, MemberInfo, new_label
from orchestration.host import docker_engine

if TYPE_CHECKING:
    from docker.models.containers import Container

HISTORY_MOUNT = "/history"


class ComposeCluster(DockerCluster):
    backend_name = "compose"

    @classmethod
    def attach_project(
        cls, project: str = "chaosbed", service: str | None = None, history: str = HISTORY_MOUNT
    ) -> ComposeCluster:
        """Attaches the running members of a compose project (ClusterError if it has none): of `service`, else of
        its `member` service if it has one (chaosbed's compose file), else of every service. Containers that are not
        chaosbed's members are attached as a foreign system (ForeignCompose)."""
        check_netns_available()
        client = docker_engine.client()
        if service is None and has_member_service(client, project):
            service = "member"
        found = project_members(client, project, service)
        containers = [f.container for f in found]
        folders = history_folders(containers, history)
        native = all(is_chaosbed_member(c) for c in containers)
        if len(folders) > 1 or (native and len(folders) != 1):
            raise ClusterError(f"the members do not share one history folder mounted at {history}: {folders}")
        label = new_label()
        if native:
            env = env_of(containers[0])
            spec = ClusterSpec(
                members=[f.name for f in found],
                stack=env.get("CHAOSBED_STACK", "unicast3+nakack2"),
                transport=env.get("CHAOSBED_TRANSPORT", "udp"),
                backend="compose",
            )
        else:
            system = foreign_system(project, containers)
            spec = ClusterSpec([f.name for f in found], system.stack, "udp", backend="compose", system=system.to_dict())
        workdir = Path(next(iter(folders))).parent if folders else Path("runs") / label
        cluster = (cls if native else ForeignCompose)(spec, label=label, workdir=workdir)
        cluster.token = env_of(containers[0]).get("CHAOSBED_TOKEN", "")
        cluster._project, cluster._service = project, service or ""
        cluster._client = client
        cluster.state_dir.mkdir(parents=True, exist_ok=True)
        try:
            for f in found:
                cluster._attach_member(f, next(iter(folders)) if folders and not native else "")
            cluster._save_state()
        except BaseException:
            cluster.down()
            raise
        return cluster

    def _attach_member(self, f: Found, history_folder: str) -> None:
        """Names the member container's network namespace on the host (L-<member>) and records the member."""
        ns = self.member_ns(f.name)
        pid = container_netns.attach(ns, f.container)
        history = f"{history_folder}/{f.name}.jsonl" if history_folder else ""
        self.members[f.name] = MemberInfo(f.name, f.ip, f.port, pid=member_pid(pid), netns=ns, history=history)
        self._containers[f.name] = f.container.name

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


class ForeignCompose(ComposeCluster, ForeignMembers):
    """A compose project whose containers are not chaosbed's members: the same faults in their namespaces; control
    only where they answer the control contract; leave is SIGTERM to the container."""

    def _terminate(self, m: MemberInfo) -> None:
        container = self._member_container(m)
        if container is not None:
            container.kill("SIGTERM")
