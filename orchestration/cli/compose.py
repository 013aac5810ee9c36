"""`chaosbed compose attach`: make a cluster that `docker compose` started (compose/) a cluster of ours, so that
status, send, fault, kill, pause and check work on it (orchestration/backends/compose.py)."""

from __future__ import annotations

import click

from orchestration.cli.options import console


@click.group()
def compose() -> None:
    """Work with a cluster started by `docker compose -f compose/docker-compose.yml up`."""


@compose.command()
@click.option("--project", default="chaosbed", show_default=True, help="the compose project (docker compose -p)")
@click.option("--service", default="member", show_default=True, help="the members' service")
def attach(project: str, service: str) -> None:
    """Attach the project's running members: afterwards `chaosbed status`, `fault`, ... act on them, and
    `chaosbed down` detaches (the containers stay until `docker compose down`)."""
    from orchestration.backends.compose import ComposeCluster
    from orchestration.cluster import ClusterError

    try:
        cluster = ComposeCluster.attach_project(project, service)
    except ClusterError as e:
        raise click.ClickException(str(e)) from None
    members = ", ".join(f"{n} {m.ip}" for n, m in cluster.members.items())
    console.print(f"attached compose project {project} as cluster [bold]{cluster.label}[/bold]: {members}")
    console.print(f"histories and faults.jsonl: {cluster.workdir}")
    console.print(f"detach with `chaosbed down --cluster {cluster.label}` (the containers stay)")
