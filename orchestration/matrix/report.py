"""The matrix's report.html: a grid of cells (rows x columns chosen from the axes), each linking to its run's
report, then the replay command of every cell that failed or could not run. One self-contained file, no scripts."""

from __future__ import annotations

import html

from orchestration.matrix.results import CellResult, MatrixResult
from orchestration.toml_text import toml_value

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;padding:0 1.5em;max-width:1300px;
 color:#222}
h1{font-size:1.5em;margin-bottom:.2em} h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0;font-size:.9em}
td,th{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f4} th.row{background:#fafafa;font-weight:normal}
.badge{display:inline-block;padding:.2em .7em;border-radius:4px;color:#fff;font-weight:bold}
.badge.ok{background:#137333} .badge.fail{background:#c5221f}
a.cell{display:inline-block;margin:2px;padding:3px 7px;border-radius:4px;text-decoration:none;color:#fff;
 font-size:.85em;font-weight:bold}
a.cell.pass{background:#137333} a.cell.xfail{background:#7a5c00} a.cell.bad{background:#c5221f}
a.cell.none{background:#888}
.muted{color:#666;font-size:.9em} code{background:#f4f4f4;padding:1px 4px;border-radius:3px;font-size:.85em}
ul.replay li{margin:.4em 0}
"""


def _e(x: object) -> str:
    return html.escape("" if x is None else str(x))


def _value(v: object) -> str:
    return v if isinstance(v, str) else toml_value(v)


def _combo(r: CellResult, axes: list[str], plain: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """The cell's values of `axes` as the grid's headers show them: each axis's label (a system with its stack), or
    its plain value for the axes in `plain`."""
    return tuple(_value(r.cell.axis_value(a) if a in plain else r.cell.axis_label(a)) for a in axes)


def _plain_axes(results: list[CellResult], axes: list[str]) -> frozenset[str]:
    """The axes whose one value has several labels across the cells (a `cluster.system` of JGroups 5 whose stack each
    scenario chooses): the grid heads them with the value, one column per value, and each badge names its label."""
    plain = set()
    for a in axes:
        labels: dict[str, set[str]] = {}
        for r in results:
            labels.setdefault(_value(r.cell.axis_value(a)), set()).add(_value(r.cell.axis_label(a)))
        if any(len(v) > 1 for v in labels.values()):
            plain.add(a)
    return frozenset(plain)


def _badge(r: CellResult, shown: list[str], axes: list[str], plain: frozenset[str] = frozenset()) -> str:
    """One cell: green = passed as expected, amber = failed as expected (a bug reproduced), red = not as expected.
    Its text names the axes the grid does not show (e.g. the seed); the tooltip has everything."""
    c = r.cell
    rest = [f"{a.removeprefix('cluster.properties.')}={_value(c.axis_label(a))}" for a in axes if a not in shown]
    rest += [_value(c.axis_label(a)) for a in shown if a in plain]  # the system's stack where the header omits it
    if r.status != "ran" or not r.checked:
        names = {"error": "ERROR", "interrupted": "STOPPED", "not run": "NOT RUN", "skipped": "SKIPPED"}
        text, cls = names.get(r.status, "?"), "none"
        if r.status == "error":
            cls = "bad"
    elif r.passed:
        text, cls = "PASS", "pass" if r.ok else "bad"
    else:
        text, cls = f"FAIL: {', '.join(r.violated)}", "xfail" if r.ok else "bad"
    settings = " ".join(f"{k}={_value(v)}" for k, v in c.settings.items())
    title = f"{c.id} {c.scenario_name} {c.label} {c.system} {c.backend} seed {c.seed} {settings}; expected " + (
        c.expect.describe() + (f"; skipped: {r.error}" if r.status == "skipped" else "")
    )
    href = f' href="{_e(c.folder)}/report.html"' if r.status == "ran" and r.checked else ""
    if r.warnings:  # the run did not go as planned: marked, and said in the tooltip and below the grid
        text += " \u26a0"
        title += "; NOT AS PLANNED: " + " / ".join(r.warnings)
    label = f"{text} <span style='font-weight:normal'>{_e(' '.join(rest))}</span>" if rest else text
    return f'<a class="cell {cls}"{href} title="{_e(title)}">{label}</a>'


def grid(result: MatrixResult) -> str:
    rows_axes, col_axes = result.matrix.rows, result.matrix.columns
    plain = _plain_axes(result.results, rows_axes + col_axes)
    row_keys: list[tuple[str, ...]] = []
    col_keys: list[tuple[str, ...]] = []
    for r in result.results:
        rk, ck = _combo(r, rows_axes, plain), _combo(r, col_axes, plain)
        if rk not in row_keys:
            row_keys.append(rk)
        if ck not in col_keys:
            col_keys.append(ck)
    shown = rows_axes + col_axes
    varying = [a for a, values in result.matrix.axes.items() if len(values) > 1]
    head = "".join(f"<th>{_e(a)}</th>" for a in rows_axes) or "<th></th>"
    head += "".join(f"<th>{_e(' / '.join(ck)) or 'result'}</th>" for ck in col_keys)
    caption = (
        f"<caption class='muted' style='text-align:left'>rows: {_e(', '.join(rows_axes) or '-')}; "
        f"columns: {_e(', '.join(col_axes) or '-')}</caption>"
    )
    body = []
    for rk in row_keys:
        cells = "".join(f"<th class='row'>{_e(v)}</th>" for v in rk) or "<th class='row'></th>"
        for ck in col_keys:
            here = [r for r in result.results if _combo(r, rows_axes, plain) == rk and _combo(r, col_axes, plain) == ck]
            cells += "<td>" + "".join(_badge(r, shown, varying, plain) for r in here) + "</td>"
        body.append(f"<tr>{cells}</tr>")
    return f"<table>{caption}<tr>{head}</tr>{''.join(body)}</table>"


def render(result: MatrixResult) -> str:
    res = result.results
    ok = result.ok
    badge = '<span class="badge ok">OK</span>' if ok else '<span class="badge fail">FAIL</span>'
    ran = [r for r in res if r.status == "ran" and r.checked]
    counts = (
        f"{len(res)} cells: {sum(r.passed for r in ran)} passed, {sum(not r.passed for r in ran)} failed "
        f"({sum(r.ok and not r.passed for r in ran)} as expected), "
        f"{sum(r.status == 'error' for r in res)} could not run, "
        f"{sum(r.status in ('interrupted', 'not run') for r in res)} not finished, "
        f"{sum(r.status == 'skipped' for r in res)} skipped; "
        f"{sum(r.ok for r in res if r.status != 'skipped')} of {sum(r.status != 'skipped' for r in res)} as expected"
    )
    timing = (
        f"runs {result.run_seconds:.1f} s; one check pass over every run: {result.check_seconds:.1f} s, "
        f"{result.events:,} events"
    )
    parts = [
        f"<h1>{_e(result.matrix.name)} {badge}</h1>",
        f"<p>{_e(counts)}</p><p class='muted'>{_e(timing)}</p>",
    ]
    if result.interrupted:
        parts.append("<p class='badge fail'>interrupted (Ctrl-C): unfinished cells were not checked</p>")
    if result.check_error:
        parts.append(f"<p class='badge fail'>the checker could not run: {_e(result.check_error)}</p>")
    unplanned = [(r, w) for r in res for w in r.warnings]
    unplanned_note = " \u26a0: the run did not go as planned (listed below)." if unplanned else ""
    checks = (
        " <a href='checks.html'>Every run's checks in one table</a>." if (result.out / "checks.html").exists() else ""
    )
    parts.append(
        "<p class='muted'>green: passed; amber: failed as expected (a known bug reproduced); red: not as expected "
        f"(or could not run); grey: not finished.{unplanned_note} A cell links to its run's report.{checks}</p>"
    )
    parts.append(grid(result))
    failed = [r for r in res if (r.checked and not r.passed) or r.status == "error" or not r.ok]
    skipped = [r for r in res if r.status == "skipped"]
    if failed:
        items = []
        for r in failed:
            c = r.cell
            why = ", ".join(r.violated) if r.violated else (r.error or r.status)
            link = f' <a href="{_e(c.folder)}/report.html">report</a>' if r.checked else ""
            note = "" if r.ok else f" <b>(expected {_e(c.expect.describe())})</b>"
            items.append(
                f"<li>{_e(c.id)} {_e(c.scenario_name)} {_e(c.label)} {_e(c.system)} on {_e(c.backend)} seed {c.seed}: "
                f"{_e(why)}{note}{link}<br><code>{_e(c.replay())}</code></li>"
            )
        parts.append(f"<h2>Failed cells: replay</h2><ul class='replay'>{''.join(items)}</ul>")
    if skipped:
        listed = "".join(
            f"<li>{_e(r.cell.id)} {_e(r.cell.scenario_name)} {_e(r.cell.label)} {_e(r.cell.system)} on "
            f"{_e(r.cell.backend)}: {_e(r.error)}</li>"
            for r in skipped
        )
        parts.append(f"<h2>Skipped cells (not counted)</h2><ul class='replay'>{listed}</ul>")
    if unplanned:
        names = (" ".join(filter(None, (r.cell.id, r.cell.scenario_name, r.cell.label))) for r, _ in unplanned)
        listed = "".join(f"<li>{_e(name)}: {_e(w)}</li>" for name, (_, w) in zip(names, unplanned, strict=True))
        parts.append(f"<h2>Not as planned (\u26a0)</h2><ul class='replay'>{listed}</ul>")
    title = _e(result.matrix.name)
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title>"
        f"<style>{_CSS}</style></head><body>{''.join(parts)}</body></html>\n"
    )
