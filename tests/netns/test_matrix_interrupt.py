"""Ctrl-C during `chaosbed matrix` on netns: every running cell takes its cluster down (also when Ctrl-C comes twice,
and the matrix sends its cells one more), the matrix keeps and checks what finished, sets the unfinished run aside,
and the machine is left as it was (namespaces, processes, state)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from analysis.spark import resolve
from orchestration.backends.netns import list_namespaces
from tests.clusters import chaos_tests

pytestmark = [
    pytest.mark.netns,
    pytest.mark.spark,
    pytest.mark.slow,
    *chaos_tests(),
]

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def processes_mentioning(text: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def wait_for(cond, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_ctrl_c_takes_every_cluster_down_and_keeps_what_finished(tmp_path: Path) -> None:
    matrix = tmp_path / "m.toml"
    matrix.write_text(
        f'name = "stopped"\nscenarios = ["{SCENARIOS}/flapping-link.toml"]\n[axes]\nseed = [1, 2, 3]\n'
        'backend = ["netns"]\n'
    )
    out = tmp_path / "out"
    # a state root of its own: the labels of the matrix's clusters are the folders that appear in it (other tests,
    # e.g. pytest-xdist workers, create and remove namespaces of their own meanwhile)
    state = tmp_path / "state"
    labels: set[str] = set()

    def seen(cond: Callable[[], bool]) -> Callable[[], bool]:
        def check() -> bool:
            labels.update(p.name for p in state.iterdir()) if state.is_dir() else None
            return cond()

        return check

    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestration", "matrix", str(matrix), "-j", "1", "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # the check uses this session's Spark (the suite's warm service, or local): never a service of its own root
        env={**os.environ, "CHAOSBED_STATE": str(state), "CHAOSBED_SPARK": resolve(None)},
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )
    try:
        wait_for(seen(lambda: any(out.glob("c001-*/outcome.json"))), 120, "the first cell to finish")
        wait_for(seen(lambda: any(out.glob("c002-*/history/*.jsonl"))), 60, "the second cell's cluster to run")
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: SIGINT to the whole group
        os.killpg(proc.pid, signal.SIGINT)  # an impatient second Ctrl-C must not cut the clean-up short
        output, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 2, output
    assert "interrupted" in output and "verdict: INCOMPLETE" in output
    doc = json.loads((out / "matrix.json").read_text())
    status = [c["status"] for c in doc["cells"]]
    assert status == ["ran", "interrupted", "not run"], status
    done = doc["cells"][0]
    assert done["ok"] is True and done["passed"] is True, "the finished cell was checked"
    assert (out / done["run"] / "verdict.json").is_file()
    assert doc["interrupted"] is True and doc["ok"] is False
    aside = [p.name for p in out.iterdir() if p.name.startswith(".unfinished-")]
    assert aside and aside[0].startswith(".unfinished-c002-"), aside
    # nothing left: no namespace, no member or cell process, no cluster state of this matrix
    assert len(labels) == 2, labels  # both cells' clusters were seen
    assert not [ns for ns in list_namespaces() if ns.split("-", 1)[0] in labels]
    assert processes_mentioning(str(out)) == []
    assert not any(state.iterdir())
