"""`chaosbed demo`: scenarios/partition-heal.toml on a real cluster (network namespaces) under chaos, checked, with
a timeline of faults and views and a report; where namespaces are not available, a UNICAST3 case in the simulator."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from orchestration.cli.options import console
from orchestration.cli.output import print_handled, print_timeline, run_checks, warn_late
from orchestration.cli.sim import print_pairs, run_sim_case, sim_scenario

DEMO_SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "partition-heal.toml"


@click.command()
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
    from chaos.faults import ChaosError
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
    warn_late(outcome)
    print_timeline(out)
    print_handled(outcome.handled)
    code = run_checks(out, None)
    verdict = {0: "PASS", 1: "FAIL", 2: "UNREADABLE"}.get(code, str(code))
    click.echo(f"report: {out / 'report.html'}")
    click.echo(f"verdict: {verdict}; replay: chaosbed run scenarios/{DEMO_SCENARIO.name} --backend netns --seed {seed}")
    sys.exit(code)


def _demo_sim(seed: int, out: Path | None) -> None:
    """UNICAST3 under chaos in the simulator: 20% loss, duplication, reordering, and exact discards of the first
    3 ACKs from B to A and the first 2 retransmission requests from C to A; then the histories are checked on Spark
    and an HTML report is written."""
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
    print_handled(outcome.handled)
    console.print(f"{result.events:,} events; the simulated run took {elapsed:.2f} s real; run folder: {out}")
    # The same checks, recomputed from the histories on Spark, with the HTML report.
    check_code = run_checks(out, None)
    click.echo(f"report: {out / 'report.html'}")
    verdict = "PASS" if max(code, check_code) == 0 else "FAIL"
    click.echo(f"verdict: {verdict}; replay: chaosbed demo --sim --seed {seed}")
    sys.exit(max(code, check_code))
