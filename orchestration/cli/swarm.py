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
        agent = AgentClient(h.name, h.address, h.agent_port, desc.token(), h.netns)
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


def _print_hosts(desc: object) -> None:
    for h in getattr(desc, "hosts", []):
        console.print(f"  {h.name}  node {h.node_id[:12]}  {h.address}  agent :{h.agent_port}  netns {h.netns}")
    console.print("run on it: chaosbed run SCENARIO --backend swarm   stop it: chaosbed swarm down")
