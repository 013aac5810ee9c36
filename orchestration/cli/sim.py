"""`chaosbed sim`: a shorthand that builds a Scenario (every member streams unicasts to every other member while the
links misbehave) and runs it like `chaosbed run FILE --backend sim`: the same runner, scheduler and fault table.
The verdict comes from the members' histories, checked by the plain-Python reference checker (analysis/reference.py:
the same definitions as the Spark pipeline, no JVM to start), so a simulator case answers in a second.
"""

from __future__ import annotations

import shlex
import sys
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.table import Table

from node.stack import STACKS
from orchestration.cli.options import console, duration_arg, fraction_arg, parse_set, protocol_set_option
from orchestration.cli.output import print_handled

if TYPE_CHECKING:
    from analysis.reference import RefResult
    from orchestration.cluster import Properties
    from orchestration.runner import RunOutcome
    from orchestration.scenario import TomlTable

SIM_TIMEOUT_AFTER = 120.0  # virtual seconds a case may take to settle after its workload and faults


def sim_scenario(
    *,
    stack: str = "unicast3",
    members: int = 3,
    seed: int = 1,
    count: int = 1000,
    rate: float = 1000.0,
    size: int = 100,
    loss: float = 0.0,
    duplicate: float = 0.0,
    reorder: float = 0.0,
    delay: float = 0.0,
    jitter: float = 0.0,
    fault_for: float = 0.0,
    discards: list[dict[str, object]] | None = None,
    properties: Properties | None = None,
) -> TomlTable:
    """The scenario (as a parsed TOML table) of a simulator case: link faults on every link from t=0 (healed,
    with every discard rule, at `fault_for` if > 0), discard rules, a unicast stream between every pair."""
    link = "*"
    faults: list[TomlTable] = []
    for kind, p in (("loss", loss), ("duplicate", duplicate), ("reorder", reorder)):
        if p:
            faults.append({"at": "0s", "kind": kind, "from": link, "to": link, "probability": p})
    if delay or jitter:
        faults.append({"at": "0s", "kind": "delay", "from": link, "to": link, "delay": f"{delay * 1000:g}ms"})
        if jitter:
            faults[-1]["jitter"] = f"{jitter * 1000:g}ms"
    for d in discards or []:
        faults.append({"at": "0s", "kind": "discard", **{k: v for k, v in d.items() if v is not None}})
    if fault_for:
        faults.append({"at": f"{fault_for:g}s", "kind": "heal"})
    cluster: TomlTable = {"members": members, "stack": stack}
    raw: TomlTable = {
        "name": f"sim-{stack}-seed{seed}",
        "seed": seed,
        "timeout": f"{count / rate + fault_for + SIM_TIMEOUT_AFTER:g}s",
        "cluster": cluster,
        "workload": [{"kind": "unicast", "from": "*", "to": "*", "count": count, "size": size, "rate": rate}],
        "faults": faults,
        "checks": {"fifo": True, "exactly_once": True, "complete": True, "no_phantoms": True},
    }
    if properties:
        cluster["properties"] = properties
    return raw


def run_sim_case(raw: TomlTable, out: Path) -> tuple[int, float, tuple[RefResult, RunOutcome]]:
    """Runs the case on the sim backend and checks it: (exit code 0|1, seconds taken, the reference result)."""
    from analysis.reference import check_path
    from orchestration.runner import run
    from orchestration.scenario import parse

    started = time.perf_counter()
    outcome = run(parse(raw), "sim", out)
    elapsed = time.perf_counter() - started
    result = next(iter(check_path(out).values()))
    ok = not result.violations and not outcome.timed_out
    return (0 if ok else 1), elapsed, (result, outcome)


def print_pairs(out: Path, result: RefResult, title: str) -> None:
    """Per sender and receiver: sent and delivered (from the histories) and the violations of each check."""
    import json

    sent: Counter[tuple[str, str]] = Counter()
    delivered: Counter[tuple[str, str]] = Counter()
    for path in sorted((out / "history").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            e = json.loads(line)
            if e.get("kind") != "unicast":
                continue
            if e["event"] == "send":
                sent[(e["sender"], e["dest"])] += 1
            elif e["event"] == "deliver":
                delivered[(e["sender"], e["dest"])] += 1
    bad: Counter[tuple[str | None, str | None, str]] = Counter(
        (v.sender, v.receiver, v.check) for v in result.violations
    )
    checks = ("fifo", "exactly_once", "complete", "no_phantoms")
    table = Table(title=title)
    for col in ("from", "to", "sent", "delivered", "fifo", "once", "complete", "phantoms"):
        table.add_column(col, justify="left" if col in ("from", "to") else "right")
    for s, d in sorted(set(sent) | set(delivered)):
        counts = [bad[(s, d, c)] for c in checks]
        style = "red" if any(counts) else ""
        table.add_row(s, d, str(sent[(s, d)]), str(delivered[(s, d)]), *map(str, counts), style=style)
    console.print(table)


def replay_command(args: Mapping[str, object], out: Path | None) -> str:
    """The `chaosbed sim` command line that reruns the case (same options, same seed)."""
    argv = ["chaosbed", "sim"]
    for key, value in args.items():
        if key in ("discards", "sets", "out"):
            continue
        argv += [f"--{key.replace('_', '-')}", f"{value:g}" if isinstance(value, float) else str(value)]
    discards = args.get("discards")
    for d in discards if isinstance(discards, list) else []:
        argv += ["--discard", str(d["match"])]
        for k in ("from", "to", "count"):
            if d.get(k) is not None:
                argv += [f"--discard-{k}", str(d[k])]
    sets = args.get("sets")
    for s in sets if isinstance(sets, list) else []:
        argv += ["--set", str(s)]
    if out is not None:
        argv += ["--out", str(out)]
    return shlex.join(argv)


@click.command()
@click.option("--stack", type=click.Choice(sorted(STACKS)), default="unicast3", show_default=True)
@click.option("--members", "-n", type=click.IntRange(2, 26), default=3, show_default=True)
@click.option("--seed", type=int, default=1, show_default=True, help="drives the network and workload")
@click.option("--count", type=click.IntRange(0), default=1000, show_default=True, help="per sender and destination")
@click.option("--rate", type=click.FloatRange(min=0, min_open=True), default=1000.0, show_default=True)
@click.option("--size", type=click.IntRange(0), default=100, show_default=True, help="payload bytes")
@click.option("--loss", default="0", help="per-link datagram loss, e.g. 0.2 or 20%")
@click.option("--duplicate", default="0", help="per-link duplication probability")
@click.option("--reorder", default="0", help="per-link probability of holding a datagram back")
@click.option("--delay", default="0ms", show_default=True, help="added one-way latency per link")
@click.option("--jitter", default="0ms", show_default=True, help="uniform extra latency per datagram")
@click.option("--fault-for", default="0s", help="heal the links after this long (0 = keep faults)")
@click.option("--discard", "discards", multiple=True, help="a rule like 'UNICAST3.ACK(seqno=50)'")
@click.option("--discard-from", "discard_from", multiple=True, help="sender member of each --discard (default any)")
@click.option("--discard-to", "discard_to", multiple=True, help="receiver member of each --discard (default any)")
@click.option("--discard-count", "discard_count", multiple=True, type=int, help="act on the first N matches only")
@protocol_set_option
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), help="the run folder (default under runs/)")
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
    """Run a seeded case in the deterministic simulator and check delivery (exit 0 clean, 1 violations, 2 bad
    input). Shorthand for a scenario file run with --backend sim; the run folder holds it as scenario.toml."""
    opts: dict[str, object] = dict(locals())  # the options as given, for the replay command
    from orchestration.cluster import ClusterError
    from orchestration.scenario import ScenarioError

    rules: list[dict[str, object]] = [
        {"match": e, "from": _nth(discard_from, i), "to": _nth(discard_to, i), "count": _nth(discard_count, i)}
        for i, e in enumerate(discards)
    ]
    folder = out or Path("runs") / f"sim-seed{seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        raw = sim_scenario(
            stack=stack,
            members=members,
            seed=seed,
            count=count,
            rate=rate,
            size=size,
            loss=fraction_arg(loss),
            duplicate=fraction_arg(duplicate),
            reorder=fraction_arg(reorder),
            delay=duration_arg(delay),
            jitter=duration_arg(jitter),
            fault_for=duration_arg(fault_for),
            discards=rules,
            properties=parse_set(sets),
        )
        code, elapsed, (result, outcome) = run_sim_case(raw, folder)
    except (ValueError, ScenarioError, ClusterError, click.BadParameter) as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(2)
    print_pairs(folder, result, f"{stack}, {members} members, seed {seed}")
    print_handled(outcome.handled)
    console.print(f"{result.events:,} events; the run took {elapsed:.2f} s real; run folder: {folder}")
    for v in result.violations[:5]:
        console.print(f"  {v.line()}", markup=False)
    args = {k: opts[k] for k in ("stack", "members", "seed", "count", "rate", "size")}
    for k in ("loss", "duplicate", "reorder", "delay", "jitter", "fault_for"):
        if opts[k] not in ("0", "0ms", "0s"):
            args[k] = opts[k]
    args["discards"], args["sets"] = rules, list(sets)
    verdict = "PASS" if code == 0 else "FAIL" + (" (did not settle)" if outcome.timed_out else "")
    click.echo(f"verdict: {verdict}; replay: {replay_command(args, out)}")
    sys.exit(code)


def _nth(values: tuple[str, ...] | tuple[int, ...], i: int) -> str | int | None:
    return values[i] if i < len(values) else None
