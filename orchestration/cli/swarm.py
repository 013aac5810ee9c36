"""`chaosbed swarm up|status|down`: a Docker Swarm of several engines on this machine, each in a network namespace
of its own, with a chaos agent per engine (orchestration/host/local_swarm.py), for `--backend swarm`."""

from __future__ import annotations

import sys

import click

from orchestration.cli.options import console


@click.group()
def swarm() -> None:
    """A swarm of Docker engines in network namespaces of this machine, for --backend swarm (root)."""


@swarm.command("up")
@click.option("--engines", type=click.IntRange(1, 5), default=2, show_default=True, help="engines (swarm hosts)")
def swarm_up(engines: int) -> None:
    """Start the engines, join them into one swarm, load the member image into each, start their agents."""
    from orchestration.cluster import ClusterError
    from orchestration.host import local_swarm

    with console.status("starting the local swarm") as shown:
        try:
            desc, started = local_swarm.up(engines, on_step=lambda s: shown.update(f"local swarm: {s}"))
        except ClusterError as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(2)
    console.print(("started" if started else "already running") + f": swarm {desc.label}, image {desc.image}")
    _print_hosts(desc)


@swarm.command("status")
def swarm_status() -> None:
    """The swarm's hosts, their nodes and agents. Exit 0 when it is up, 1 when not."""
    from orchestration.agent.client import AgentClient
    from orchestration.backends.swarm_hosts import SwarmUnavailable, description_path, load_description
    from orchestration.cluster import ClusterError

    try:
        desc = load_description()
    except SwarmUnavailable:
        console.print(f"no swarm ({description_path()} does not exist)")
        sys.exit(1)
    console.print(f"swarm {desc.label or '(described)'}: manager {desc.manager}, image {desc.image}")
    up = True
    for h in desc.hosts:
        agent = AgentClient.of(h, desc.token())
        try:
            clock = agent.clock()
            state = f"agent up, clock offset {clock.offset_ns} ns (rtt {clock.rtt_ns / 1e3:.0f} us"
            state += ", same kernel)" if clock.same_clock else ")"
        except ClusterError as e:
            state, up = f"[red]agent lost[/red]: {e}", False
        console.print(f"  {h.name}  node {h.node_id[:12]}  {h.address}:{h.agent_port}  {state}")
    sys.exit(0 if up else 1)


@swarm.command("down")
def swarm_down() -> None:
    """Stop the agents and engines and remove everything of the local swarm."""
    from orchestration.cluster import ClusterError
    from orchestration.host import local_swarm

    try:
        removed = local_swarm.down()
    except ClusterError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)
    console.print("the local swarm is down" if removed else "no local swarm was running")


@swarm.group("agents")
def swarm_agents() -> None:
    """The chaos agents of a swarm of real hosts ($CHAOSBED_SWARM) as a global service (`swarm up` deploys them on the
    local swarm itself)."""


NAME_OPTION = click.option("--name", default="chaosbed-agent", show_default=True, help="the service's name")


@swarm_agents.command("up")
@NAME_OPTION
@click.option("--engine-socket", default="/var/run/docker.sock", show_default=True, help="each host's engine socket")
@click.option("--state", default="/var/lib/chaosbed-agent", show_default=True, help="each agent's folder on its host")
@click.option("--python", "python", default=sys.executable, show_default=True,
              help="python with chaosbed installed, the same path on every host")  # fmt: skip
@click.option("--repo", default=None, help="this checkout's path on every host (default: where it is here)")
@click.option("--timeout", type=click.FloatRange(1), default=90.0, show_default=True,
              help="seconds to wait for every agent's answer (else the service is removed again)")  # fmt: skip
def swarm_agents_up(name: str, engine_socket: str, state: str, python: str, repo: str | None, timeout: float) -> None:
    """Deploy the agents (service chaosbed-agent, the token as a swarm secret) and wait until each host's answers."""
    import docker

    from orchestration.agent import service
    from orchestration.agent.client import AgentClient
    from orchestration.backends.swarm_hosts import load_description
    from orchestration.cluster import ClusterError

    try:
        desc = load_description()
        ports = {h.agent_port for h in desc.hosts}
        if len(ports) != 1:
            raise ClusterError(f"the hosts' agent_port differ ({sorted(ports)}): one service listens on one port")
        spec = service.AgentService(name, desc.image, ports.pop(), engine_socket, state, python,
                                    repo or str(service.REPO))  # fmt: skip
        agents = [AgentClient.of(h, desc.token()) for h in desc.hosts]
        with console.status("waiting for the agents"):
            pids = service.start(docker.DockerClient(base_url=desc.manager), spec, desc.token(), agents, timeout)
    except (ClusterError, docker.errors.DockerException) as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(2)
    for host, pid in pids.items():
        console.print(f"  {host}: agent up (pid {pid} on its host)")


@swarm_agents.command("down")
@NAME_OPTION
def swarm_agents_down(name: str) -> None:
    """Remove the agents' service: every agent heals and detaches what it installed as it stops."""
    import docker

    from orchestration.agent import service
    from orchestration.agent.client import AgentClient
    from orchestration.backends.swarm_hosts import load_description
    from orchestration.cluster import ClusterError

    try:
        desc = load_description()
        agents = [AgentClient.of(h, desc.token()) for h in desc.hosts]
        with console.status("stopping the agents (each heals what it installed)"):
            existed = service.remove(docker.DockerClient(base_url=desc.manager), name, agents=agents)
    except (ClusterError, docker.errors.DockerException) as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)
    console.print(f"the agents' service {name} is removed" if existed else f"no service {name}")


def _print_hosts(desc: object) -> None:
    for h in getattr(desc, "hosts", []):
        console.print(f"  {h.name}  node {h.node_id[:12]}  {h.address}  agent :{h.agent_port}  netns {h.netns}")
    console.print("run on it: chaosbed run SCENARIO --backend swarm   stop it: chaosbed swarm down")
