"""A cluster's lifecycle: `chaosbed up` (start real members and leave them running), `status`, `send` and `down`
(also `down --all`: every cluster and leftover of this state root, and its warm Spark service)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.table import Table

from node.stack import STACKS

if TYPE_CHECKING:
    from orchestration.cluster import ClusterSpec
    from orchestration.scenario import Scenario
from orchestration.cli.options import (
    CLUSTER_BACKEND,
    DEFAULT_BACKEND_HELP,
    CommandError,
    attach,
    cluster_label,
    cluster_option,
    console,
    default_backend,
    parse_set,
    protocol_set_option,
)


@click.command()
@click.option("--members", "-n", type=click.IntRange(1, 26), default=3, show_default=True)
@click.option(
    "--stack",
    default=None,
    help=f"chaosbed's: {', '.join(sorted(STACKS))} (default unicast3+nakack2); a foreign system's own "
    "(`chaosbed systems`)",
)
@click.option(
    "--backend",
    type=CLUSTER_BACKEND,
    default=None,
    help=DEFAULT_BACKEND_HELP,
)
@click.option("--transport", type=click.Choice(["udp", "tcp"]), default="udp", show_default=True)
@protocol_set_option
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="folder for the members' histories (default runs/<label>)",
)
@click.option("--system", default=None, help="a named system (`chaosbed systems`; default chaosbed, our own member)")
@click.option("--version", "version", default=None, help="the release of a real system, e.g. 5.4.3 (cluster.version)")
@click.option(
    "--scenario",
    "scenario_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="start the [cluster] of this scenario file (its members, system, stack; its schedule is not run)",
)
def up(
    members: int,
    stack: str | None,
    backend: str | None,
    transport: str,
    sets: tuple[str, ...],
    out: Path | None,
    system: str | None,
    version: str | None,
    scenario_file: Path | None,
) -> None:
    """Start a cluster of real member processes and leave it running."""
    from orchestration.cluster import ClusterError, new_label
    from orchestration.runner import prepare
    from orchestration.systems.clusters import forms_group, new_cluster

    backend = backend or default_backend()
    label = new_label()
    try:
        spec, sc = up_spec(members, stack, backend, transport, list(sets), system, scenario_file, version)
        members, stack, transport = len(spec.members), spec.stack, spec.transport
        workdir = out or Path("runs") / label
        if sc is not None:  # the folder says what it ran, as a run folder does
            prepare(sc, workdir)
        cluster = new_cluster(spec, label=label, workdir=workdir)
        with console.status(f"starting {members} members ({backend}, {stack}, {transport})"):
            cluster.start()
        if forms_group(cluster):
            with console.status(f"waiting for the {members} members to form one view"):
                try:
                    view = cluster.wait_for_view(timeout=60)
                except ClusterError:
                    cluster.down()
                    raise
            console.print(f"view {view['view_id']}: {', '.join(view['members'])}")
    except (ClusterError, ValueError) as e:
        raise CommandError(str(e)) from None
    console.print(f"cluster [bold]{cluster.label}[/bold] is up: {members} members on the {backend} backend")
    if spec.system is not None:
        command = spec.system["command"]
        argv = " ".join(map(str, command)) if isinstance(command, list) else str(command)
        console.print(f"system {spec.system['name']}: {argv}", markup=False)
    for name, m in cluster.members.items():
        console.print(f"  {name}  {m.ip}:{m.port}  pid {m.pid}" + (f"  netns {m.netns}" if m.netns else ""))
    console.print(f"histories: {cluster.workdir / 'history'}   stop it with: chaosbed down --cluster {cluster.label}")


def up_spec(
    members: int,
    stack: str | None,
    backend: str,
    transport: str,
    sets: list[str],
    system: str | None,
    scenario_file: Path | None,
    version: str | None = None,
) -> tuple[ClusterSpec, Scenario | None]:
    """The spec of `chaosbed up`: from its options, or a scenario file's [cluster] (with the scenario); ValueError
    says what is wrong. A named foreign system's --stack and --version are read as a scenario's cluster.stack and
    cluster.version."""
    from orchestration.cluster import member_names
    from orchestration.scenario import load, parse
    from orchestration.systems import CHAOSBED
    from orchestration.systems.clusters import backend_problem, spec_of
    from orchestration.systems.user import system_named

    sc = None
    if scenario_file is not None:
        sc = load(scenario_file)  # a ScenarioError is a ValueError
        chosen, names, stack, transport, props = sc.system, sc.members, sc.stack, sc.transport, sc.properties
    else:
        found = system_named(system) if system else CHAOSBED  # a SystemProblem is a ValueError
        if found is None:
            raise ValueError(f"--system {system}: unknown system; see `chaosbed systems`")
        chosen = found
        names, props = member_names(members), parse_set(sets)
        if not chosen.native:
            if sets or (stack is not None and not chosen.stacks):
                raise ValueError(
                    f"--stack and --set are chaosbed's own; system {chosen.name!r} is configured by its command"
                )
            if stack is not None or version is not None:
                table: dict[str, object] = {"members": names, "system": chosen.name}
                table |= {k: v for k, v in (("stack", stack), ("version", version)) if v is not None}
                if chosen.inline:
                    table["member"] = chosen.cluster_table()["member"]
                parsed = parse({"cluster": table})
                chosen, stack, transport = parsed.system, parsed.stack, parsed.transport
            stack = stack or chosen.stack
        elif version is not None:
            raise ValueError(f"--version: system {chosen.name!r} has no releases (chaosbed's own member)")
        elif (stack := stack or "unicast3+nakack2") not in STACKS:
            raise ValueError(f"--stack: unknown stack {stack!r}; stacks: {', '.join(sorted(STACKS))}")
    if (why := backend_problem(chosen, backend)) is not None:
        raise ValueError(why)
    return spec_of(chosen, names, backend, stack=stack, transport=transport, properties=props), sc


@click.command()
@cluster_option
@click.option("--json", "as_json", is_flag=True, help="every member's state, view and whole `stats` reply as JSON")
def status(label: str | None, as_json: bool) -> None:
    """Per member: view, key counters, CPU and RSS."""
    import psutil

    from orchestration.cluster import ClusterError

    cluster = attach(label)
    if as_json:
        from orchestration.cli.status_foreign import status_doc

        click.echo(json.dumps(status_doc(cluster), indent=1))
        return
    if cluster.spec.system is not None:  # members chaosbed did not write: what can be known from outside
        from orchestration.cli.status_foreign import print_foreign_status

        print_foreign_status(cluster)
        return
    table = Table(
        title=f"cluster {cluster.label} ({cluster.backend_name}, {cluster.spec.stack}, {cluster.spec.transport})"
    )
    mproto = cluster.spec.stack.split("+")[1] if "+" in cluster.spec.stack else None
    cols = ["member", "pid", "state", "view", "ucast sent", "ucast deliv"]
    if mproto:
        cols += ["mcast sent", "mcast deliv"]
    cols += ["xmits", "malformed", "CPU s", "RSS MiB"]
    for col in cols:
        table.add_column(col, justify="left" if col in ("member", "state", "view") else "right")
    blank = [""] * (len(cols) - 3)
    running = set(cluster.running())
    for name, m in cluster.members.items():
        if name not in running:
            table.add_row(name, "-", "[red]not running[/red]", *blank)
            continue
        try:
            stats = cluster.control(name, "stats", timeout=3.0)
            view = cluster.control(name, "view", timeout=3.0)["view"]
        except (ClusterError, OSError) as e:
            state = "paused" if m.paused else f"no answer: {e}"
            table.add_row(name, str(m.pid), f"[yellow]{state}[/yellow]", *blank)
            continue
        counters = stats["counters"]
        uni = counters[cluster.spec.stack.split("+")[0]]
        proc = psutil.Process(m.pid)
        cpu = proc.cpu_times()
        mc = counters.get(mproto, {}) if mproto else {}
        row = [
            name,
            str(m.pid),
            "paused" if m.paused else "running",
            f"{view['view_id']} {view['members']}" if view else "(no membership)",
            str(uni.get("msgs_sent", 0)),
            str(uni.get("msgs_delivered", 0)),
        ]
        if mproto:
            row += [str(mc.get("msgs_sent", 0)), str(mc.get("msgs_delivered", 0))]
        row += [
            str(uni.get("xmits", 0) + mc.get("xmit_rsps_sent", 0)),
            str(counters["stack"]["malformed_datagrams"]),
            f"{cpu.user + cpu.system:.2f}",
            f"{proc.memory_info().rss / 2**20:.1f}",
        ]
        table.add_row(*row)
    console.print(table)


@click.command()
@click.argument("sender")
@click.argument("dest")
@click.option("--count", type=click.IntRange(1), default=1000, show_default=True)
@click.option("--size", type=click.IntRange(0), default=100, show_default=True)
@click.option("--rate", type=click.FloatRange(min=0, min_open=True), default=None, help="messages/s (default: max)")
@click.option("--cluster", "label", default=None)
def send(sender: str, dest: str, count: int, size: int, rate: float | None, label: str | None) -> None:
    """SENDER sends COUNT unicasts to DEST (or multicasts, with DEST '*')."""
    from orchestration.cluster import ClusterError

    cluster = attach(label)
    try:
        if dest == "*":
            reply = cluster.control(sender, "multicast", count=count, size=size, rate=rate)
        else:
            reply = cluster.control(sender, "send", to=dest, count=count, size=size, rate=rate)
    except (ClusterError, KeyError, OSError) as e:
        raise CommandError(f"{sender}: {e}") from None
    console.print(f"{sender} -> {dest}: task {reply['task']} sending {count} messages")


@click.command()
@cluster_option
@click.option("--all", "all_", is_flag=True, help="remove every chaosbed cluster and leftover of crashed runs")
def down(label: str | None, all_: bool) -> None:
    """Stop a cluster and remove everything it created (processes, namespaces, links, state). --all also stops the
    warm Spark service and the Spark cluster of this state root."""
    from orchestration.backends.reap import reap_all, reap_label

    if all_:
        removed = reap_all()
        if _stop_spark_service():
            removed.append("the Spark service")
        if _stop_spark_cluster():
            removed.append("the Spark cluster")
        console.print(f"removed: {', '.join(removed) if removed else 'nothing left to remove'}")
        return
    from orchestration.backends import attach as attach_label
    from orchestration.backends.state_file import StateFileError
    from orchestration.cluster import ClusterError

    try:
        cluster = attach_label(cluster_label(label))
    except StateFileError as e:  # still take down what it left
        left = ", ".join(reap_label(e.label)) or "nothing was left"
        console.print(
            f"cluster {e.label}: its state file {e.path} {e.problem}; removed what it left: {left}", markup=False
        )
        return
    except ClusterError as e:
        raise CommandError(str(e)) from None
    cluster.down()
    console.print(f"cluster {cluster.label} is down; histories are in {cluster.workdir / 'history'}")


def _stop_spark_service() -> bool:
    """`down --all` also stops the warm Spark service of this state root (True if one ran)."""
    from analysis.spark_service import SparkServiceError, stop

    try:
        return stop()
    except (SparkServiceError, OSError) as e:
        console.print(f"[bold red]the Spark service could not be stopped[/]: {e}")
        return False


def _stop_spark_cluster() -> bool:
    """`down --all` also stops the Spark standalone cluster of this state root (True if one ran)."""
    from analysis.spark_cluster import SparkClusterError, stop

    try:
        return stop()
    except (SparkClusterError, OSError) as e:
        console.print(f"[bold red]the Spark cluster could not be stopped[/]: {e}")
        return False
