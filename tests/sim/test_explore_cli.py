"""`chaosbed explore` (docs/scenario-format.md, "Explore"): exit codes 0/1/2, explore.json's shape, a clean stack
under a budget, determinism (the same seed and --schedules find the same first failure and the same minimal.toml, byte
for byte, whatever -j), and Ctrl-C keeping what was found.

The failing scenario is the catalogue's unicast3-duplicates-not-reacked with its flawed property (two members, runs of
a few milliseconds: it fails within a few dozen schedules); the clean one is tests/fixtures/explore-clean.toml.
--no-check leaves out the Spark check of each failure's run folder (test_explore_report.py has a run with it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from orchestration.cli.main import main
from orchestration.explore.case import load_base, run_case
from orchestration.explore.worker import SCRATCH_ENV

pytestmark = pytest.mark.sim

BUG = Path(__file__).resolve().parents[2] / "scenarios" / "bugs" / "unicast3-duplicates-not-reacked.toml"
FLAWED = ("--set", "cluster.properties.unicast3.ack_duplicates=false")
CLEAN = Path(__file__).resolve().parents[1] / "fixtures" / "explore-clean.toml"


def explore(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["explore", *map(str, args)], terminal_width=200)
    return result.exit_code, result.output


def test_a_clean_stack_reports_no_failure_and_the_schedules_tried(tmp_path: Path) -> None:
    code, out = explore(CLEAN, "--budget", "3s", "-j", "2", "--out", tmp_path / "x", "--no-check")
    assert code == 0, out
    doc = json.loads((tmp_path / "x" / "explore.json").read_text())
    assert doc["failures"] == [] and doc["schedules"] > 2 and doc["errors"] == 0
    assert f"{doc['schedules']:,} schedules, no failure found" in out
    assert (tmp_path / "x" / "index.html").is_file()


def test_a_timeout_that_leaves_faults_no_room_is_a_warning_naming_the_timeout(tmp_path: Path) -> None:
    short = tmp_path / "short.toml"
    short.write_text(CLEAN.read_text().replace('timeout = "30s"', 'timeout = "10s"'))  # 10 - 8 (views) - 3 s
    code, out = explore(short, "--schedules", "2", "-j", "1", "--out", tmp_path / "x", "--no-check")
    assert code in (0, 1), out
    assert "warning: faults are drawn in 0-0.2 s only" in out and 'timeout = "14s"' in out, out
    code, out = explore(CLEAN, "--schedules", "2", "-j", "1", "--out", tmp_path / "y", "--no-check")
    assert "warning" not in out, out


def test_failures_exit_1_with_explore_json_as_scenario_md_says(tmp_path: Path) -> None:
    code, out = explore(BUG, *FLAWED, "--schedules", "40", "-j", "2", "--out", tmp_path / "x", "--no-check")
    assert code == 1, out
    doc = json.loads((tmp_path / "x" / "explore.json").read_text())
    assert doc["schedules"] == 40 and doc["failures"]
    for f in doc["failures"]:
        assert {"seed", "violated", "minimal", "faults_before", "faults_after", "confirm"} <= set(f)
        assert isinstance(f["seed"], int) and f["violated"] and f["confirm"] is None
        assert f["faults_after"] <= f["faults_before"] and f["shrink"]["complete"]
        minimal = tmp_path / "x" / f["minimal"]
        assert minimal.name == "minimal.toml" and (minimal.parent / "run" / "history").is_dir()
        replay = run_case(load_base(minimal, keep_faults=True), tmp_path / "replay")
        assert list(replay.violated) == f["violated"], "minimal.toml replays the failure"
        assert f"replay: chaosbed run {minimal}" in out
    # one entry per distinct set of checks; later failures of the same checks are listed with it
    assert len({tuple(f["violated"]) for f in doc["failures"]}) == len(doc["failures"])


@pytest.mark.parametrize(
    "args, message",
    [
        (["no-such.toml"], "cannot read"),
        ([BUG, "--set", "cluster.stack=nope"], "cluster.stack"),
        ([BUG, "--nemesis", "split,nope"], "--nemesis"),
        ([BUG, "--soak", "--backend", "netns", "--stop-at-first"], "--stop-at-first is for a search"),
        ([BUG, "--soak"], "a soak runs on real members"),
        ([BUG, "--backend", "process"], "search with --backend netns"),
        ([BUG, "--interval", "5s"], "interval is for a soak"),
        ([BUG, "--violates", "fifo,nope"], "--violates"),
        ([BUG, "--budget", "soon"], "--budget"),
        ([BUG, "--schedules", "0"], "--schedules"),
        ([BUG, "--nemesis", "leave"], "none of the kinds leave"),
    ],
)
def test_bad_input_exits_2_naming_the_option(args: list[object], message: str, tmp_path: Path) -> None:
    code, out = explore(*args, "--out", tmp_path / "x")
    assert code == 2, out
    assert message in out


def test_the_same_seed_finds_the_same_failure_and_minimal_scenario_byte_for_byte(tmp_path: Path) -> None:
    docs, texts = [], []
    for jobs in ("1", "2"):
        out = tmp_path / f"j{jobs}"
        code, text = explore(BUG, *FLAWED, "--seed", "7", "--schedules", "60", "--stop-at-first", "-j", jobs,
                             "--out", out, "--no-check")  # fmt: skip
        assert code == 1, text
        doc = json.loads((out / "explore.json").read_text())
        (failure,) = doc["failures"]
        docs.append((failure["seed"], failure["index"], failure["violated"], failure["shrink"]))
        texts.append((out / failure["minimal"]).read_bytes())
    assert docs[0] == docs[1]
    assert texts[0] == texts[1]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "kill"])
def test_ctrl_c_keeps_what_was_found(tmp_path: Path, sig: signal.Signals) -> None:
    """A search with a long budget, interrupted (SIGINT, as Ctrl-C; SIGTERM, as `kill PID`) once it has found a
    failure: it exits 1 with explore.json and the failure's folder (minimal.toml replays it), and leaves no worker
    process behind."""
    out = tmp_path / "x"
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", SCRATCH_ENV: str(scratch)}
    command = [sys.executable, "-m", "orchestration", "explore", str(BUG), *FLAWED, "--budget", "10m", "-j", "2"]
    proc = subprocess.Popen(
        [*command, "--out", str(out), "--no-check"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    lines = []
    deadline = time.monotonic() + 120
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        lines.append(line)
        if "1 failure(s)" in line or not line:
            break
    assert "1 failure(s)" in lines[-1], "".join(lines)
    workers = psutil.Process(proc.pid).children(recursive=True)
    assert workers, "the search runs on worker processes"
    proc.send_signal(sig)
    rest, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1, "".join(lines) + rest
    assert "interrupted" in rest
    doc = json.loads((out / "explore.json").read_text())
    assert doc["interrupted"] is True and doc["failures"] and doc["schedules"] > 0
    minimal = out / doc["failures"][0]["minimal"]
    replay = run_case(load_base(minimal, keep_faults=True), tmp_path / "replay")
    assert list(replay.violated) == doc["failures"][0]["violated"]
    assert (out / "index.html").is_file()
    alive = psutil.wait_procs(workers, timeout=10)[1]
    assert not alive, f"worker processes left behind: {alive}"
    assert not list(scratch.iterdir()), "the workers' scratch folders are removed"
