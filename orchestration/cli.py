"""The `chaosbed` command line."""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from node.protocols.base import parse_duration
from node.stack import STACKS
from orchestration.simcase import Discard, SimCase, pair_results, parse_set, run_case, write_case

# Not on a terminal (logs, CI, pipes): wide enough that tables are not truncated.
console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)


def _fraction(value: str) -> float:
    v = value.strip()
    f = float(v[:-1]) / 100 if v.endswith("%") else float(v)
    if not 0 <= f <= 1:
        raise click.BadParameter(f"{value} is not a probability (use 0.2 or 20%)")
    return f


def _duration(value: str) -> float:
    try:
        return parse_duration(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


@click.group()
def main() -> None:
    """chaosbed: reproduce partition-heal bugs of group-communication protocols on a laptop."""


@main.command()
def stacks() -> None:
    """List the protocol stacks a cluster can run."""
    for name in sorted(STACKS):
        click.echo(name)


@main.command()
@click.option("--stack", type=click.Choice(sorted(STACKS)), default="unicast3", show_default=True)
@click.option("--members", "-n", type=click.IntRange(2, 26), default=3, show_default=True)
@click.option("--seed", type=int, default=1, show_default=True, help="drives the network and workload")
@click.option("--count", type=click.IntRange(0), default=1000, show_default=True, help="per sender and destination")
@click.option("--rate", type=click.FloatRange(min=0, min_open=True), default=1000.0, show_default=True)
@click.option("--size", type=click.IntRange(0), default=100, show_default=True, help="payload bytes")
@click.option("--loss", default="0", help="per-link datagram loss, e.g. 0.2 or 20%")
@click.option("--duplicate", default="0", help="per-link duplication probability")
@click.option("--reorder", default="0", help="per-link probability of holding a datagram back")
@click.option("--delay", default="1ms", show_default=True, help="one-way latency per link")
@click.option("--jitter", default="0ms", show_default=True, help="uniform extra latency per datagram")
@click.option("--fault-for", default="0s", help="heal the links after this long (0 = keep faults)")
@click.option("--discard", "discards", multiple=True, help="a rule like 'UNICAST3.ACK(seqno=50)'")
@click.option("--discard-from", "discard_from", multiple=True, help="sender member of each --discard (default any)")
@click.option("--discard-to", "discard_to", multiple=True, help="receiver member of each --discard (default any)")
@click.option("--discard-count", "discard_count", multiple=True, type=int, help="act on the first N matches only")
@click.option("--set", "sets", multiple=True, metavar="PROTO.PROP=VALUE", help="a protocol property")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), help="write the run folder here")
def sim(
    stack: str,
    members: int,
    seed: int,
    count: int,
    rate: float,
    size: int,
    loss: str,
    duplicate: str,
    reorder: str,
    delay: str,
    jitter: str,
    fault_for: str,
    discards: tuple[str, ...],
    discard_from: tuple[str, ...],
    discard_to: tuple[str, ...],
    discard_count: tuple[int, ...],
    sets: tuple[str, ...],
    out: Path | None,
) -> None:
    """Run a seeded case in the deterministic simulator and check delivery (exit 0 clean, 1 violations)."""

    def nth(values: tuple, i: int):
        return values[i] if i < len(values) else None

    try:
        case = SimCase(
            stack=stack,
            members=members,
            seed=seed,
            count=count,
            rate=rate,
            size=size,
            loss=_fraction(loss),
            duplicate=_fraction(duplicate),
            reorder=_fraction(reorder),
            delay=_duration(delay),
            jitter=_duration(jitter),
            fault_for=_duration(fault_for),
            discards=[
                Discard(e, nth(discard_from, i), nth(discard_to, i), nth(discard_count, i))
                for i, e in enumerate(discards)
            ],
            properties=parse_set(list(sets)),
        )
        started = time.perf_counter()
        result = run_case(case)
    except (ValueError, KeyError) as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(2)
    elapsed = time.perf_counter() - started
    sys.exit(_report_case(case, result, elapsed, out))


def _report_case(case: SimCase, result, elapsed: float, out: Path | None) -> int:
    sim = result.sim
    rows = pair_results(sim)
    table = Table(title=f"{case.stack}, {case.members} members, seed {case.seed}")
    for col in ("from", "to", "sent", "delivered", "dup", "missing", "phantom", "reordered"):
        table.add_column(col, justify="left" if col in ("from", "to") else "right")
    for r in rows:
        style = "" if r.ok else "red"
        table.add_row(
            r.sender,
            r.receiver,
            *map(str, (r.sent, r.delivered, r.duplicates, r.missing, r.phantoms, r.out_of_order)),
            style=style,
        )
    console.print(table)
    totals: dict[str, int] = {}
    for name in sim.members:
        for k, v in sim.counters(name).items():
            totals[k] = totals.get(k, 0) + v
    shown = ("msgs_sent", "msgs_delivered", "xmits", "xmit_reqs_sent", "acks_sent", "send_first_seqno_sent")
    console.print("counters (all members): " + ", ".join(f"{k}={totals.get(k, 0)}" for k in shown))
    for rule in result.rules:
        console.print(
            f"rule {rule.protocol}.{rule.header} {rule.src or '*'}->{rule.dst or '*'}: {rule.matched} matched"
        )
    speed = sim.messages_sent / max(elapsed, 1e-9)
    console.print(f"simulated {sim.now:.2f} s in {elapsed:.2f} s real ({speed:,.0f} msgs/s)")
    if out is not None:
        write_case(result, case, out)
        console.print(f"run folder: {out}")
    ok = result.settled and all(r.ok for r in rows)
    verdict = "PASS" if ok else "FAIL" + ("" if result.settled else " (did not settle)")
    # one unwrapped line, last: SCENARIO.md's contract for run output
    click.echo(f"verdict: {verdict}; replay: {case.replay_command(str(out) if out else None)}")
    return 0 if ok else 1


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
    from orchestration.runner import run_real
    from orchestration.scenario import ScenarioError, load

    sc = load(DEMO_SCENARIO, seed=seed)
    out = out or Path("runs") / f"demo-{sc.name}-seed{seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    started = time.perf_counter()
    try:
        with console.status(f"running {sc.name}: {len(sc.members)} members in network namespaces, under chaos"):
            outcome = run_real(sc, "netns", out)
    except (ScenarioError, ClusterError, ChaosError) as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(2)
    console.print(f"ran {sc.name} (seed {seed}) on the netns backend in {time.perf_counter() - started:.1f} s")
    from orchestration.cli_fault import describe

    faults = [json.loads(line) for line in (out / "faults.jsonl").read_text().splitlines()]
    t0 = faults[0]["t"] if faults else 0
    console.print("faults and views, in seconds after the first fault:")
    timeline: list[tuple[int, str]] = []
    for f in faults:
        what = describe(f)
        timeline.append((f["t"], f"fault {f.get('id', ''):3} {what}"))
    views = sorted(_views_installed(out / "history"))
    before = [v for v in views if v[0] < t0]
    timeline += before[-1:] + [v for v in views if v[0] >= t0]  # the view the faults began in, and every later one
    for t, what in sorted(timeline):
        console.print(f"  {(t - t0) / 1e9:6.2f}s  {what}", markup=False)
    code = _run_checks(out, None, outcome.extra_violations)
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
    case = SimCase(
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
        discards=[Discard("UNICAST3.ACK()", "B", "A", 3), Discard("UNICAST3.XMIT_REQ()", "C", "A", 2)],
        properties={"unicast3": {"xmit_interval": "200ms"}},
    )
    out = out or Path("runs") / f"demo-seed{seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    started = time.perf_counter()
    result = run_case(case)
    code = _report_case(case, result, time.perf_counter() - started, out)
    # The simulator's own table above; now the independent check, recomputed from the histories on Spark.
    check_code = _run_checks(out, None)
    click.echo(f"report: {out / 'report.html'}")
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
    type=click.Choice(["netns", "process"]),
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
    """Stop a cluster and remove everything it created (processes, namespaces, links, state)."""
    from orchestration.cluster import reap_all

    if all_:
        removed = reap_all()
        console.print(f"removed: {', '.join(removed) if removed else 'nothing left to remove'}")
        return
    cluster = _attach(label)
    cluster.down()
    console.print(f"cluster {cluster.label} is down; histories are in {cluster.workdir / 'history'}")


# --- scenarios and checks ---------------------------------------------------------------------------------------


def _run_checks(folder: Path, master: str | None, extra: list[dict] | None = None) -> int:
    """The analysis pipeline (PySpark) over a run folder: prints the verdict table, writes verdict.json and
    report.html; exit 0 clean, 1 violations, 2 unreadable input. Runner violations (a timeout) are reported too."""
    try:
        from analysis.command import check as analysis_check
        from analysis.verdict import Violation
    except ImportError as e:
        click.echo(
            f"error: the checker needs the analysis extra ({e}); install it: pip install 'chaosbed[analysis]'", err=True
        )
        return 2
    return analysis_check(folder, master, extra=[Violation(**v) for v in extra or []])


@main.command()
@click.argument("scenario_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--backend",
    type=click.Choice(["sim", "process", "netns"]),
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
@click.option("--master", default=None, help="Spark master for the checks (default: local)")
def run(
    scenario_file: Path,
    backend: str | None,
    seed: int | None,
    out: Path | None,
    sets: tuple[str, ...],
    master: str | None,
) -> None:
    """Run a scenario file (SCENARIO.md) and check it: exit 0 clean, 1 violations, 2 could not run."""
    from orchestration.cluster import ClusterError
    from orchestration.runner import run_real, run_sim
    from orchestration.scenario import ScenarioError, load

    try:
        sc = load(scenario_file, list(sets), seed)
        backend = backend or _default_backend()
        out = out or Path("runs") / f"{sc.name}-{backend}-seed{sc.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
        if out.exists() and any(out.iterdir()):
            raise ScenarioError(f"--out {out}: the folder exists and is not empty")
        with console.status(f"running {sc.name} on {backend} (seed {sc.seed})"):
            outcome = run_sim(sc, out) if backend == "sim" else run_real(sc, backend, out)
    except (ScenarioError, ClusterError) as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(2)
    code = _run_checks(out, master, outcome.extra_violations)
    replay = f"chaosbed run {shlex.quote(str(scenario_file))} --backend {backend} --seed {sc.seed}" + "".join(
        f" --set {shlex.quote(s)}" for s in sets
    )
    verdict = {0: "PASS", 1: "FAIL", 2: "UNREADABLE"}.get(code, str(code))
    click.echo(f"verdict: {verdict} ({out}); replay: {replay}")
    sys.exit(code)


@main.command()
@click.argument("folder", type=click.Path(file_okay=False, path_type=Path))
@click.option("--master", default=None, help="Spark master URL (default: local mode)")
def check(folder: Path, master: str | None) -> None:
    """Check a finished run folder (or a folder of run folders): exit 0 clean, 1 violations, 2 unreadable."""
    sys.exit(_run_checks(folder, master))


# `chaosbed fault ...` lives in its own module; importing it registers the group on `main`.
from orchestration import cli_fault  # noqa: E402, F401

if __name__ == "__main__":
    main()
