"""`chaosbed run` mechanics without the checker: the run folder, determinism, and clear refusals."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from chaos.fault_table import QueueBypass
from orchestration.cli.output import warn_late
from orchestration.matrix.report import render
from orchestration.matrix.results import CellResult, MatrixResult
from orchestration.matrix.run import matrix_doc
from orchestration.matrix.spec import load_matrix
from orchestration.runner import OUTCOME_FILE, run, scenario_toml
from orchestration.scenario import ScenarioError, parse
from orchestration.sim.faults import SimFaultTable
from tests.clean_unicast2 import STACKS, assert_a_clean_unicast2_run_passes

pytestmark = pytest.mark.sim

SCENARIO = {
    "name": "runner-test",
    "seed": 3,
    "timeout": "120s",
    "cluster": {
        "members": 3,
        "stack": "unicast3",
        "properties": {"unicast3": {"xmit_interval": "100ms", "max_retransmit_time": "5s"}},
    },
    "workload": [{"kind": "unicast", "from": "*", "to": "*", "count": 200, "rate": 400}],
    "faults": [
        {"at": "0.2s", "kind": "partition", "from": ["A"], "to": ["B"], "one_way": True, "for": "1s"},
        {"at": "0.1s", "kind": "discard", "match": "UNICAST3.XMIT_REQ()", "from": "B", "to": "A", "count": 2},
        {"at": "0.3s", "kind": "loss", "from": "*", "to": "*", "probability": 0.2, "for": "0.5s"},
        {"at": "0.4s", "kind": "kill", "member": "C"},
    ],
}


def _events(out: Path, member: str) -> list[dict]:
    return [json.loads(line) for line in (out / "history" / f"{member}.jsonl").read_text().splitlines()]


def test_sim_run_folder_is_complete_and_replayable(tmp_path: Path) -> None:
    sc = parse(json.loads(json.dumps(SCENARIO)))
    first = run(sc, "sim", tmp_path / "a")
    assert not first.timed_out and first.extra_violations == [] and first.warnings == []
    out = first.out
    assert parse(tomllib.loads((out / "scenario.toml").read_text())).raw == sc.raw
    assert _events(out, "A")[-1]["event"] == "stop" and _events(out, "C")[-1]["event"] != "stop"
    start, *faults = [json.loads(line) for line in (out / "faults.jsonl").read_text().splitlines()]
    assert start == {"event": "start", "t": start["t"], "seed": 3, "backend": "sim"}
    assert [(f["kind"], f["at"], f["t"] - start["t"]) for f in faults] == [
        ("discard", "0.1s", 100_000_000),
        ("partition", "0.2s", 200_000_000),
        ("loss", "0.3s", 300_000_000),
        ("kill", "0.4s", 400_001_000),  # a member action right after its instant (1 µs), never late
        ("heal", "0.8s", 800_000_000),  # the loss's `for` ran out
        ("heal", "1.2s", 1_200_000_000),  # the partition's
    ]
    assert all(f["seed"] == 3 for f in faults)
    # A's and B's streams to each other are complete and in order despite the faults
    delivered = [e["msg_id"] for e in _events(out, "B") if e["event"] == "deliver" and e["sender"] == "A"]
    assert delivered == [f"A>B#{i}" for i in range(1, 201)]
    second = run(parse(json.loads(json.dumps(SCENARIO))), "sim", tmp_path / "b")
    for m in "ABC":
        assert _events(second.out, m) == _events(out, m)


def test_a_run_that_does_not_finish_is_a_timeout_violation(tmp_path: Path) -> None:
    raw = json.loads(json.dumps(SCENARIO))
    raw["timeout"] = "1s"
    outcome = run(parse(raw), "sim", tmp_path)
    assert outcome.timed_out
    assert [v["check"] for v in outcome.extra_violations] == ["timeout"]


def test_network_faults_are_refused_by_the_process_backend(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match=r"discard, loss, partition need a network of the cluster's own"):
        run(parse(json.loads(json.dumps(SCENARIO))), "process", tmp_path / "y")


def test_pause_and_resume_run_in_the_simulator(tmp_path: Path) -> None:
    raw = json.loads(json.dumps(SCENARIO))
    raw["faults"] = [{"at": "0.2s", "kind": "pause", "member": "B"}, {"at": "0.7s", "kind": "resume", "member": "B"}]
    outcome = run(parse(raw), "sim", tmp_path)
    assert not outcome.timed_out
    b = _events(outcome.out, "B")
    # B delivers nothing while paused, then catches up: everything A and C sent it, in order
    paused = [e for e in b if e["event"] == "deliver" and 200_000_000 < e["t"] - b[0]["t"] < 700_000_000]
    assert not paused
    delivered = [e["msg_id"] for e in b if e["event"] == "deliver" and e["sender"] == "A"]
    assert delivered == [f"A>B#{i}" for i in range(1, 201)]


QUIET_HEAL = {
    "name": "quiet-heal",
    "seed": 1,
    "timeout": "60s",
    "cluster": {
        "members": 4,
        "stack": "unicast3+nakack2",
        "properties": {
            "fd": {"interval": "0.5s", "timeout": "2s", "timeout_check_interval": "0.5s"},
            "merge": {"min_interval": "0.5s", "max_interval": "2s"},
            "gms": {"join_timeout": "1s", "discovery_timeout": "1s"},
        },
    },
    "workload": [{"kind": "multicast", "from": ["A"], "count": 10, "rate": 100}],
    "faults": [{"at": "1s", "kind": "split", "groups": [["A", "B"], ["C", "D"]], "for": "4s"}],
}


def _last_views(out: Path) -> dict[str, tuple[float, str, list[str]]]:
    """member -> (seconds after the schedule's start, view id, members) of its last view."""
    t0 = json.loads((out / "faults.jsonl").read_text().splitlines()[0])["t"]
    last = {}
    for m in "ABCD":
        v = [e for e in _events(out, m) if e["event"] == "view"][-1]
        last[m] = ((v["t"] - t0) / 1e9, v["view_id"], v["members"])
    return last


def test_a_quiet_run_waits_for_the_merge_after_the_last_heal(tmp_path: Path) -> None:
    """Every message of this run has arrived long before the split heals at 5 s, so the cluster is quiet at the heal:
    the run used to end there, before the two halves could merge, and the checker reported views_converge although
    its bound (10 s after the heal) had not run out. Now a quiet run waits, within that bound, for the views."""
    outcome = run(parse(json.loads(json.dumps(QUIET_HEAL))), "sim", tmp_path)
    assert not outcome.timed_out
    last = _last_views(outcome.out)
    assert len({(vid, tuple(ms)) for _, vid, ms in last.values()}) == 1, last
    assert all(sorted(ms) == ["A", "B", "C", "D"] and 5.0 < t < 15.0 for t, _, ms in last.values()), last


def test_views_that_never_agree_end_the_run_at_the_bound_without_a_timeout(tmp_path: Path) -> None:
    """A merge that cannot happen (every merge round times out before its answers arrive) is the checker's to
    report: the run waits for the views until the last heal plus the views_converge bound (3 s here), then ends as
    settled."""
    raw = json.loads(json.dumps(QUIET_HEAL))
    raw["cluster"]["properties"]["gms"]["merge_timeout"] = "1ms"
    raw["checks"] = {"views_converge": "3s"}
    outcome = run(parse(raw), "sim", tmp_path)
    assert not outcome.timed_out and outcome.extra_violations == []
    ends = [_events(outcome.out, m)[-1] for m in "ABCD"]
    t0 = json.loads((outcome.out / "faults.jsonl").read_text().splitlines()[0])["t"]
    assert all(e["event"] == "stop" and 8.0 <= (e["t"] - t0) / 1e9 < 8.5 for e in ends), ends
    assert len({vid for _, vid, _ in _last_views(outcome.out).values()}) == 2  # [A, B] and [C, D]


def test_history_check_waits_for_the_views_until_the_last_heal_plus_the_bound(tmp_path: Path) -> None:
    """The pytest plugin's history_check ends a test's run the same way: from its faults.jsonl."""
    from orchestration.pytest_plugin.check import views_wait_after

    f = tmp_path / "faults.jsonl"
    assert views_wait_after(f, {}, now=7) == 7 + 10 * 10**9  # no faults: from now, the default 10 s bound
    f.write_text(
        '{"event":"start","t":0,"seed":1,"backend":"sim"}\n'
        '{"t":100,"event":"fault","kind":"split","groups":[["A"],["B"]]}\n'
        '{"t":2000,"event":"fault","kind":"heal"}\n'
        '{"t":3000,"event":"fault","kind":"kill","member":"B"}\n'
    )
    assert views_wait_after(f, {"views_converge": 2.0}, now=9000) == 3000 + 2 * 10**9
    assert views_wait_after(f, {"views_converge": False}, now=9000) is None
    with f.open("a") as out:
        out.write('{"t":4000,"event":"fault","kind":"partition","from":["A"],"to":["B"]}\n')  # never healed
    assert views_wait_after(f, {"views_converge": 2.0}, now=9000) is None


def test_scenario_toml_round_trips() -> None:
    sc = parse(json.loads(json.dumps(SCENARIO)))
    assert parse(tomllib.loads(scenario_toml(sc))).raw == sc.raw


def test_datagrams_of_an_unknown_shape_are_said_by_the_run_and_kept_in_outcome_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a handler could not read (a shape its wire profile does not know; tests/foreign/test_jgroups5_discards.py
    counts a real one) passes untouched: the run says so and outcome.json keeps the count per member."""
    bypass = QueueBypass("B", queued=40, full_queue=0, overflowed=0, dropped=0, faults=["f1"], unknown_shapes=3)
    monkeypatch.setattr(
        SimFaultTable, "queue_bypass", lambda self: {"B": bypass, "C": QueueBypass("C", 9, 0, 0, 0, [])}
    )
    outcome = run(parse(json.loads(json.dumps(SCENARIO))), "sim", tmp_path / "run")
    (warning,) = outcome.warnings
    assert "could not read 3 datagrams of a shape its wire profile does not know" in warning and "f1" in warning
    doc = json.loads((outcome.out / OUTCOME_FILE).read_text())
    assert doc["warnings"] == [warning] and doc["unknown_shapes"] == {"B": 3}


def test_packets_that_escaped_the_rules_are_said_by_the_run_and_the_matrix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The simulator judges every message, so the bypass a netns handler reports (tests/netns/test_faults.py counts
    a real one) is given here: the run keeps it in outcome.json and says it; a matrix cell lists it."""
    bypass = QueueBypass("B", queued=5000, full_queue=1200, overflowed=3, dropped=0, faults=["f2", "f10"])
    monkeypatch.setattr(SimFaultTable, "queue_bypass", lambda self: {"B": bypass})
    outcome = run(parse(json.loads(json.dumps(SCENARIO))), "sim", tmp_path / "run")
    (warning,) = outcome.warnings
    assert warning == bypass.warning() and "1,200 of 5,000 packets (24.0%)" in warning and "(f2, f10;" in warning
    assert json.loads((outcome.out / OUTCOME_FILE).read_text())["warnings"] == [warning]
    warn_late(outcome)
    assert "WARNING: the NFQUEUE handler at B could not keep up" in " ".join(capsys.readouterr().out.split())

    matrix_file = tmp_path / "m.toml"
    matrix_file.write_text(f'name = "m"\nscenarios = ["{tmp_path / "run" / "scenario.toml"}"]\n[axes]\nseed = [1, 2]\n')
    late = {"kind": "kill", "member": "C", "at": "0.4s", "lag_ms": 31.5}
    matrix = load_matrix(matrix_file)
    results = [CellResult(matrix.cells[0], "ran", outcome={"warnings": [warning], "late": [late]}, checked=True),
               CellResult(matrix.cells[1], "ran", outcome={"warnings": []}, checked=True)]  # fmt: skip
    doc = matrix_doc(MatrixResult(matrix, tmp_path, results))
    assert doc["cells"][0]["warnings"] == ["kill C planned at 0.4s started 31.5 ms late (the machine was too busy)",
                                           warning]  # fmt: skip
    assert doc["cells"][1]["warnings"] == []
    report = render(MatrixResult(matrix, tmp_path, results))
    assert report.count("\u26a0</a>") == 1 and "Not as planned" in report and "1,200 of 5,000 packets" in report


@pytest.mark.parametrize("stack", STACKS)
def test_a_clean_unicast2_run_with_default_properties_passes(stack: str, tmp_path: Path) -> None:
    """Quiet is what the checks need (every message delivered, nothing missing), not UNICAST2's lazy purge."""
    assert_a_clean_unicast2_run_passes(stack, "sim", tmp_path / "run")
