"""A long run's report: one lane per member instead of one plot with a label per fault.

A run under a nemesis has a hundred faults or more; labelled one by one over the delivery plot they pile up into an
unreadable heap, and the fault table runs to pages. Past LANES_AFTER faults the report draws, per member, a lane on
the time axis with its views as bands (one colour per view id, so members in the same view share a colour and a
split shows as two colours), the faults that touch it as bars above (link faults of its links, discards, pauses)
and marks (kills, restarts, leaves), its delivery rate as a line and its violations as crosses; and it groups the
faults into rounds (a [[nemesis]] round, as faults.jsonl records it; else faults whose windows overlap, a kill with
its restart), numbered on the time axis and listed one row per round.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from analysis.membership import NEVER, Fault, RunInfo
from analysis.streams import PROGRESS_BUCKETS

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from analysis.results import RunResult

LANES_AFTER = 12  # faults (heals not counted) above which a run's report draws lanes and lists rounds
_ACTIONS = {"kill": ("x", "#c5221f"), "restart": ("^", "#137333"), "leave": ("v", "#8430ce")}
_BAR = {"cut": "#d93025", "loss": "#f29900", "shaping": "#1a73e8", "discard": "#8430ce", "pause": "#5f6368"}
_VIEW_COLOURS = ("#4285f4", "#34a853", "#fbbc04", "#ea4335", "#9334e6", "#00acc1", "#ff7043", "#9e9d24", "#5c6bc0")


@dataclass
class Round:
    """Faults whose windows overlap (a kill lasting until its member's restart), in time order."""

    number: int
    t: int
    end: int
    faults: list[Fault] = field(default_factory=list)

    def summary(self) -> str:
        """E.g. "partition A→E x4" or "split A,B | C,D; kill C, restart C"."""
        counts: dict[str, int] = {}
        for f in self.faults:
            counts[f.label] = counts.get(f.label, 0) + 1
        return "; ".join(label if n == 1 else f"{label} x{n}" for label, n in counts.items())


def faults_to_draw(info: RunInfo) -> list[Fault]:
    """The faults a report shows (heals end them and are not shown on their own)."""
    return [f for f in info.faults if f.kind != "heal"]


def grouped(info: RunInfo) -> bool:
    return len(faults_to_draw(info)) > LANES_AFTER


def _extent(f: Fault, faults: list[Fault]) -> int:
    """Where a fault's window ends for grouping: a kill lasts until its member's next restart."""
    if f.kind == "kill":
        member = f.record.get("member")
        later = [g.t for g in faults if g.kind == "restart" and g.record.get("member") == member and g.t >= f.t]
        return min(later, default=f.t)
    return f.end


def fault_rounds(info: RunInfo) -> list[Round]:
    """The run's faults in rounds, numbered in time order: a [[nemesis]] round's faults (faults.jsonl says which:
    `nemesis`, `round`) form one; the others join the round before them when they start before its windows end."""
    faults = sorted(faults_to_draw(info), key=lambda f: (f.t, f.kind))
    by_nemesis: dict[tuple[object, object], Round] = {}
    rounds: list[Round] = []
    for f in faults:
        end = _extent(f, faults)
        key = (f.record.get("nemesis"), f.record.get("round"))
        if key[1] is not None and key in by_nemesis:
            r = by_nemesis[key]
        elif key[1] is None and rounds and "round" not in rounds[-1].faults[-1].record and f.t <= rounds[-1].end:
            r = rounds[-1]
        else:
            r = Round(0, f.t, end)
            rounds.append(r)
            if key[1] is not None:
                by_nemesis[key] = r
        r.faults.append(f)
        r.end = max(r.end, end)
    rounds.sort(key=lambda r: r.t)
    for number, r in enumerate(rounds, 1):
        r.number = number
    return rounds


def touched(f: Fault, members: Iterable[str]) -> set[str]:
    """The members a fault acts on: a member action's member; a link fault's senders and receivers (a discard
    without them: everyone); a split's groups."""
    everyone = set(members)
    r = f.record
    if isinstance(r.get("member"), str):
        return {r["member"]}
    if isinstance(r.get("groups"), list):
        return {m for g in r["groups"] if isinstance(g, list) for m in g} & everyone
    ends = set()
    for key in ("from", "to"):
        value = r.get(key)
        ends |= {value} if isinstance(value, str) else set(value) if isinstance(value, list) else set()
    return (ends & everyone) or (everyone if f.kind == "discard" else set())


def _bar_colour(kind: str) -> str:
    if kind in ("partition", "split"):
        return _BAR["cut"]
    if kind == "loss":
        return _BAR["loss"]
    if kind in ("delay", "reorder", "duplicate"):
        return _BAR["shaping"]
    return _BAR.get(kind, "#5f6368")


def lanes_figure(res: RunResult) -> Figure:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    info = res.info
    members = info.members
    n = len(members)
    fig, ax = plt.subplots(figsize=(11, 0.85 * n + 1.6))
    span = max(1, info.t_max - info.t_min)
    colours = _view_colours(info)
    peak = max([float(np.max(c)) for c in res.progress.values() if len(c)] + [1.0])
    for i, m in enumerate(members):
        y = n - 1 - i  # the first member on top
        _draw_views(ax, info, m, y, colours)
        _draw_rate(ax, res, m, y, span, peak)
        _draw_faults(ax, info, m, y)
    bad = [(v.receiver, v.t) for v in res.violations if v.t is not None and v.receiver in members]
    if bad:
        ax.plot(
            [(t - info.t_min) / 1e9 for _, t in bad],
            [n - 1 - members.index(r) + 0.5 for r, _ in bad],
            "x",
            color="#c5221f",
            ms=8,
            mew=2,
            zorder=5,
        )
    _draw_rounds(ax, info, n)
    ax.set_xlim(0, span / 1e9)
    ax.set_ylim(0, n + 0.45)
    ax.set_yticks([n - 1 - i + 0.5 for i in range(n)], members)
    ax.set_xlabel("time since the first event (s)")
    ax.set_title(
        "Per member: views as bands (one colour per view), delivery rate, faults that touch it "
        "(red cut, orange loss, blue delay/reorder/duplicate, purple discard, grey pause; x kill, ▲ restart); "
        "rounds numbered on top",
        fontsize=9,
        wrap=True,
    )
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def _view_colours(info: RunInfo) -> dict[str, str]:
    """A colour per view id, in the order the views first appear."""
    ids = sorted({v.view_id for vs in info.all_views.values() for v in vs if v.view_id}, key=lambda vid: min(
        v.t for vs in info.all_views.values() for v in vs if v.view_id == vid
    ))  # fmt: skip
    return {vid: _VIEW_COLOURS[k % len(_VIEW_COLOURS)] for k, vid in enumerate(ids)}


def _draw_views(ax: Axes, info: RunInfo, m: str, y: int, colours: dict[str, str]) -> None:
    from matplotlib.patches import Rectangle

    views = info.all_views.get(m, [])
    for k, v in enumerate(views):
        x0 = (v.t - info.t_min) / 1e9
        x1 = ((views[k + 1].t if k + 1 < len(views) else info.t_max) - info.t_min) / 1e9
        colour = colours.get(v.view_id or "", "#dddddd")
        ax.add_patch(Rectangle((x0, y + 0.04), max(0.0, x1 - x0), 0.72, color=colour, alpha=0.16, lw=0))


def _draw_rate(ax: Axes, res: RunResult, m: str, y: int, span: int, peak: float) -> None:
    counts = res.progress.get(m)
    if counts is None or not len(counts):
        return
    xs = (np.arange(PROGRESS_BUCKETS) + 0.5) * span / PROGRESS_BUCKETS / 1e9
    ax.plot(xs, y + 0.08 + 0.62 * counts / peak, color="#202124", lw=0.9)


def _draw_faults(ax: Axes, info: RunInfo, m: str, y: int) -> None:
    t0, t_max = info.t_min, info.t_max
    for f in faults_to_draw(info):
        if m not in touched(f, info.members):
            continue
        x0 = (f.t - t0) / 1e9
        if f.kind in _ACTIONS:
            marker, colour = _ACTIONS[f.kind]
            ax.plot([x0], [y + 0.4], marker, color=colour, ms=7, mew=2, zorder=4)
            continue
        x1 = ((t_max if f.end == NEVER else min(f.end, t_max)) - t0) / 1e9
        ax.broken_barh([(x0, max(x1 - x0, 0.002 * (t_max - t0) / 1e9))], (y + 0.8, 0.15), color=_bar_colour(f.kind))


def _draw_rounds(ax: Axes, info: RunInfo, n: int) -> None:
    rounds = fault_rounds(info)
    every = max(1, len(rounds) // 40)  # at most ~40 numbers on the axis
    for r in rounds:
        x0 = (r.t - info.t_min) / 1e9
        x1 = (min(max(r.end, r.t), info.t_max) - info.t_min) / 1e9
        ax.axvspan(x0, max(x1, x0), ymin=n / (n + 0.45), color="#5f6368", alpha=0.25, lw=0)
        if (r.number - 1) % every == 0:
            ax.text(x0, n + 0.1, str(r.number), fontsize=7, color="#3c4043")
