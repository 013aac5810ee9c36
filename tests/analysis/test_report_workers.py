"""The reports of a folder of runs are drawn by one worker process per core: the same files as drawn in-process,
and a worker that fails leaves its share to be drawn in-process (nothing missing)."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from analysis import report_workers
from analysis.pipeline import analyze
from analysis.synth import write_run

pytestmark = pytest.mark.spark


def jobs_of(root: Path, out: Path) -> list[report_workers.Job]:
    analysis = analyze(root)
    out.mkdir()
    return [(out / f"{r.name}.html", r.name, analysis.results[r.name], analysis.stats[r.name]) for r in analysis.runs]


def test_workers_draw_the_same_reports_as_one_process(tmp_path: Path, spark: object, monkeypatch) -> None:
    root = tmp_path / "runs"
    for i in range(report_workers.PARALLEL_FROM):
        write_run(root / f"run-{i}", members=3, rounds=15, seed=i, inject=["gap"] if i % 3 == 0 else [])
    monkeypatch.setattr(report_workers.os, "cpu_count", lambda: 2)
    parallel = jobs_of(root, tmp_path / "parallel")
    report_workers.write_reports(parallel)
    serial = jobs_of(root, tmp_path / "serial")
    for job in serial:
        report_workers.write_report(job)
    for (p, *_), (s, *_) in zip(parallel, serial, strict=True):
        assert p.read_text() == s.read_text(), p.name


def test_a_failed_worker_share_is_drawn_here(tmp_path: Path, spark: object, monkeypatch) -> None:
    from analysis.report import render_run

    root = tmp_path / "runs"
    for i in range(report_workers.PARALLEL_FROM):
        write_run(root / f"run-{i}", members=2, rounds=10, seed=i, inject=["gap"] if i % 2 else [])
    monkeypatch.setattr(report_workers.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(report_workers.sys, "executable", "/bin/false")  # every worker exits 1 at once
    jobs = jobs_of(root, tmp_path / "out")
    report_workers.write_reports(jobs)
    for path, name, res, stats in jobs:
        page = path.read_text()
        assert page == render_run(name, res, stats), name  # the whole report, drawn here
        assert f"<h1>{name} " in page and all(f"<td>{m}</td>" in page for m in stats.members)
        assert len(re.findall(r'<img alt="plot" src="data:image/png;base64,', page)) == 2  # timeline and latency
        assert ("badge fail" in page) == bool(res.violations) == (name[-1] in "13579")
        assert all(html.escape(v.detail) in page for v in res.violations)
