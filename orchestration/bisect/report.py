"""bisect.json (its contract: SCENARIO.md, "Releases of a real system"; docs/bisect.md) and index.html of a bisect
folder: the releases considered, every probe with its rate and its runs, the boundary with the rates on both sides
(or null), whether it is sharp, and how the search ended."""

from __future__ import annotations

import html
import json
from pathlib import Path

from node.atomic import write_atomic
from orchestration.bisect.search import Probe, Search

FORMAT = 1


def bisect_doc(search: Search, *, file: Path, backend: str, violates: list[str], status: str) -> dict[str, object]:
    b = search.boundary
    return {
        "format": FORMAT,
        "file": str(file),
        "backend": backend,
        "violates": violates or None,
        "runs_per_probe": search.runs,
        "versions": list(search.versions),
        "probes": [search.probes[v].as_json() for v in search.order],
        "boundary": None if b is None else {"before": b[0].as_json(), "after": b[1].as_json()},
        "sharp": search.sharp if b is not None else None,
        "bracket": {"before": search.versions[search.lo], "after": search.versions[search.hi]},
        "status": status,  # "found" | "none" | "interrupted" | "error: ..."
        "summary": search.summary(),
    }


def write(out: Path, doc: dict[str, object]) -> None:
    write_atomic(out / "bisect.json", json.dumps(doc, indent=2) + "\n")
    write_atomic(out / "index.html", render(doc))


_CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;padding:0 1.5em;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:.5em 0;font-size:.9em} td,th{border:1px solid #ddd;padding:4px 8px}
th{background:#f4f4f4} .fail{background:#fde7e6} .pass{background:#e6f4ea} .flaky{background:#fff4d6}
.untried{color:#999} .edge{font-weight:bold} code{background:#f4f4f4;padding:1px 4px;border-radius:3px}
"""


def _e(x: object) -> str:
    return html.escape("" if x is None else str(x))


def render(doc: dict[str, object]) -> str:
    """One self-contained page: the summary, then every release of the range with its probe (or untried)."""
    probes = {str(p["version"]): p for p in doc["probes"]}  # type: ignore[attr-defined]
    boundary = doc.get("boundary") or {}
    edges = {boundary[k]["version"] for k in ("before", "after")} if boundary else set()  # type: ignore[index]
    rows = []
    for v in doc["versions"]:  # type: ignore[attr-defined]
        p = probes.get(v)
        edge = " edge" if v in edges else ""
        if p is None:
            rows.append(f'<tr class="untried"><td>{_e(v)}</td><td colspan="4">not probed</td></tr>')
            continue
        dirs = p["runs_dir"] if isinstance(p["runs_dir"], list) else [p["runs_dir"]]
        links = " ".join(f'<a href="{_e(d)}/1/report.html">{_e(d)}</a>' for d in dirs)
        rows.append(
            f'<tr class="{_e(p["outcome"])}{edge}"><td>{_e(v)}</td><td>{p["failed"]}/{p["runs"]}</td>'
            f"<td>{float(p['rate']):.2f}</td><td>{_e(p['outcome'])}</td><td>{links}</td></tr>"
        )
    return (
        f"<!doctype html><html><head><meta charset=utf-8><title>bisect {_e(Path(str(doc['file'])).name)}</title>"
        f"<style>{_CSS}</style></head><body><h1>chaosbed bisect {_e(Path(str(doc['file'])).name)}</h1>"
        f"<p><b>{_e(doc['summary'])}</b></p><p>status: {_e(doc['status'])}; backend {_e(doc['backend'])}; "
        f"{doc['runs_per_probe']} runs per probe (more for a flaky one); a run fails when it violates: "
        f"<code>{_e(', '.join(doc['violates'] or []) or 'any check')}</code></p>"  # type: ignore[arg-type]
        "<table><tr><th>release</th><th>failed</th><th>rate</th><th>outcome</th><th>runs</th></tr>"
        + "".join(rows)
        + "</table></body></html>\n"
    )


def probe_line(p: Probe) -> str:
    """A progress line: "5.4.6: 5/5 fail (rate 1.00)"."""
    return f"{p.describe()} (rate {p.rate:.2f})"
