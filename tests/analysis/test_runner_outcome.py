"""The runner's own violations (a `timeout`) live in the run folder's outcome.json: both checkers report them with
the histories' violations, so re-checking a finished run gives the verdict the run gave; a damaged file is exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.command import check
from analysis.reference import check_path
from analysis.synth import write_run

TIMEOUT = {
    "check": "timeout",
    "sender": None,
    "receiver": None,
    "conn_id": None,
    "seqno": None,
    "msg_id": None,
    "detail": "the run did not finish (all sent and quiet) within the scenario's timeout of 10s",
}


def test_the_reference_checker_reports_the_runners_timeout(tmp_path: Path) -> None:
    write_run(tmp_path / "run", members=3, rounds=10)
    assert [v.check for v in check_path(tmp_path / "run")["run"].violations] == []
    (tmp_path / "run" / "outcome.json").write_text(json.dumps({"violations": [TIMEOUT], "timed_out": True}))
    (result,) = check_path(tmp_path / "run").values()
    assert [(v.check, v.detail, v.run) for v in result.violations] == [("timeout", TIMEOUT["detail"], "run")]


@pytest.mark.spark
def test_chaosbed_check_reports_it_and_a_damaged_outcome_is_unreadable(tmp_path: Path, spark: object) -> None:
    write_run(tmp_path / "run", members=3, rounds=10, inject=["gap"])
    (tmp_path / "run" / "outcome.json").write_text(json.dumps({"violations": [TIMEOUT], "timed_out": True}))
    assert check(tmp_path / "run") == 1
    doc = json.loads((tmp_path / "run" / "verdict.json").read_text())
    assert [v["check"] for v in doc["violations"]] == ["fifo", "timeout"]
    assert doc["stats"]["violations"] == {"fifo": 1, "timeout": 1}
    (tmp_path / "run" / "outcome.json").write_text('{"violations": "late"}')
    assert check(tmp_path / "run") == 2
