"""report.html: one self-contained file per run (and one per matrix) — verdict, fault timeline against delivery
progress, latency distribution, counters. Plots are PNGs embedded as base64, so the file opens offline."""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from analysis.config import BOUND_CHECKS, CORE_CHECKS
from analysis.histogram import bin_value, percentiles_from_hist
from analysis.membership import NEVER, RunInfo
from analysis.report_lanes import fault_rounds, faults_to_draw, grouped, lanes_figure
from analysis.streams import PROGRESS_BUCKETS
from analysis.verdict import sort_violations

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from analysis.pipeline import Analysis
    from analysis.results import RunResult
    from analysis.stats import LatencyStats, MemberStats, RunStats

MAX_ROWS = 500  # violations listed in a report (verdict.json has them all)
_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;max-width:1100px;color:#222}
h1{font-size:1.5em;margin-bottom:.2em} h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0;font-size:.9em}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}
th{background:#f4f4f4} td.n{text-align:right;font-variant-numeric:tabular-nums}
.ok{color:#137333;font-weight:bold} .fail{color:#c5221f;font-weight:bold} .off{color:#888}
.badge{display:inline-block;padding:.2em .7em;border-radius:4px;color:#fff;font-weight:bold}
.badge.ok{background:#137333} .badge.fail{background:#c5221f} .muted{color:#666;font-size:.9em}
img{max-width:100%;border:1px solid #eee}
"""


def _e(x: object) -> str:
    return html.escape("" if x is None else str(x))


def _png(fig: Figure) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return f'<img alt="plot" src="data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}">'


@dataclass(frozen=True)
class Html:
    """A table cell's content that is already HTML (any other value is escaped)."""

    text: str


def _table(headers: Iterable[str], rows: Iterable[Iterable[object]], numeric: set[int] | None = None) -> str:
    numeric = numeric or set()
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for i, v in enumerate(row):
            cls = ' class="n"' if i in numeric else ""
            cells.append(f"<td{cls}>{v.text if isinstance(v, Html) else _e(v)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _page(title: str, body: str) -> str:
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
        f"<style>{_CSS}</style></head><body>{body}</body></html>\n"
    )


def label_rows(labels: list[tuple[float, int]], char: float) -> list[int]:
    """The row of each label (its start, its length in characters of `char` width), in order: the lowest row whose
    last label ends before it starts, so that faults starting close together are not labelled over each other."""
    ends: list[float] = []  # where the last label of each row ends
    rows = []
    for start, length in labels:
        row = next((i for i, end in enumerate(ends) if end < start), len(ends))
        if row == len(ends):
            ends.append(start)
        ends[row] = start + length * char
        rows.append(row)
    return rows


_MEMBER_FAULTS = ("kill", "restart", "leave")  # drawn as instants, whatever their end
_LABEL_BOX = {"facecolor": "white", "alpha": 0.7, "edgecolor": "none", "pad": 1}  # keeps a label readable over lines


def timeline_figure(res: RunResult, label_faults: bool = True) -> Figure:
    """Cumulative deliveries per member over time, with fault intervals, kills/restarts, view changes and
    violations drawn on the same time axis; without `label_faults` (a long run: its lanes name the faults) the faults
    are shaded and marked but not labelled."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    info = res.info
    t0, span = info.t_min, max(1, info.t_max - info.t_min)
    fig, ax = plt.subplots(figsize=(11, 4.2))
    xs = (np.arange(PROGRESS_BUCKETS) + 1) * span / PROGRESS_BUCKETS / 1e9
    top = 1
    for m in info.members:
        counts = res.progress.get(m)
        if counts is None:
            continue
        cum = np.cumsum(counts)
        top = max(top, int(cum[-1]))
        (line,) = ax.plot(xs, cum, label=f"{m}{'' if info.alive.get(m) else ' (not alive at end)'}", lw=1.6)
        for v in info.all_views.get(m, []):
            x = (v.t - t0) / 1e9
            i = min(PROGRESS_BUCKETS - 1, max(0, int((v.t - t0) * PROGRESS_BUCKETS // span)))
            ax.plot([x], [cum[i]], marker="v", ms=6, color=line.get_color(), zorder=3)
    instants: dict[tuple[int, str], list[str]] = {}
    intervals = sorted((f for f in info.faults if f.end != f.t and f.kind not in _MEMBER_FAULTS), key=lambda f: f.t)
    # the width of one 8 pt character on this axis, in seconds, with room to spare
    rows = label_rows([((f.t - t0) / 1e9, len(f.label) + 2) for f in intervals], 0.008 * span / 1e9)
    for f, row in zip(intervals, rows, strict=True):
        x0 = (f.t - t0) / 1e9
        x1 = (min(f.end, info.t_max) - t0) / 1e9 if f.end != NEVER else span / 1e9
        ax.axvspan(x0, x1, color="#f9ab00", alpha=0.18)
        if label_faults:
            ax.text(x0, top * (0.02 + 0.07 * row), f" {f.label}", fontsize=8, va="bottom", bbox=_LABEL_BOX)
    for f in info.faults:
        if f.end == f.t or f.kind in _MEMBER_FAULTS:  # instantaneous faults at the same time share a line and a label
            instants.setdefault((f.t, f.kind), []).append(f.label)
    colors = {"kill": "#c5221f", "restart": "#137333", "leave": "#8430ce"}
    for (t, kind), labels in sorted(instants.items()):
        x0 = (t - t0) / 1e9
        text = labels[0] if len(labels) == 1 else f"{len(labels)} x {kind}"
        ax.axvline(x0, color=colors.get(kind, "#888"), ls="--" if kind in colors else ":", lw=1)
        if label_faults:
            ax.text(x0, top * 0.98, f" {text}", rotation=90, va="top", fontsize=8, color=colors.get(kind, "#555"))
    start = scenario_start(info)
    if start is not None:
        ax.axvline(start, color="#444", ls="-.", lw=1)
        ax.text(start, top * 0.98, " scenario t=0", rotation=90, va="top", ha="right", fontsize=8, color="#444")
    bad = [v.t for v in res.violations if v.t is not None]
    if bad:
        ax.plot(
            [(t - t0) / 1e9 for t in bad],
            [0] * len(bad),
            "x",
            color="#c5221f",
            ms=9,
            mew=2,
            label=f"violations ({len(bad)})",
            clip_on=False,
            zorder=4,
        )
    ax.set_xlabel("time since the first event (s)")
    ax.set_ylabel("messages delivered (cumulative)")
    ax.set_title("Delivery progress per member; faults shaded, ▼ view installed")
    ax.set_xlim(0, span / 1e9)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, borderaxespad=0)
    return fig


def scenario_start(info: RunInfo) -> float | None:
    """Where the schedule's clock reads 0 (every fault's `at` counts from it) on the report's time axis (seconds
    since the first event), when it is after the first event (members start and form their group first on a real
    cluster); None when faults.jsonl does not say or it coincides with the first event (the simulator)."""
    if info.t_schedule is None or info.t_schedule <= info.t_min:
        return None
    return (info.t_schedule - info.t_min) / 1e9


def latency_figure(res: RunResult) -> Figure | None:
    """Latency distribution (send to deliver) per kind, from the log-binned histograms, with p50 and p99."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hist = {k: h for k, h in res.hist.items() if any(b >= 0 for b in h)}
    if not hist:
        return None
    fig, ax = plt.subplots(figsize=(11, 3.6))
    for kind, h in sorted(hist.items()):
        coarse: dict[int, int] = {}
        for b, n in h.items():  # display 8 bins per octave (the data has 32)
            if b >= 0:
                coarse[b // 4] = coarse.get(b // 4, 0) + n
        bins = sorted(coarse)
        x = np.array([bin_value(4 * b + 2) for b in bins]) / 1e6
        y = np.array([coarse[b] for b in bins])
        p = percentiles_from_hist(h)
        label = f"{kind}: p50 {p['p50'] / 1e6:.3g} ms, p99 {p['p99'] / 1e6:.3g} ms (n={p['count']:,})"
        (line,) = ax.step(x, y, where="mid", label=label)
        for q, ls in (("p50", "-"), ("p99", "--")):
            ax.axvline(p[q] / 1e6, color=line.get_color(), ls=ls, lw=1)
    ax.set_xscale("log")
    ax.set_xlabel("latency send → deliver (ms, log scale)")
    ax.set_ylabel("messages")
    ax.set_title("Latency distribution (solid: p50, dashed: p99)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def _bound_text(check: str, on: object) -> str:
    """The bound column of the verdict table: "10 s" for durations, "sync ≤ 10, xmit ≤ 500" for control_per_heal."""
    if isinstance(on, dict):
        return ", ".join(f"{k} ≤ {v} per heal" for k, v in on.items())
    if check in ("views_converge", "delivered_within") and isinstance(on, float | int) and not isinstance(on, bool):
        return f"{on:g} s"
    return ""


def _verdict_rows(stats: RunStats) -> list[list[object]]:
    rows: list[list[object]] = []
    shown = [*CORE_CHECKS, *(b for b in BOUND_CHECKS if stats.configures(b))]
    for check in shown:
        on = stats.checks.get(check)
        n = stats.violations.get(check, 0)
        unchecked = any(note.startswith(f"{check} not checked") for note in stats.notes)
        if on is False:
            status = Html('<span class="off">off</span>')
        elif unchecked and n == 0:
            status = Html('<span class="off">not checked</span>')
        elif n == 0:
            status = Html('<span class="ok">held</span>')
        else:
            status = Html('<span class="fail">violated</span>')
        rows.append([check, status, n, _bound_text(check, on)])
    for check, n in stats.violations.items():
        if check not in shown:
            rows.append([check, Html('<span class="fail">violated</span>'), n, ""])
    return rows


def _bound_sections(stats: RunStats) -> list[str]:
    """What delivered_within and control_per_heal measured, when the scenario configures them."""
    parts = []
    within = stats.delivered_within
    if within:
        worst = "none delivered" if within.max_ms is None else f"{within.max_ms:,} ms"
        parts += [
            "<h2>Delivery after heals</h2>",
            f'<p class="muted">Each owed delivery timed from the later of its send and the last heal before it '
            f"(bound {within.bound_s:g} s): {within.checked:,} timed, {within.late:,} late, "
            f"longest {worst}.</p>",
        ]
    control = stats.control_per_heal
    if control:
        names = ["start", *(f"heal {h:.3f} s" for h in control.heals_s)]
        rows = [
            [m, f"{k} (≤ {control.bounds[k]})", *counts]
            for m, kinds in control.counts.items()
            for k, counts in kinds.items()
        ]
        numeric = set(range(2, len(names) + 2))
        parts += [
            "<h2>Control events per recovery interval</h2>",
            '<p class="muted">Events each member wrote from the start, or from each heal, to the next heal.</p>',
            _table(["member", "kind (bound)", *(f"from {n}" for n in names)], rows, numeric),
        ]
    return parts


def _fault_table(info: RunInfo) -> str:
    """The faults, at and until in seconds since the first event (the timeline's axis); with a scenario clock that
    started later, also when each took effect on that clock, next to the `at` the scenario planned."""
    start = scenario_start(info)
    rows: list[list[object]] = []
    for f in info.faults:
        row: list[object] = [
            f"{(f.t - info.t_min) / 1e9:.3f}",
            "never" if f.end == NEVER else f"{(f.end - info.t_min) / 1e9:.3f}",
        ]
        if start is not None:
            row.append(f"{(f.t - info.t_min) / 1e9 - start:.3f}")
        rows.append([*row, f.label, f.details])
    if start is None:
        return _table(["at (s)", "until (s)", "fault", "details"], rows, {0, 1})
    note = (
        f"<p class=\"muted\">Times are seconds since the first event. The scenario's clock (each fault's at=) "
        f"started at {start:.3f} s, once the members were up: the scenario time column is when the fault took "
        "effect on that clock.</p>"
    )
    return note + _table(["at (s)", "until (s)", "scenario time (s)", "fault", "details"], rows, {0, 1, 2})


def _round_table(info: RunInfo) -> str:
    """The faults of a long run, one row per round (faults whose windows overlap); each row opens on its faults."""
    start = scenario_start(info)
    rows: list[list[object]] = []
    for r in fault_rounds(info):
        inner = [[f"{(f.t - info.t_min) / 1e9:.3f}", f.label, f.details] for f in r.faults]
        faults = f"<details><summary>{len(r.faults)}</summary>{_table(['at (s)', 'fault', 'details'], inner)}</details>"
        row: list[object] = [r.number, f"{(r.t - info.t_min) / 1e9:.3f}", f"{(r.end - info.t_min) / 1e9:.3f}"]
        if start is not None:
            row.append(f"{(r.t - info.t_min) / 1e9 - start:.3f}")
        rows.append([*row, Html(faults), r.summary()])
    headers = ["round", "from (s)", "until (s)", *(["scenario time (s)"] if start is not None else []), "faults"]
    note = (
        f'<p class="muted">{len(faults_to_draw(info))} faults in {len(rows)} rounds (a nemesis round; else faults '
        "whose windows overlap, a kill lasting until its restart). Times are seconds since the first event; open a row "
        "for its faults.</p>"
    )
    return note + _table([*headers, "what"], rows, {0, 1, 2, 3} if start is not None else {0, 1, 2})


def render_run(name: str, res: RunResult, stats: RunStats) -> str:
    """The HTML report of one run."""
    badge = '<span class="badge ok">OK</span>' if not res.violations else '<span class="badge fail">FAIL</span>'
    parts = [
        f"<h1>{_e(name)} {badge}</h1>",
        f'<p class="muted">{stats.events:,} events from {len(stats.members)} members, '
        f"{stats.faults} faults, {stats.skipped_lines} skipped lines</p>",
        "<h2>Verdict</h2>",
        _table(["check", "result", "violations", "bound"], _verdict_rows(stats), {2}),
        *(f'<p class="muted">{_e(note)}</p>' for note in stats.notes),
        *_violation_section(res),
        "<h2>Faults and delivery progress</h2>",
    ]
    if grouped(res.info):  # a long run: lanes per member, faults by round
        parts += [_png(timeline_figure(res, label_faults=False)), _png(lanes_figure(res)), _round_table(res.info)]
    else:
        parts.append(_png(timeline_figure(res)))
        if res.info.faults:
            parts.append(_fault_table(res.info))
    parts += _latency_section(res, stats.latency_ms)
    parts += ["<h2>Counters</h2>", _member_table(stats.members), _counter_table(stats)]
    parts += _bound_sections(stats)
    if stats.skipped:
        rows = [[s.file, s.line, s.reason, s.text] for s in stats.skipped]
        parts += ["<h2>Skipped lines</h2>", _table(["file", "line", "why", "text"], rows, {1})]
    return _page(f"chaosbed: {name}", "".join(parts))


def _violation_section(res: RunResult) -> list[str]:
    """The violations (the first MAX_ROWS), when there are any."""
    if not res.violations:
        return []
    vs = sort_violations(res.violations)
    rows = [[v.check, v.sender, v.receiver, v.kind, v.conn_id, v.seqno, v.msg_id, v.detail] for v in vs[:MAX_ROWS]]
    parts = [
        "<h2>Violations</h2>",
        _table(["check", "sender", "receiver", "kind", "conn", "seqno", "msg_id", "detail"], rows, {5}),
    ]
    if len(vs) > MAX_ROWS:
        parts.append(f'<p class="muted">… and {len(vs) - MAX_ROWS} more in verdict.json</p>')
    return parts


def _latency_section(res: RunResult, latency: LatencyStats) -> list[str]:
    """The latency plot (when some message was delivered) and the table per kind and per link."""
    fig = latency_figure(res)
    parts = ["<h2>Latency</h2>", *([_png(fig)] if fig is not None else [])]
    rows: list[list[object]] = []
    for kind, p in latency.per_kind.items():
        rows.append(["all", kind, p.get("count"), p.get("p50"), p.get("p90"), p.get("p99"), p.get("max")])
    for link, kinds in latency.per_link.items():
        for kind, p in kinds.items():
            rows.append([link, kind, p["count"], p["p50"], p["p90"], p["p99"], p["max"]])
    parts.append(_table(["link", "kind", "count", "p50 ms", "p90 ms", "p99 ms", "max ms"], rows, {2, 3, 4, 5, 6}))
    return parts


def _member_table(members: dict[str, MemberStats]) -> str:
    rows = [
        [m, "yes" if s.alive else "no", s.incarnations, s.events]
        + [s.count(k) for k in ("send", "deliver", "view", "xmit", "ack")]
        for m, s in members.items()
    ]
    headers = ["member", "alive at end", "incarnations", "events", "sends", "deliveries", "views", "xmit", "ack"]
    return _table(headers, rows, {2, 3, 4, 5, 6, 7, 8})


_NOT_OWED = {
    "to_crashed": "to a crashed member",
    "from_crashed": "from a crashed member",
    "left": "from or to a member that left the group",
    "excluded": "to a member that left the view",
}


def _counter_table(stats: RunStats) -> str:
    """The run's counters: sends, deliveries, owed and not owed pairs, duplicates and phantoms, xmit and ack."""
    req = stats.required
    rows = [
        ["sends (unicast / multicast)", f"{stats.sends.unicast:,} / {stats.sends.multicast:,}"],
        ["deliveries", f"{stats.deliveries:,}"],
        ["owed deliveries, delivered (unicast)", f"{req.unicast.messages:,}, {req.unicast.delivered:,}"],
        ["owed deliveries, delivered (multicast)", f"{req.multicast.messages:,}, {req.multicast.delivered:,}"],
        [
            "duplicate / phantom / out-of-order deliveries",
            f"{stats.duplicate_deliveries} / {stats.phantom_deliveries} / {stats.out_of_order_deliveries}",
        ],
        ["retransmissions (xmit) / acks", f"{stats.xmit:,} / {stats.ack:,}"],
    ]
    for reason, label in _NOT_OWED.items():
        n = getattr(stats.not_required, reason)
        rows.append([f"not owed: {label} (delivered anyway)", f"{n.messages:,} ({n.delivered:,})"])
    return _table(["counter", "value"], rows)


def matrix_figure(analysis: Analysis) -> Figure | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r.name for r in analysis.runs]
    checks = sorted({c for s in analysis.stats.values() for c in s.violations})
    if not checks:
        return None
    fig, ax = plt.subplots(figsize=(11, max(2.5, 0.3 * len(names) + 1)))
    left = np.zeros(len(names))
    for c in checks:
        vals = np.array([analysis.stats[n].violations.get(c, 0) for n in names])
        ax.barh(names, vals, left=left, label=c)
        left += vals
    ax.invert_yaxis()
    ax.set_xlabel("violations")
    ax.legend(fontsize=8)
    ax.set_title("Violations per run")
    return fig


def render_matrix(analysis: Analysis) -> str:
    """The HTML report of a folder of runs: one row per run, linking to its report, and the violations per run."""
    ok = analysis.ok
    badge = '<span class="badge ok">OK</span>' if ok else '<span class="badge fail">FAIL</span>'
    bad_runs = sum(1 for r in analysis.results.values() if r.violations)
    parts = [
        f"<h1>{_e(analysis.root.resolve().name)} {badge}</h1>",
        f'<p class="muted">{len(analysis.runs)} runs, {analysis.events:,} events; {bad_runs} runs with violations</p>',
    ]
    rows: list[list[object]] = []
    bounds = [b for b in BOUND_CHECKS if any(s.configures(b) for s in analysis.stats.values())]
    columns = [*CORE_CHECKS, *bounds]
    for run in analysis.runs:
        s = analysis.stats[run.name]
        link = Html(f'<a href="{_e(Path(run.name, "report.html").as_posix())}">{_e(run.name)}</a>')
        verdict = Html('<span class="ok">OK</span>' if s.ok else '<span class="fail">FAIL</span>')
        counts = [s.violations.get(c, 0) if s.configures(c) else "off" for c in columns]
        rows.append([link, verdict, s.events, *counts, s.skipped_lines])
    parts += [
        "<h2>Runs</h2>",
        _table(["run", "verdict", "events", *columns, "skipped lines"], rows, set(range(2, len(columns) + 4))),
    ]
    fig = matrix_figure(analysis)
    if fig is not None:
        parts.append(_png(fig))
    return _page(f"chaosbed: {analysis.root.name}", "".join(parts))
