"""index.html of an explore folder: what was searched (schedules tried, time, errors), then each failure: the checks
it violated, how it was found and shrunk, the minimal scenario itself, the timeline of its minimal run (one lane per
member: views, deliveries, the faults that touch it; timeline.py) and the command that replays it. One
self-contained file: plots are PNGs embedded as base64, as in the run reports."""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from node.atomic import write_atomic
from orchestration.explore.reliable import RELIABLE, reliable_line
from orchestration.explore.result import ExploreDoc, FailureDoc
from orchestration.explore.timeline import figure, read_lanes

if TYPE_CHECKING:
    from matplotlib.figure import Figure

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;max-width:1200px;color:#222}
h1{font-size:1.5em} h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.9em} td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}
th{background:#f4f4f4} pre{background:#f8f8f8;border:1px solid #eee;padding:.6em;font-size:.8em;white-space:pre-wrap}
.fail{color:#c5221f;font-weight:bold} .ok{color:#137333;font-weight:bold} .muted{color:#666;font-size:.9em}
code{background:#f1f3f4;padding:0 .3em} img{max-width:100%;border:1px solid #eee}
"""


def _e(x: object) -> str:
    return html.escape("" if x is None else str(x))


def _png(fig: Figure) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return f'<img alt="timeline" src="data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}">'


def _rows(rows: list[tuple[str, str]]) -> str:
    return "<table>" + "".join(f"<tr><th>{_e(k)}</th><td>{v}</td></tr>" for k, v in rows) + "</table>"


def _summary(doc: ExploreDoc) -> str:
    rate = doc["schedules"] / doc["seconds"] if doc["seconds"] else 0.0
    n = len(doc["failures"])
    verdict = f'<span class="fail">{n} failure(s)</span>' if n else '<span class="ok">no failure found</span>'
    rows = [
        ("scenario", f"<code>{_e(doc['scenario'])}</code>"),
        ("command", f"<code>{_e(doc['command'])}</code>"),
        ("schedules tried", f"{doc['schedules']:,} in {doc['seconds']:.1f} s ({rate:.1f}/s)"),
        ("result", verdict + (" (interrupted)" if doc["interrupted"] else "")),
        ("schedules that could not run", str(doc["errors"])),
    ]
    if doc.get("other_failures"):
        rows.append(("failures with other checks (left aside)", str(doc["other_failures"])))
    return _rows(rows)


def _failure(root: Path, k: int, f: FailureDoc) -> str:
    minimal = root / f["minimal"]
    run = root / f["run"]
    parts = [f'<h2 id="failure-{k}">Failure {k}: <span class="fail">{_e(", ".join(f["violated"]))}</span></h2>']
    confirm = f.get("confirm")
    confirm_text = (
        f"reproduced {confirm['reproduced']}/{confirm['runs']} on {_e(confirm['backend'])}"
        + _rate_text(confirm)
        + (" — simulator only: a possible parity bug" if confirm.get("parity") else "")
        + (" — real members only, the simulator passes it: a parity gap" if confirm.get("parity_gap") else "")
        if confirm
        else "not asked (--confirm netns|docker)"
    )
    report = run / "report.html"
    rows = [
        ("schedule seed", f"{f['seed']} (schedule #{f['index'] + 1}, found after {f['found_after_s']:.1f} s)"),
        ("faults", f"{f['faults_before']} as found, {f['faults_after']} after shrinking "
         f"({len(f['shrink']['steps'])} steps in {f['shrink']['runs']} runs)"),
        ("normal check", _e(", ".join(f["checked"]) or "passed") if f["checked"] is not None else _e(f["check_error"])),
        ("confirmation", _e(confirm_text) if not confirm else confirm_text),
        ("replay", f"<code>{_e(f['replay'])}</code>"),
        ("files", f'<a href="{_e(f["minimal"])}">minimal.toml</a>'
         + (f' · <a href="{_e(f["run"])}/report.html">run report</a>' if report.exists() else "")),
    ]  # fmt: skip
    reliable = confirm.get("reliable") if confirm else None
    if reliable is not None:
        text = _e(reliable_line(reliable, len(f["shrink"]["steps"])))
        if reliable["file"]:
            text += f' · <a href="{_e(Path(f["minimal"]).with_name(RELIABLE).as_posix())}">{RELIABLE}</a>'
        rows.append(("flaky: earlier forms", text))
    if f.get("same_checks"):
        rows.append(("also failing this way", ", ".join(f"seed {s}" for s in f["same_checks"][:20])))
    parts.append(_rows(rows))
    if f.get("details"):
        parts.append("<p>The minimal run's first violations:</p><pre>" + _e("\n".join(f["details"])) + "</pre>")
    if (run / "history").is_dir():
        parts.append("<h3>Timeline of the minimal run</h3>" + _png(figure(read_lanes(run), f"failure {k}")))
    if minimal.exists():
        parts.append("<h3>minimal.toml</h3><pre>" + _e(minimal.read_text()) + "</pre>")
    if (minimal.parent / RELIABLE).exists():
        parts.append(f"<h3>{RELIABLE}</h3><pre>" + _e((minimal.parent / RELIABLE).read_text()) + "</pre>")
    return "\n".join(parts)


def render_index(root: Path, doc: ExploreDoc) -> str:
    title = f"chaosbed explore {Path(doc['scenario']).name}"
    body = [f"<h1>{_e(title)}</h1>", _summary(doc)]
    if doc["failures"]:
        body.append("<ul>" + "".join(
            f'<li><a href="#failure-{k}">Failure {k}</a>: {_e(", ".join(f["violated"]))} '
            f"({f['faults_after']} fault(s))</li>"
            for k, f in enumerate(doc["failures"], 1)
        ) + "</ul>")  # fmt: skip
    for k, f in enumerate(doc["failures"], 1):
        body.append(_failure(root, k, f))
    if doc.get("error_samples"):
        body.append("<h2>Schedules that could not run</h2><pre>" + _e("\n".join(doc["error_samples"])) + "</pre>")
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title><style>{CSS}</style>'
        f"</head><body>{''.join(body)}</body></html>\n"
    )


def write_index(root: Path, doc: ExploreDoc) -> Path:
    path = root / "index.html"
    write_atomic(path, render_index(root, doc))
    return path


def _rate_text(confirm: Mapping[str, object]) -> str:
    """`: confirmed (90%)` or `: flaky (40%)` where the confirmation has a rate (real members)."""
    rate = confirm.get("rate")
    if not isinstance(rate, int | float):
        return ""
    if not rate:
        return ": not reproduced"
    return f": {'confirmed' if confirm.get('confirmed') else 'flaky'} ({rate:.0%})"
