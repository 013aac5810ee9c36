"""The timeline of a run in Jepsen-style lanes, one per member: its views as coloured bands (labelled with their
members), its deliveries per 100 ms as a line across the band, its retransmissions as ticks, and the faults that
touch it as bars below (network faults in the lanes of the members that stop hearing someone; kills, pauses and
leaves in the victim's lane).
Times are seconds from the schedule's start (faults.jsonl's `start` line), as `at` in the scenario file.

Read from the run folder alone (history/*.jsonl, faults.jsonl), drawn with matplotlib as analysis/report.py draws.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from analysis.membership import NEVER, fault_intervals, read_faults, read_schedule_start
from chaos.faults import Fault

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

BIN_S = 0.1
NETWORK = {"partition", "split", "loss", "delay", "reorder", "duplicate", "discard"}
Colour = tuple[float, float, float, float]  # RGBA, as a colour map gives it
COLOURS = {"partition": "#d93025", "split": "#d93025", "discard": "#9334e6", "kill": "#202124", "pause": "#f29900"}


@dataclass
class Bar:
    start: float
    end: float
    label: str
    kind: str


@dataclass
class Lanes:
    members: list[str]
    end: float
    views: dict[str, list[tuple[float, str, list[str]]]] = field(default_factory=dict)  # (t, view_id, members)
    delivered: dict[str, list[float]] = field(default_factory=dict)  # delivery times
    xmits: dict[str, list[float]] = field(default_factory=dict)  # retransmission times
    last: dict[str, float] = field(default_factory=dict)  # each member's last event (a member that left stops there)
    bars: dict[str, list[Bar]] = field(default_factory=dict)
    marks: dict[str, list[tuple[float, str]]] = field(default_factory=dict)  # (t, kill|restart|leave|close...)


def read_lanes(run: Path) -> Lanes:
    t0 = read_schedule_start(run / "faults.jsonl") or 0
    views: dict[str, list[tuple[float, str, list[str]]]] = defaultdict(list)
    delivered: dict[str, list[float]] = defaultdict(list)
    xmits: dict[str, list[float]] = defaultdict(list)
    last_of: dict[str, float] = {}
    last = 0.0
    for path in sorted((run / "history").glob("*.jsonl")):
        for line in path.read_text(errors="replace").splitlines():
            try:
                e = json.loads(line)
            except json.JSONDecodeError:
                continue
            t = (e.get("t", t0) - t0) / 1e9
            last = max(last, t)
            last_of[e.get("member", path.stem)] = max(last_of.get(e.get("member", path.stem), t), t)
            if e.get("event") == "view":
                views[e["member"]].append((t, str(e.get("view_id")), list(e.get("members") or [])))
            elif e.get("event") == "deliver":
                delivered[e["member"]].append(t)
            elif e.get("event") == "xmit":
                xmits[e["member"]].append(t)
    members = sorted(set(views) | set(delivered) | {p.stem for p in (run / "history").glob("*.jsonl")})
    lanes = Lanes(members, last, dict(views), dict(delivered), dict(xmits), last_of)
    _add_faults(lanes, run, t0)
    return lanes


def _add_faults(lanes: Lanes, run: Path, t0: int) -> None:
    records, _ = read_faults(run / "faults.jsonl")
    for f in fault_intervals(records):
        start = (f.t - t0) / 1e9
        end = lanes.end if f.end == NEVER else (f.end - t0) / 1e9
        r = f.record
        if f.kind in NETWORK:
            hit = (
                sorted({b for _, b in Fault.from_event(r).links()})
                if ("from" in r and "to" in r) or "groups" in r
                else []
            )
            for m in hit:
                lanes.bars.setdefault(m, []).append(Bar(start, max(end, start + 0.02), _short(f.label), f.kind))
        elif f.kind == "pause":
            lanes.bars.setdefault(r["member"], []).append(Bar(start, max(end, start + 0.02), "paused", "pause"))
        elif r.get("member"):
            what = f.kind if "peer" not in r else f"close {r['peer']}"
            lanes.marks.setdefault(r["member"], []).append((start, what))


def _short(label: str) -> str:
    return label if len(label) <= 28 else label[:27] + "…"


def figure(lanes: Lanes, title: str = "") -> Figure:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(lanes.members)
    fig, ax = plt.subplots(figsize=(12, 0.95 * n + 1.2))
    cmap = plt.get_cmap("tab20")
    palette = [cmap(i) for i in range(cmap.N)]
    view_colour: dict[str, Colour] = {}
    end = max(lanes.end, 0.1)
    for row, m in enumerate(reversed(lanes.members)):
        y = row * 1.0
        _draw_views(ax, lanes.views.get(m, []), y, lanes.last.get(m, end), palette, view_colour)
        _draw_deliveries(ax, lanes.delivered.get(m, []), y, end)
        xs = lanes.xmits.get(m, [])
        if xs:
            ax.plot(xs, [y + 0.33] * len(xs), "|", color="#e37400", markersize=5, alpha=0.7)
        _draw_faults(ax, lanes.bars.get(m, []), lanes.marks.get(m, []), y)
    ax.set_yticks([i + 0.5 for i in range(n)], list(reversed(lanes.members)))
    ax.set_ylim(-0.1, n)
    ax.set_xlim(min(0.0, *(v[0][0] for v in lanes.views.values() if v)) if lanes.views else 0.0, end)
    ax.set_xlabel("seconds from the schedule's start (as `at` in the scenario)")
    legend = "views (bands), deliveries per 100 ms (blue line), retransmissions (orange ticks), faults (bars below)"
    ax.set_title(f"{title}: {legend}" if title else legend, fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def _draw_views(ax: Axes, views: list[tuple[float, str, list[str]]], y: float, end: float, palette: list[Colour],
                colour: dict[str, Colour]) -> None:  # fmt: skip
    if not views:  # a stack without membership: a plain lane
        ax.broken_barh([(0.0, end)], (y + 0.3, 0.6), facecolors="#f1f3f4", edgecolor="white")
    for i, (t, vid, members) in enumerate(views):
        until = views[i + 1][0] if i + 1 < len(views) else end
        c = colour.setdefault(vid, palette[len(colour) % len(palette)])
        ax.broken_barh([(t, max(until - t, 1e-3))], (y + 0.3, 0.6), facecolors=c, alpha=0.45, edgecolor="white")
        if until - t > 0.04 * end:
            ax.text(t + 0.01 * end, y + 0.82, f"{vid} {''.join(members)}", fontsize=7, va="top", clip_on=True)


def _draw_deliveries(ax: Axes, times: list[float], y: float, end: float) -> None:
    if not times:
        return
    bins = int(end / BIN_S) + 1
    counts = [0] * bins
    for t in times:
        if 0 <= t <= end:
            counts[min(bins - 1, int(t / BIN_S))] += 1
    top = max(counts) or 1
    xs = [i * BIN_S for i in range(bins)]
    ax.step(xs, [y + 0.32 + 0.55 * c / top for c in counts], where="post", color="#1a73e8", linewidth=0.8)


def _draw_faults(ax: Axes, bars: list[Bar], marks: list[tuple[float, str]], y: float) -> None:
    depth = max(1, len(bars))
    h = 0.26 / depth
    for k, b in enumerate(sorted(bars, key=lambda b: b.start)):
        c = COLOURS.get(b.kind, "#5f6368")
        ax.broken_barh([(b.start, b.end - b.start)], (y + 0.02 + k * h, h * 0.9), facecolors=c, alpha=0.8)
        ax.text(b.start, y + 0.02 + k * h + h * 0.45, f" {b.label}", fontsize=6, va="center", color="white",
                clip_on=True)  # fmt: skip
    for t, what in marks:
        ax.plot([t], [y + 0.6], marker="X" if what == "kill" else "v", color=COLOURS.get("kill"), markersize=7)
        ax.text(t, y + 0.92, what, fontsize=7, ha="center", va="top")
