"""What `chaosbed compose attach` finds in a compose project: its members (names, containers, addresses), whether they
run chaosbed's own member or something else (a foreign system: any image), and where they write histories.

Names: the replicas of one service are A, B, C, ... (chaosbed's compose file scales one service); the containers of
several services are named after their service (`db`, `web`), replicas of those `web-2`, ... The address of a member
is its address on the network all members share (faults match on it). A member is chaosbed's own when its container
runs the member image's entrypoint (`python3 -m node.container`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from orchestration.cluster import ClusterError
from orchestration.host import docker_listing
from orchestration.systems import System

if TYPE_CHECKING:
    from docker import DockerClient
    from docker.models.containers import Container

CHAOSBED_ENTRYPOINT = ["python3", "-m", "node.container"]
DATA_PORT = 7800


@dataclass
class Found:
    name: str
    container: Container
    ip: str
    port: int


def env_of(container: Container) -> dict[str, str]:
    return dict(item.split("=", 1) for item in container.attrs["Config"].get("Env") or [] if "=" in item)


def _number(container: Container) -> int:
    n = container.labels.get("com.docker.compose.container-number", "")
    return int(n) if n.isdigit() else 1


def has_member_service(client: DockerClient, project: str) -> bool:
    """Whether the project runs a container of a service named `member` (chaosbed's compose file)."""
    labels = [f"com.docker.compose.project={project}", "com.docker.compose.service=member"]
    return bool(docker_listing.listed(client, filters={"label": labels}))


def project_members(client: DockerClient, project: str, service: str | None) -> list[Found]:
    """The running containers of the project (of `service`, or of every service), named and addressed."""
    labels = [f"com.docker.compose.project={project}"]
    if service is not None:
        labels.append(f"com.docker.compose.service={service}")
    containers = docker_listing.containers(client, filters={"label": labels})
    if not containers:
        which = f"service {service!r} in " if service else ""
        raise ClusterError(f"no running container of {which}compose project {project!r} (docker compose ... up -d)")
    services = sorted({c.labels.get("com.docker.compose.service", "") for c in containers})
    containers.sort(key=lambda c: (c.labels.get("com.docker.compose.service", ""), _number(c)))
    names = [_name(c, len(services) == 1) for c in containers]
    if len(set(names)) != len(names) or not all(names):
        raise ClusterError(f"cannot name the members of {project!r} uniquely: {names}")
    network = _shared_network(containers)
    return [Found(n, c, c.attrs["NetworkSettings"]["Networks"][network]["IPAddress"], _port(c)) for n, c in
            zip(names, containers, strict=True)]  # fmt: skip


def _name(container: Container, one_service: bool) -> str:
    n = _number(container)
    if one_service:
        return chr(ord("A") + n - 1) if 1 <= n <= 26 else ""
    service = container.labels.get("com.docker.compose.service", "")
    return service if n == 1 else f"{service}-{n}"


def _shared_network(containers: list[Container]) -> str:
    """The network every member is on (the first by name when there are several): the one faults act on."""
    common = set.intersection(*(set(c.attrs["NetworkSettings"]["Networks"]) for c in containers))
    if not common:
        raise ClusterError("the members share no network: chaosbed's faults act on the traffic between them")
    return sorted(common)[0]


def _port(container: Container) -> int:
    value = env_of(container).get("CHAOSBED_PORT", "")
    return int(value) if value.isdigit() else DATA_PORT


def is_chaosbed_member(container: Container) -> bool:
    return list(container.attrs["Config"].get("Entrypoint") or []) == CHAOSBED_ENTRYPOINT


def foreign_system(project: str, containers: list[Container]) -> System:
    """The system of containers that are not chaosbed's members: their command and image, with control where they
    have a control token (CHAOSBED_TOKEN) in their environment."""
    first = containers[0]
    config = first.attrs["Config"]
    argv = [*(config.get("Entrypoint") or []), *(config.get("Cmd") or [])] or ["(the image's)"]
    command = [a.replace("{", "{{").replace("}", "}}") for a in argv]  # as written: no placeholders in it
    image = config.get("Image") or first.attrs.get("Image", "")
    control = all("CHAOSBED_TOKEN" in env_of(c) for c in containers)
    return System(
        f"compose-{project}", tuple(command), image, control, "none", image, native=False, inline=True,
        description=f"attached: compose project {project}",
    )  # fmt: skip


def history_folders(containers: list[Container], mount: str) -> set[str]:
    """The host folders mounted at `mount` (the folder the members write their histories to)."""
    return {m["Source"] for c in containers for m in c.attrs["Mounts"] if m["Destination"] == mount}
