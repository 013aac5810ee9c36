"""What several commands print about a run: one line per fault (`describe`), what the protocol-aware rules acted on,
what started late, and the checks' verdict (the analysis pipeline over a run folder)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.markup import escape

from node.fault_kinds import NETWORK
from node.units import parse_duration
from orchestration.cli.options import console

if TYPE_CHECKING:
    from orchestration.runner import RunOutcome


def describe(f: dict[str, Any]) -> str:
    """One line saying what a fault does, e.g. `partition A -> B (one way)`."""
    kind = f["kind"]
    if kind == "heal":
        return f"heal {', '.join(f['faults'])}" if f.get("faults") else "heal every fault"
    if kind not in NETWORK:
        return f"{kind} " + ", ".join(f"{k}={v}" for k, v in f.items() if k not in ("t", "event", "seed", "kind"))
    if kind == "split":
        return "split " + " | ".join(",".join(g) for g in f["groups"])
    arrow = "<->" if kind == "partition" and not f.get("one_way") else "->"
    links = f"{','.join(f['from'])} {arrow} {','.join(f['to'])}"
    if kind == "partition":
        return f"partition {links}" + (" (one way)" if f.get("one_way") else "")
    if kind == "loss":
        return f"loss {f['probability']:.0%} {links}"
    if kind == "delay":
        jitter = f" ± {_ms(f['jitter'])}" if f.get("jitter") else ""
        return f"delay {_ms(f['delay'])}{jitter} {links}"
    if kind in ("reorder", "duplicate"):
        return f"{kind} {f['probability']:.0%} {links}"
    extra = [f"action {f['action']}"] if f["action"] != "drop" else []
    if f.get("count"):
        extra.append(f"first {f['count']}")
    if f.get("probability", 1.0) < 1.0:
        extra.append(f"p={f['probability']:g}")
    if f["action"] == "delay":
        extra.append(_ms(f["delay"]))
    return f"discard {f['match']} {links}" + (f" ({', '.join(extra)})" if extra else "")


def _ms(value: float | str) -> str:
    """A duration as milliseconds: seconds from the fault table, or the string faults.jsonl keeps ("30ms")."""
    return f"{(parse_duration(value) if isinstance(value, str) else value) * 1000:g}ms"


def print_handled(faults: list[dict[str, Any]]) -> None:
    """What the protocol-aware rules of a run acted on, e.g. `f2 discard UNICAST3.ACK() B -> A (first 3): dropped 3`."""
    for f in faults:
        acted = ", ".join(f"{k} {v}" for k, v in f["handled"].items() if k != "matched" and v)
        console.print(f"{f['id']} {describe(f)}: {acted or 'nothing matched'}", markup=False)


def warn_late(outcome: RunOutcome) -> None:
    """Says loudly what did not happen as planned: member actions that started late (network faults are switched by
    the clock), a wall clock that moved under the kernel's time gates, packets that escaped the protocol-aware rules
    because an NFQUEUE handler fell behind."""
    from orchestration.runner import warning_lines

    for w in warning_lines(outcome.late, outcome.warnings):
        console.print(f"[bold red]WARNING[/bold red]: {escape(w)}", soft_wrap=True)


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
