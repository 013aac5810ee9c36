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

COUNTERS_PER_LINE = 6  # counters printed on one line of a member's section under the table


def print_foreign_status(cluster: Cluster) -> None:
    from orchestration.systems import system_of

    system = system_of(cluster.spec.system)
    table = Table(
        title=f"cluster {cluster.label} ({cluster.backend_name}, system {system.label}, {cluster.spec.transport})"
    )
    cols = ["member", "pid", "state", "inc", "view", "history lines", "CPU s", "RSS MiB"]
    for col in cols:
        table.add_column(col, justify="left" if col in ("member", "state", "view") else "right")
    running = set(cluster.running())
    counters_of: dict[str, object] = {}
    for name, m in cluster.members.items():
        state = "paused" if m.paused else "running" if name in running else "not running"
        view = "-"
        if system.control and name in running and not m.paused:
            view, counters_of[name] = _asked(cluster, name)
        cpu, rss = _usage(m.pid if name in running else None)
        lines = _lines(m.history)
        table.add_row(name, str(m.pid or "-"), state, str(m.incarnation), view, lines, cpu, rss)
    console.print(table)
    for name, counters in counters_of.items():
        if counters is not None:
            console.print(f"{name}'s own counters (`chaosbed status --json` has them whole):", markup=False)
            for line in counter_lines(counters):
                console.print(f"  {line}", markup=False, soft_wrap=True)
    unknown = ["counters are the member's own (free-form `stats`)"]
    if not system.control:
        unknown = ["views and counters (it has no control endpoint)"]
    if not any(m.history for m in cluster.members.values()):
        unknown.append("what it sends and delivers (no history folder is mounted)")
    console.print(f"not known from outside: {'; '.join(unknown)}", markup=False)


def status_doc(cluster: Cluster) -> dict[str, object]:
    """`chaosbed status --json`: the cluster, and per member its pid, state, incarnation, view and whole `stats`
    reply (null where it cannot be asked), CPU seconds, RSS and history lines (null where unknown)."""
    from orchestration.systems import system_of

    system = system_of(cluster.spec.system)
    running = set(cluster.running())
    members: dict[str, object] = {}
    for name, m in cluster.members.items():
        state = "paused" if m.paused else "running" if name in running else "not running"
        view: object = None
        stats: object = None
        if system.control and state == "running":
            try:
                view = cluster.control(name, "view", timeout=3.0).get("view")
                stats = dict(cluster.control(name, "stats", timeout=3.0))
            except (ClusterError, OSError) as e:
                state = f"no answer: {e}"
        cpu, rss = _usage(m.pid if name in running else None)
        lines = _lines(m.history)
        members[name] = {"pid": m.pid, "state": state, "incarnation": m.incarnation, "view": view, "stats": stats,
                         "cpu_s": _number(cpu), "rss_mib": _number(rss), "history_lines": _number(lines)}  # fmt: skip
    return {"cluster": cluster.label, "backend": cluster.backend_name, "system": system.name,
            "stack": cluster.spec.stack if system.native else system.stack, "members": members}  # fmt: skip


def _number(shown: str) -> float | None:
    try:
        return float(shown)
    except ValueError:
        return None


def _asked(cluster: Cluster, name: str) -> tuple[str, object]:
    """The member's view (shown) and its `stats` counters (None when it did not answer)."""
    try:
        view = cluster.control(name, "view", timeout=3.0).get("view")
        counters = cluster.control(name, "stats", timeout=3.0).get("counters")
    except (ClusterError, OSError) as e:
        return f"no answer: {escape(str(e))[:60]}", None
    shown = f"{view.get('view_id')} {view.get('members')}" if isinstance(view, dict) else "(no views)"
    return escape(shown), counters


def counter_lines(counters: object) -> list[str]:
    """A member's free-form counters, readable: one line per section (a protocol, ...) with its values as
    `name value`, nested sections by dotted names, a long section over several lines; a value that is not a number
    is shown as JSON."""
    if not isinstance(counters, dict):
        return [json.dumps(counters)]
    sections: dict[str, dict[str, str]] = {}
    for key, value in counters.items():
        if isinstance(value, dict):
            _flatten("", value, sections.setdefault(str(key), {}))
        else:
            sections.setdefault("(top)", {})[str(key)] = _shown(value)
    out = []
    for section, values in sections.items():
        items = [f"{k} {v}" for k, v in values.items()] or ["(none)"]
        for i in range(0, len(items), COUNTERS_PER_LINE):
            out.append(f"{section}: " + ", ".join(items[i : i + COUNTERS_PER_LINE]))
    return out


def _flatten(prefix: str, table: dict[object, object], into: dict[str, str]) -> None:
    for key, value in table.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict):
            _flatten(name, value, into)
        else:
            into[name] = _shown(value)


def _shown(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return json.dumps(value)
    return f"{value:g}" if isinstance(value, float) else str(value)


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
