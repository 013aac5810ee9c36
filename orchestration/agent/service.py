"""The chaos agents as a global service of the swarm: one task per host (launcher.py), each starting its host's
agent in the host's pid and network namespaces. The orchestrator's side: deploy the service (with the agents' token
as a swarm secret), wait until every host's agent answers, read their output, remove the service (every agent heals
and detaches what it installed as it stops) and its secret.

Paths differ per host on one machine (each engine of the local swarm has its own folder), so the socket, state and
name are templates the swarm expands on each node (`{{.Node.Hostname}}`); on real hosts they are plain paths.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from orchestration.agent.client import AgentClient
from orchestration.agent.launcher import AGENT_OF
from orchestration.cluster import ClusterError
from orchestration.host import docker_listing

if TYPE_CHECKING:
    from docker import DockerClient

REPO = Path(__file__).resolve().parents[2]
LAUNCHER = "/chaosbed/orchestration/agent/launcher.py"  # the checkout, mounted read-only at /chaosbed
SECRET_FILE = "chaosbed-agent-token"
LABEL = "chaosbed.agent-service"
READY_TIMEOUT = 90.0
STOP_TIMEOUT = 60.0
NODE_HOSTNAME = "{{.Node.Hostname}}"


@dataclass(frozen=True)
class AgentService:
    """What the service runs: `name` (also its secret's prefix), the image with python3 (the member image), the
    agents' port, and as each host sees them: its engine's socket (`engine_socket`, a path), the agent's state
    folder, the python and checkout of chaosbed there. `node_id`: one host only (a replicated service of one task
    constrained to it) instead of every host."""

    name: str
    image: str
    port: int
    engine_socket: str = "/var/run/docker.sock"
    state: str = "/var/lib/chaosbed-agent"
    python: str = ""
    repo: str = str(REPO)
    node_id: str | None = None
    labels: dict[str, str] = field(default_factory=dict)

    def env(self) -> list[str]:
        values = {
            "PORT": str(self.port), "STATE": self.state, "DOCKER": f"unix://{self.engine_socket}",
            "PYTHON": self.python, "REPO": self.repo, "TASK": "{{.Task.ID}}", "SERVICE": self.name,
            "SECRET": SECRET_FILE, "NAME": NODE_HOSTNAME,
        }  # fmt: skip
        return [f"CHAOSBED_AGENT_{k}={v}" for k, v in values.items()]


def deploy(client: DockerClient, spec: AgentService, token: str) -> str:
    """Creates the token's secret and the service; returns the service's id. ClusterError if the engine refuses."""
    import docker
    from docker.types import Mount, RestartPolicy, SecretReference, ServiceMode

    if not spec.python:
        raise ClusterError("the agent service needs the path of python (with chaosbed) on the hosts")
    labels = {LABEL: spec.name, **spec.labels}
    try:
        if any(s.name == spec.name for s in client.services.list(filters={"name": spec.name})):  # a prefix match
            raise ClusterError(f"a service {spec.name} runs already on this swarm (`chaosbed swarm agents down "
                               f"--name {spec.name}` removes it)")  # fmt: skip
        secret = client.secrets.create(name=f"{spec.name}-token", data=token.encode(), labels=labels)
    except docker.errors.DockerException as e:
        raise ClusterError(f"deploying the agent service {spec.name}: {e}") from None
    try:
        service = client.services.create(
            spec.image,
            command=["python3", LAUNCHER],
            name=spec.name,
            env=spec.env(),
            mode=ServiceMode("global") if spec.node_id is None else ServiceMode("replicated", 1),
            constraints=[f"node.id=={spec.node_id}"] if spec.node_id else None,
            mounts=[
                Mount("/var/run/docker.sock", spec.engine_socket, type="bind"),
                Mount("/chaosbed", spec.repo, type="bind", read_only=True),
            ],
            secrets=[SecretReference(secret.id, f"{spec.name}-token", filename=SECRET_FILE, mode=0o400)],
            restart_policy=RestartPolicy(condition="any", delay=1_000_000_000),
            stop_grace_period=int(STOP_TIMEOUT * 1e9),
            labels=labels,
        )
    except docker.errors.DockerException as e:
        with contextlib.suppress(docker.errors.DockerException):
            secret.remove()  # nothing of a failed deploy is left
        raise ClusterError(f"deploying the agent service {spec.name}: {e}") from None
    return str(service.id)


def start(
    client: DockerClient, spec: AgentService, token: str, agents: Iterable[AgentClient], timeout: float = READY_TIMEOUT
) -> dict[str, int]:
    """Deploys the service and waits until each of `agents` answers; returns their pids by host. If one does not,
    removes the service again and raises ClusterError with what its tasks said last (a wrong python path on the
    hosts, a port in use, ...)."""
    deploy(client, spec, token)
    agents = list(agents)
    try:
        return wait_ready(agents, timeout)
    except ClusterError as e:
        try:
            said = logs(client, spec.name)[-8:]
        except Exception as why:  # docker's errors: the logs are a courtesy here
            said = [f"(no logs: {why})"]
        with contextlib.suppress(ClusterError):
            remove(client, spec.name)
        raise ClusterError(f"{e}; the service's last lines: " + " | ".join(said)) from None


def wait_ready(agents: Iterable[AgentClient], timeout: float = READY_TIMEOUT) -> dict[str, int]:
    """Waits until every host's agent answers `hello`; returns each host's agent pid. ClusterError naming the hosts
    whose agent did not answer."""
    waiting = {a.host: a for a in agents}
    pids: dict[str, int] = {}
    deadline = time.monotonic() + timeout
    last: dict[str, str] = {}
    while waiting and time.monotonic() < deadline:
        for host, agent in list(waiting.items()):
            try:
                pids[host] = int(agent.request("hello", timeout=2.0)["pid"])
                del waiting[host]
            except ClusterError as e:
                last[host] = str(e)
        if waiting:
            time.sleep(0.2)  # the service's tasks are starting: polling their agents with a deadline
    if waiting:
        why = "; ".join(f"{h}: {last.get(h, '?')}" for h in waiting)
        raise ClusterError(f"the chaos agents of {', '.join(waiting)} did not answer within {timeout:g} s ({why})")
    return pids


def logs(client: DockerClient, name: str) -> list[str]:
    """The lines the service's tasks (the launchers and their agents) wrote."""
    service = client.services.get(name)
    raw = b"".join(service.logs(stdout=True, stderr=True, follow=False, timestamps=False))
    return raw.decode(errors="replace").splitlines()


def agent_containers(engines: Iterable[DockerClient], name: str) -> list[str]:
    """The short ids of the agent containers of service `name` still on `engines` (listed, never inspected: they
    are removed automatically, at any moment)."""
    mine = {"label": f"{AGENT_OF}={name}"}
    return [c.id[:12] for e in engines for c in docker_listing.listed(e, all=True, filters=mine)]


def remove(
    client: DockerClient,
    name: str,
    engines: Iterable[DockerClient] = (),
    agents: Iterable[AgentClient] = (),
    timeout: float = STOP_TIMEOUT,
) -> bool:
    """Removes the service (each launcher stops its agent, which heals and detaches everything) and its secret, and
    waits until no agent container of it is left on `engines` (the hosts' engines, where reachable) and none of
    `agents` answers any more. False if there was no such service."""
    import docker

    try:
        client.services.get(name).remove()
        existed = True
    except docker.errors.NotFound:
        existed = False
    except docker.errors.DockerException as e:
        raise ClusterError(f"removing the agent service {name}: {e}") from None
    engines, agents = list(engines), list(agents)
    deadline = time.monotonic() + timeout

    def left() -> list[str]:
        return agent_containers(engines, name)

    def answering() -> list[str]:
        return [a.host for a in agents if _answers(a)]

    _wait(lambda: not left(), deadline, lambda: f"agent containers of {name} still there: {left()}")
    _wait(lambda: not answering(), deadline, lambda: f"the agents of {', '.join(answering())} still answer")
    for secret in client.secrets.list(filters={"label": f"{LABEL}={name}"}):
        with contextlib.suppress(docker.errors.NotFound):
            secret.remove()
    return existed


def _answers(agent: AgentClient) -> bool:
    try:
        agent.request("hello", timeout=2.0)
    except ClusterError:
        return False
    return True


def _wait(done: Callable[[], bool], deadline: float, what: Callable[[], str]) -> None:
    while not done():
        if time.monotonic() > deadline:
            raise ClusterError(what())
        time.sleep(0.2)  # polling the engines with a deadline
