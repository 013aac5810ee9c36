"""`chaosbed status` of a cluster whose members chaosbed did not write (a foreign system, or containers attached with
`chaosbed compose attach`): what can be known from outside (pid, state, incarnation, CPU, RSS, history lines) and,
where the member answers the control contract, its view and its own counters; it says what cannot be known."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table

from orchestration.cli.options import console
from orchestration.cluster import ClusterError

if TYPE_CHECKING:
    from orchestration.cluster import Cluster

COUNTERS_WIDTH = 60


def print_foreign_status(cluster: Cluster) -> None:
    from orchestration.systems import system_of

    system = system_of(cluster.spec.system)
    table = Table(
        title=f"cluster {cluster.label} ({cluster.backend_name}, system {system.label}, {cluster.spec.transport})"
    )
    cols = ["member", "pid", "state", "inc", "view", "history lines", "counters (its own)", "CPU s", "RSS MiB"]
    for col in cols:
        table.add_column(col, justify="left" if col in ("member", "state", "view", "counters (its own)") else "right")
    running = set(cluster.running())
    for name, m in cluster.members.items():
        state = "paused" if m.paused else "running" if name in running else "not running"
        view, counters = _asked(cluster, name) if system.control and name in running and not m.paused else ("-", "-")
        cpu, rss = _usage(m.pid if name in running else None)
        lines = _lines(m.history)
        table.add_row(name, str(m.pid or "-"), state, str(m.incarnation), view, lines, counters, cpu, rss)
    console.print(table)
    unknown = ["counters are the member's own (free-form `stats`)"]
    if not system.control:
        unknown = ["views and counters (it has no control endpoint)"]
    if not any(m.history for m in cluster.members.values()):
        unknown.append("what it sends and delivers (no history folder is mounted)")
    console.print(f"not known from outside: {'; '.join(unknown)}", markup=False)


def _asked(cluster: Cluster, name: str) -> tuple[str, str]:
    try:
        view = cluster.control(name, "view", timeout=3.0).get("view")
        counters = cluster.control(name, "stats", timeout=3.0).get("counters")
    except (ClusterError, OSError) as e:
        return f"no answer: {escape(str(e))[:60]}", "-"
    shown = f"{view.get('view_id')} {view.get('members')}" if isinstance(view, dict) else "(no views)"
    text = json.dumps(counters, separators=(",", ":")) if counters is not None else "-"
    return escape(shown), escape(text if len(text) <= COUNTERS_WIDTH else text[: COUNTERS_WIDTH - 3] + "...")


def _usage(pid: int | None) -> tuple[str, str]:
    import psutil

    if pid is None:
        return "-", "-"
    try:
        proc = psutil.Process(pid)
        cpu = proc.cpu_times()
        return f"{cpu.user + cpu.system:.2f}", f"{proc.memory_info().rss / 2**20:.1f}"
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return "?", "?"


def _lines(history: str) -> str:
    if not history:
        return "-"
    try:
        with Path(history).open("rb") as f:
            return str(sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b"")))
    except OSError:
        return "-"
