"""What several commands print about a run: one line per fault (`describe`), what the protocol-aware rules acted on,
what started late, and the checks' verdict (the analysis pipeline over a run folder)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.markup import escape

from chaos.faults import Fault, FaultRecord
from node.fault_kinds import NETWORK
from orchestration.cli.options import console

if TYPE_CHECKING:
    from orchestration.runner import RunOutcome
    from orchestration.scenario import Scenario


def describe(f: Fault | Mapping[str, object]) -> str:
    """One line saying what a fault does, e.g. `partition A -> B (one way)`: a fault table's fault, or any faults.jsonl
    line (a heal, a member action)."""
    if isinstance(f, Fault):
        return _describe(f)
    kind = f.get("kind")
    if kind == "heal":
        healed = f.get("faults")
        return f"heal {', '.join(map(str, healed))}" if isinstance(healed, list) and healed else "heal every fault"
    if kind not in NETWORK:
        return f"{kind} " + ", ".join(f"{k}={v}" for k, v in f.items() if k not in ("t", "event", "seed", "kind"))
    return _describe(Fault.from_event(f))


def _describe(f: Fault) -> str:
    kind = f.kind
    if kind == "split":
        return "split " + " | ".join(",".join(g) for g in f.groups)
    arrow = "<->" if kind == "partition" and not f.one_way else "->"
    links = f"{','.join(f.sources)} {arrow} {','.join(f.receivers)}"
    if kind == "partition":
        return f"partition {links}" + (" (one way)" if f.one_way else "")
    p = 1.0 if f.probability is None else f.probability
    if kind == "loss":
        return f"loss {p:.0%} {links}"
    if kind == "delay":
        jitter = f" ± {_ms(f.jitter)}" if f.jitter else ""
        return f"delay {_ms(f.delay or 0.0)}{jitter} {links}"
    if kind in ("reorder", "duplicate"):
        return f"{kind} {p:.0%} {links}"
    extra = [f"action {f.action}"] if f.action != "drop" else []
    if f.count:
        extra.append(f"first {f.count}")
    if p < 1.0:
        extra.append(f"p={p:g}")
    if f.action == "delay":
        extra.append(_ms(f.delay or 0.0))
    return f"discard {f.match} {links}" + (f" ({', '.join(extra)})" if extra else "")


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:g}ms"


def print_handled(faults: list[FaultRecord]) -> None:
    """What the protocol-aware rules of a run acted on, e.g. `f2 discard UNICAST3.ACK() B -> A (first 3): dropped 3`."""
    for f in faults:
        acted = ", ".join(f"{k} {v}" for k, v in (f.handled or {}).items() if k != "matched" and v)
        console.print(f"{f.id} {describe(f.fault)}: {acted or 'nothing matched'}", markup=False)


def print_timeline(out: Path) -> None:
    """A finished run's faults and views in seconds after the schedule's start (the view the faults began in, and
    every later one); nothing for a run without faults."""
    try:
        lines = [json.loads(line) for line in (out / "faults.jsonl").read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        return
    if len(lines) < 2 or lines[0].get("event") != "start":
        return
    t0 = lines[0]["t"]  # the schedule's start (docs/scenario-format.md "Fault timing"): every `at` counts from it
    timeline = [(f["t"], f"fault {f.get('id', ''):3} {describe(f)}") for f in lines[1:] if isinstance(f.get("t"), int)]
    views = sorted(_views_installed(out / "history"))
    before = [v for v in views if v[0] < t0]
    timeline += before[-1:] + [v for v in views if v[0] >= t0]
    console.print("faults and views, in seconds after the schedule's start:")
    for t, what in sorted(timeline):
        console.print(f"  {(t - t0) / 1e9:6.2f}s  {what}", markup=False)


def _views_installed(history: Path) -> list[tuple[int, str]]:
    """Each view of a run, when its first member installed it: (t, "view A|7 [A, B, C, D] (merge) at A, B, ...")."""
    first: dict[str, tuple[int, list[str], bool, list[str]]] = {}
    for path in sorted(history.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                e = json.loads(line) if '"view"' in line else None
            except ValueError:  # the cut-off last line of a killed member
                continue
            if isinstance(e, dict) and e.get("event") == "view" and isinstance(e.get("members"), list):
                t, members, merge, at = first.get(e["view_id"], (e["t"], e["members"], bool(e.get("merge")), []))
                first[e["view_id"]] = (min(t, e["t"]), members, merge, [*at, e["member"]])
    return [
        (t, f"view  {vid} [{', '.join(members)}]{' (merge)' if merge else ''} installed by {', '.join(sorted(at))}")
        for vid, (t, members, merge, at) in first.items()
    ]


def warn_late(outcome: RunOutcome) -> None:
    """Says loudly what did not happen as planned: member actions that started late (network faults are switched by
    the clock), a wall clock that moved under the kernel's time gates, packets that escaped the protocol-aware rules
    because an NFQUEUE handler fell behind."""
    from orchestration.runner import warning_lines

    for w in warning_lines(outcome.late, outcome.warnings):
        console.print(f"[bold red]WARNING[/bold red]: {escape(w)}", soft_wrap=True)


def run_shown(sc: Scenario, backend: str, out: Path, status: str) -> RunOutcome:
    """Runs `sc` into the run folder `out` (new, or empty: else ScenarioError) under a status line, then says what
    started late and what the protocol-aware rules acted on."""
    from orchestration.runner import run as run_scenario
    from orchestration.scenario import ScenarioError

    if out.exists() and any(out.iterdir()):
        raise ScenarioError(f"--out {out}: the folder exists and is not empty")
    with console.status(status):
        outcome = run_scenario(sc, backend, out)
    warn_late(outcome)
    print_timeline(out)
    print_handled(outcome.handled)
    return outcome


def run_checks(folder: Path, master: str | None) -> int:
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
