"""`chaosbed compose attach`: make a cluster that `docker compose` started (compose/) a cluster of ours, so that
status, send, fault, kill, pause and check work on it (orchestration/backends/compose.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from orchestration.cli.options import CommandError, console

if TYPE_CHECKING:
    from orchestration.backends.compose import ComposeCluster
    from orchestration.systems import System


@click.group()
def compose() -> None:
    """Work with a cluster started by `docker compose -f compose/docker-compose.yml up`."""


@compose.command()
@click.option("--project", default="chaosbed", show_default=True, help="the compose project (docker compose -p)")
@click.option(
    "--service", default=None, help="the members' service (default: `member` where the project has it, else all)"
)
@click.option(
    "--history",
    default="/history",
    show_default=True,
    help="where in the containers the members write their histories (a mounted host folder named history)",
)
def attach(project: str, service: str | None, history: str) -> None:
    """Attach the project's running members: afterwards `chaosbed status`, `fault`, `kill`, ... act on them, and
    `chaosbed down` detaches (the containers stay until `docker compose down`). Containers that are not chaosbed's
    members (any image) are attached as a foreign system: every network fault works on them."""
    from orchestration.backends.compose import ComposeCluster
    from orchestration.cluster import ClusterError
    from orchestration.systems import System

    try:
        cluster = ComposeCluster.attach_project(project, service, history)
    except ClusterError as e:
        raise CommandError(str(e)) from None
    members = ", ".join(f"{n} {m.ip}" for n, m in cluster.members.items())
    console.print(f"attached compose project {project} as cluster [bold]{cluster.label}[/bold]: {members}")
    if cluster.spec.system is not None:
        _foreign_attached(cluster, System.from_dict(cluster.spec.system), history)
    console.print(f"faults.jsonl: {cluster.workdir}")
    console.print(f"detach with `chaosbed down --cluster {cluster.label}` (the containers stay)")


def _foreign_attached(cluster: ComposeCluster, system: System, history: str) -> None:
    """Says what works on containers that are not chaosbed's members, and writes scenario.toml next to their
    histories (the system, so that `chaosbed check` reads them against the history contract)."""
    from orchestration.runner import scenario_toml
    from orchestration.scenario import parse

    control = "they answer the control contract" if system.control else "no control (no CHAOSBED_TOKEN): no send/view"
    console.print(f"not chaosbed's members ({system.image}): network faults, kill, pause, resume, leave; {control}")
    if not any(m.history for m in cluster.members.values()):
        console.print(f"no host folder is mounted at {history}: no histories, so `chaosbed check` cannot check them")
        return
    folder = Path(next(m.history for m in cluster.members.values() if m.history)).parent
    if folder.name != "history":
        console.print(
            f"the histories are in {folder}: `chaosbed check` reads RUN/history/, so name that folder history"
        )
        return
    table: dict[str, object] = {"members": list(cluster.members), **system.cluster_table()}
    raw: dict[str, object] = {"name": f"compose-{cluster._project}", "cluster": table}
    (Path(cluster.workdir) / "scenario.toml").write_text(scenario_toml(parse(raw)))
    console.print(f"histories: {folder} (`chaosbed check {cluster.workdir}`)")
