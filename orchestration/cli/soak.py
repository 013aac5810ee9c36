"""`chaosbed explore FILE --soak --backend netns|docker|process`: a soak (orchestration/explore/soak.py) — one long
random nemesis against FILE's workload on real members, checked like `chaosbed run`, with what the cluster held up to.
Exit codes as `chaosbed run`: 0 clean, 1 violations, 2 could not run."""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

import click

from orchestration.cli.options import console, spark_target
from orchestration.cli.output import run_checks, run_shown


def soak(
    scenario_file: Path,
    backend: str,
    budget: float,
    nemesis: str | None,
    interval: float | None,
    sets: tuple[str, ...],
    seed: int | None,
    out: Path | None,
    spark: str | None,
) -> None:
    from orchestration.explore.case import load_base
    from orchestration.explore.soak import ROUND_S, SoakPlan, soak_scenario, summarize, write_summary
    from orchestration.explore.tables import integer
    from orchestration.scenario import ScenarioError, parse

    try:
        base = load_base(scenario_file, sets)
        plan = SoakPlan(
            budget,
            nemesis or "combined",
            ROUND_S if interval is None else interval,
            seed if seed is not None else integer(base, "seed", 0),
        )
        sc = parse(soak_scenario(base, plan))
        out = out or Path("runs") / f"{sc.name}-{backend}-seed{sc.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
        what = f"{plan.nemesis} nemesis, {plan.rounds} rounds of {plan.interval:g}s, {len(sc.members)} members"
        covers = f"{plan.sending:g}s of load and faults, then up to {budget - plan.sending:g}s to recover"
        console.print(
            f"soak: {sc.name} on {backend}, a {budget:g}s budget ({covers}; {what}); run folder {out}", markup=False
        )
        run_shown(sc, backend, out, f"soaking on {backend}")
    except ScenarioError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(2)
    code = run_checks(out, spark_target(spark, None))
    summary = summarize(out, plan, backend, len(sc.members), code)
    write_summary(out, summary)
    for line in summary.lines():
        console.print(line, markup=False, soft_wrap=True)
    args = [str(scenario_file), "--soak", "--backend", backend, "--budget", f"{budget:g}s", "--seed", str(plan.seed)]
    args += ["--nemesis", plan.nemesis, "--interval", f"{plan.interval:g}s"]
    args += [a for s in sets for a in ("--set", s)]
    console.print(f"replay: chaosbed explore {shlex.join(args)}; {out / 'soak.json'}", markup=False, soft_wrap=True)
    sys.exit(code)
