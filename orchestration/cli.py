"""The `chaosbed` command line."""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from node.stack import STACKS
from node.units import parse_duration

# Not on a terminal (logs, CI, pipes): wide enough that tables are not truncated.
console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)


def _fraction(value: str) -> float:
    v = value.strip()
    f = float(v[:-1]) / 100 if v.endswith("%") else float(v)
    if not 0 <= f <= 1:
        raise click.BadParameter(f"{value} is not a probability (use 0.2 or 20%)")
    return f


def _duration(value: str) -> float:
    return parse_duration(value, non_negative=True, error=click.BadParameter)


def parse_set(values: list[str] | tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """--set unicast3.xmit_interval=200ms -> {"unicast3": {"xmit_interval": "200ms"}}"""
    props: dict[str, dict[str, Any]] = {}
    for item in values:
        key, eq, value = item.partition("=")
        proto, dot, name = key.partition(".")
        if not eq or not dot or not proto or not name:
            raise ValueError(f"--set {item!r}: write PROTOCOL.PROPERTY=VALUE, e.g. unicast3.xmit_interval=200ms")
        props.setdefault(proto, {})[name] = value
    return props


SPARK_HELP = (
    "where the checks run: auto (the warm Spark service, started if needed), local (in this process), "
    "sc://HOST:PORT (a Spark Connect server) or a master URL; default: $CHAOSBED_SPARK, else the running service, "
    "else local"
)


def spark_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The `--spark TARGET` option (check, run, matrix, bugs run); orchestration.cli_spark.spark_target combines it
    with --master."""
    return click.option("--spark", "spark", default=None, metavar="TARGET", help=SPARK_HELP)(fn)


@click.group()
def main() -> None:
    """chaosbed: reproduce partition-heal bugs of group-communication protocols on a laptop."""


@main.command()
def stacks() -> None:
    """List the protocol stacks a cluster can run."""
    for name in sorted(STACKS):
        click.echo(name)
    click.echo(__import__("orchestration.stacks_doc").stacks_doc.properties_text(), nl=False)  # protocols, properties


DEMO_SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "partition-heal.toml"


@main.command()
@click.option("--seed", type=int, default=7, show_default=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None)
@click.option("--sim", "force_sim", is_flag=True, help="run the simulator demo even where namespaces are available")
def demo(seed: int, out: Path | None, force_sim: bool) -> None:
    """A real cluster under chaos, checked, with a report: scenarios/partition-heal.toml on network namespaces
    (4 members, unicast and multicast streams, loss, an exact ACK discard, delay, a one-way partition and its heal).
    Without root or the kernel tools it says what is missing and runs the simulator demo instead."""
    reason = None if force_sim else _real_demo_unavailable()
    if force_sim or reason:
        if reason:
            click.echo(f"(no real cluster here: {reason}; running the simulator demo instead)")
        _demo_sim(seed, out)
    _demo_real(seed, out)


def _real_demo_unavailable() -> str | None:
    from chaos.kernel import KernelError, check_tools
    from orchestration.backends.netns import check_netns_available
    from orchestration.cluster import ClusterError

    if not DEMO_SCENARIO.exists():
        return f"{DEMO_SCENARIO} is not there (an installed copy without the repository's scenarios/)"
    try:
        check_netns_available()
        check_tools()
    except (ClusterError, KernelError) as e:
        return str(e)
    return None


def _demo_real(seed: int, out: Path | None) -> None:
    import json

    from chaos.engine import ChaosError
    from orchestration.cluster import ClusterError
    from orchestration.runner import run as run_scenario
    from orchestration.scenario import ScenarioError, load

    sc = load(DEMO_SCENARIO, seed=seed)
    out = out or Path("runs") / f"demo-{sc.name}-seed{seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    started = time.perf_counter()
    try:
        with console.status(f"running {sc.name}: {len(sc.members)} members in network namespaces, under chaos"):
            outcome = run_scenario(sc, "netns", out)
    except (ScenarioError, ClusterError, ChaosError) as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(2)
    console.print(f"ran {sc.name} (seed {seed}) on the netns backend in {time.perf_counter() - started:.1f} s")
    from orchestration.cli_fault import describe

    faults = [json.loads(line) for line in (out / "faults.jsonl").read_text().splitlines()]
    t0 = faults[0]["t"]  # the schedule's start (SCENARIO.md "Fault timing"): every `at` counts from it
    faults = faults[1:]
    _warn_late(outcome)
    console.print("faults and views, in seconds after the schedule's start:")
    timeline: list[tuple[int, str]] = []
    for f in faults:
        what = describe(f)
        timeline.append((f["t"], f"fault {f.get('id', ''):3} {what}"))
    views = sorted(_views_installed(out / "history"))
    before = [v for v in views if v[0] < t0]
    timeline += before[-1:] + [v for v in views if v[0] >= t0]  # the view the faults began in, and every later one
    for t, what in sorted(timeline):
        console.print(f"  {(t - t0) / 1e9:6.2f}s  {what}", markup=False)
    _print_handled(outcome.handled)
    code = _run_checks(out, None)
    verdict = {0: "PASS", 1: "FAIL", 2: "UNREADABLE"}.get(code, str(code))
    click.echo(f"report: {out / 'report.html'}")
    click.echo(f"verdict: {verdict}; replay: chaosbed run scenarios/{DEMO_SCENARIO.name} --backend netns --seed {seed}")
    sys.exit(code)


def _views_installed(history: Path) -> list[tuple[int, str]]:
    """Each view of a run, when its first member installed it: (t, "view A|7 [A, B, C, D] (merge) at A, B, ...")."""
    import json

    first: dict[str, tuple[int, list[str], bool, list[str]]] = {}
    for path in sorted(history.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                e = json.loads(line) if '"view"' in line else None
            except ValueError:  # the cut-off last line of a killed member
                continue
            if e and e.get("event") == "view":
                t, members, merge, at = first.get(e["view_id"], (e["t"], e["members"], e.get("merge"), []))
                first[e["view_id"]] = (min(t, e["t"]), members, merge, [*at, e["member"]])
    return [
        (t, f"view  {vid} [{', '.join(members)}]{' (merge)' if merge else ''} installed by {', '.join(sorted(at))}")
        for vid, (t, members, merge, at) in first.items()
    ]


def _demo_sim(seed: int, out: Path | None) -> None:
    """UNICAST3 under chaos in the simulator: 20% loss, duplication, reordering, and exact discards of the first
    3 ACKs from B to A and the first 2 retransmission requests from C to A; then the histories are checked on Spark
    and an HTML report is written."""
    from orchestration.cli_sim import print_pairs, run_sim_case, sim_scenario

    raw = sim_scenario(
        stack="unicast3",
        members=3,
        seed=seed,
        count=2000,
        rate=1000,
        loss=0.2,
        duplicate=0.05,
        reorder=0.05,
        jitter=0.002,
        fault_for=1.5,
        discards=[
            {"match": "UNICAST3.ACK()", "from": "B", "to": "A", "count": 3},
            {"match": "UNICAST3.XMIT_REQ()", "from": "C", "to": "A", "count": 2},
        ],
        properties={"unicast3": {"xmit_interval": "200ms"}},
    )
    out = out or Path("runs") / f"demo-sim-seed{seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    code, elapsed, (result, outcome) = run_sim_case(raw, out)
    print_pairs(out, result, f"unicast3, 3 members, seed {seed} (plain-Python checker)")
    _print_handled(outcome.handled)
    console.print(f"{result.events:,} events; the simulated run took {elapsed:.2f} s real; run folder: {out}")
    # The same checks, recomputed from the histories on Spark, with the HTML report.
    check_code = _run_checks(out, None)
    click.echo(f"report: {out / 'report.html'}")
    verdict = "PASS" if max(code, check_code) == 0 else "FAIL"
    click.echo(f"verdict: {verdict}; replay: chaosbed demo --sim --seed {seed}")
    sys.exit(max(code, check_code))


# --- real clusters ----------------------------------------------------------------------------------------------


def _default_backend() -> str:
    from orchestration.backends.netns import check_netns_available
    from orchestration.cluster import ClusterError

    try:
        check_netns_available()
    except ClusterError:
        return "process"
    return "netns"


def _attach(label: str | None):
    from orchestration.cluster import Cluster, ClusterError, list_clusters

    labels = list_clusters()
    if label is None:
        if not labels:
            raise click.ClickException("no cluster is running (start one with `chaosbed up`)")
        if len(labels) > 1:
            raise click.ClickException(f"several clusters are running ({', '.join(labels)}): name one with --cluster")
        label = labels[0]
    try:
        return Cluster.attach(label)
    except ClusterError as e:
        raise click.ClickException(str(e)) from None


@main.command()
@click.option("--members", "-n", type=click.IntRange(1, 26), default=3, show_default=True)
@click.option("--stack", type=click.Choice(sorted(STACKS)), default="unicast3+nakack2", show_default=True)
@click.option(
    "--backend",
    type=click.Choice(["netns", "process", "docker"]),
    default=None,
    help="default: netns as root with namespaces, else process",
)
@click.option("--transport", type=click.Choice(["udp", "tcp"]), default="udp", show_default=True)
@click.option("--set", "sets", multiple=True, metavar="PROTO.PROP=VALUE", help="a protocol property")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="folder for the members' histories (default runs/<label>)",
)
def up(members: int, stack: str, backend: str | None, transport: str, sets: tuple[str, ...], out: Path | None) -> None:
    """Start a cluster of real member processes and leave it running."""
    from orchestration.backends import backend_class
    from orchestration.cluster import ClusterError, ClusterSpec, member_names, new_label

    backend = backend or _default_backend()
    label = new_label()
    try:
        spec = ClusterSpec(member_names(members), stack, transport, parse_set(list(sets)), backend)
        cluster = backend_class(backend)(spec, label=label, workdir=out or Path("runs") / label)
        with console.status(f"starting {members} members ({backend}, {stack}, {transport})"):
            cluster.start()
        if "+" in stack:
            with console.status(f"waiting for the {members} members to form one view"):
                try:
                    view = cluster.wait_for_view(timeout=60)
                except ClusterError:
                    cluster.down()
                    raise
            console.print(f"view {view['view_id']}: {', '.join(view['members'])}")
    except (ClusterError, ValueError) as e:
        raise click.ClickException(str(e)) from None
    console.print(f"cluster [bold]{cluster.label}[/bold] is up: {members} members on the {backend} backend")
    for name, m in cluster.members.items():
        console.print(f"  {name}  {m.ip}:{m.port}  pid {m.pid}" + (f"  netns {m.netns}" if m.netns else ""))
    console.print(f"histories: {cluster.workdir / 'history'}   stop it with: chaosbed down --cluster {cluster.label}")


@main.command()
@click.option("--cluster", "label", default=None, help="the cluster's label (default: the only one running)")
def status(label: str | None) -> None:
    """Per member: view, key counters, CPU and RSS."""
    import psutil

    from orchestration.cluster import ClusterError

    cluster = _attach(label)
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


@main.command()
@click.argument("sender")
@click.argument("dest")
@click.option("--count", type=click.IntRange(1), default=1000, show_default=True)
@click.option("--size", type=click.IntRange(0), default=100, show_default=True)
@click.option("--rate", type=click.FloatRange(min=0, min_open=True), default=None, help="messages/s (default: max)")
@click.option("--cluster", "label", default=None)
def send(sender: str, dest: str, count: int, size: int, rate: float | None, label: str | None) -> None:
    """SENDER sends COUNT unicasts to DEST (or multicasts, with DEST '*')."""
    from orchestration.cluster import ClusterError

    cluster = _attach(label)
    try:
        if dest == "*":
            reply = cluster.control(sender, "multicast", count=count, size=size, rate=rate)
        else:
            reply = cluster.control(sender, "send", to=dest, count=count, size=size, rate=rate)
    except (ClusterError, KeyError, OSError) as e:
        raise click.ClickException(f"{sender}: {e}") from None
    console.print(f"{sender} -> {dest}: task {reply['task']} sending {count} messages")


@main.command()
@click.option("--cluster", "label", default=None, help="the cluster's label (default: the only one running)")
@click.option("--all", "all_", is_flag=True, help="remove every chaosbed cluster and leftover of crashed runs")
def down(label: str | None, all_: bool) -> None:
    """Stop a cluster and remove everything it created (processes, namespaces, links, state). --all also stops the
    warm Spark service of this state root."""
    from orchestration.cluster import reap_all

    if all_:
        removed = reap_all()
        if _stop_spark_service():
            removed.append("the Spark service")
        console.print(f"removed: {', '.join(removed) if removed else 'nothing left to remove'}")
        return
    cluster = _attach(label)
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


# --- scenarios and checks ---------------------------------------------------------------------------------------


def _run_checks(folder: Path, master: str | None) -> int:
    """The analysis pipeline (PySpark) over a run folder: prints the verdict table, writes verdict.json and
    report.html; exit 0 clean, 1 violations, 2 unreadable input. Runner violations (a timeout, in the folder's
    outcome.json) are reported too."""
    try:
        from analysis.command import check as analysis_check
    except ImportError as e:
        click.echo(
            f"error: the checker needs the analysis extra ({e}); install it: pip install 'chaosbed[analysis]'", err=True
        )
        return 2
    return analysis_check(folder, master)


@main.command()
@click.argument("scenario_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--backend",
    type=click.Choice(["sim", "process", "netns", "docker"]),
    default=None,
    help="default: netns as root with namespaces, else process",
)
@click.option("--seed", type=int, default=None, help="overrides the file's seed")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="the run folder (default: a new folder under ./runs/)",
)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="override any key, e.g. cluster.stack=unicast2")
@click.option("--master", default=None, help="Spark master URL for the checks (same as --spark URL)")
@spark_option
def run(
    scenario_file: Path,
    backend: str | None,
    seed: int | None,
    out: Path | None,
    sets: tuple[str, ...],
    master: str | None,
    spark: str | None,
) -> None:
    """Run a scenario file (SCENARIO.md) and check it: exit 0 clean, 1 violations, 2 could not run."""
    from orchestration.cli_spark import spark_target
    from orchestration.runner import run as run_scenario
    from orchestration.scenario import ScenarioError, load

    master = spark_target(spark, master)

    try:
        sc = load(scenario_file, list(sets), seed)
        backend = backend or _default_backend()
        out = out or Path("runs") / f"{sc.name}-{backend}-seed{sc.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
        if out.exists() and any(out.iterdir()):
            raise ScenarioError(f"--out {out}: the folder exists and is not empty")
        with console.status(f"running {sc.name} on {backend} (seed {sc.seed})"):
            outcome = run_scenario(sc, backend, out)
    except ScenarioError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(2)
    _warn_late(outcome)
    _print_handled(outcome.handled)
    code = _run_checks(out, master)
    replay = f"chaosbed run {shlex.quote(str(scenario_file))} --backend {backend} --seed {sc.seed}" + "".join(
        f" --set {shlex.quote(s)}" for s in sets
    )
    verdict = {0: "PASS", 1: "FAIL", 2: "UNREADABLE"}.get(code, str(code))
    click.echo(f"verdict: {verdict} ({out}); replay: {replay}")
    sys.exit(code)


@main.command()
@click.argument("folder", type=click.Path(file_okay=False, path_type=Path))
@click.option("--master", default=None, help="Spark master URL (same as --spark URL)")
@spark_option
def check(folder: Path, master: str | None, spark: str | None) -> None:
    """Check a finished run folder (or a folder of run folders): exit 0 clean, 1 violations, 2 unreadable."""
    from orchestration.cli_spark import spark_target

    sys.exit(_run_checks(folder, spark_target(spark, master)))


def _print_handled(faults: list[dict]) -> None:
    """What the protocol-aware rules of a run acted on, e.g. `f2 discard UNICAST3.ACK() B -> A (first 3): dropped 3`."""
    from orchestration.cli_fault import describe

    for f in faults:
        acted = ", ".join(f"{k} {v}" for k, v in f["handled"].items() if k != "matched" and v)
        console.print(f"{f['id']} {describe(f)}: {acted or 'nothing matched'}", markup=False)


def _warn_late(outcome: Any) -> None:
    """Says loudly what did not happen on time: member actions that started late (network faults are switched by
    the clock), a wall clock that moved under the kernel's time gates."""
    for e in outcome.late:
        console.print(
            f"[bold red]WARNING[/bold red]: {e['kind']} {e.get('member', '')} planned at {e['at']} started "
            f"{e['lag_ms']:g} ms late (the machine was too busy)"
        )
    for w in outcome.warnings:
        console.print(f"[bold red]WARNING[/bold red]: {w}")


# `chaosbed fault ...`, `matrix`, `bugs` and `sim` live in their own modules; importing them registers them on `main`.
from orchestration import cli_compose, cli_fault, cli_matrix, cli_sim, cli_spark  # noqa: E402, F401

if __name__ == "__main__":
    main()
