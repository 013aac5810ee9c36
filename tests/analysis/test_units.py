"""Small pieces without Spark: durations as InputError, [checks], verdict order, reading odd histories, liveness."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.cache import Group
from analysis.config import CheckConfig, InputError, parse_duration, read_checks
from analysis.ingest import JsonReader, read_history_file, split_groups
from analysis.membership import NEVER, build_run_info, fault_intervals, read_faults, read_schedule_start
from analysis.schema import discover_runs
from analysis.spark_ingest import plan_files
from analysis.spark_job import MIN_ROWS_PER_TASK, plan_tasks
from analysis.verdict import Violation, sort_violations, verdict_doc
from tests.analysis.helpers import write_lines


def test_durations_are_node_units_with_input_errors() -> None:
    """analysis.config.parse_duration is node/units.py's parser (every form: tests/unit/test_durations.py) raising
    InputError (exit code 2) with the field it came from."""
    assert parse_duration("250 ms") == pytest.approx(0.25)
    for bad in ("ten seconds", True, "", "-1s"):
        with pytest.raises(InputError, match=r"^checks\.views_converge: "):
            parse_duration(bad, "checks.views_converge")


def test_checks_from_scenario(tmp_path: Path) -> None:
    assert read_checks(tmp_path / "absent.toml") == CheckConfig()
    f = tmp_path / "scenario.toml"
    f.write_text('name = "x"\n[checks]\nfifo = false\nviews_converge = "2s"\n')
    conf = read_checks(f)
    assert (conf.fifo, conf.exactly_once, conf.views_bound) == (False, True, 2.0)
    assert read_checks(f, bound_views=0.5).views_bound == 0.5
    f.write_text("[checks]\nviews_converge = false\n")
    assert read_checks(f).enabled("views_converge") is False
    f.write_text('[checks]\nfifo = "yes"\n')
    with pytest.raises(InputError, match="fifo"):
        read_checks(f)


def test_violations_sort_stably_and_serialise_conn_ids() -> None:
    vs = [
        Violation("complete", "A", "B", "10", 3, "m3", "x", "r1"),
        Violation("fifo", "A", "B", "2", 7, "m7", "x", "r1"),
        Violation("fifo", "A", "B", "10", 1, "m1", "x", "r1"),
        Violation("views_converge", None, "C", None, None, None, "x", "r1"),
        Violation("fifo", "A", "B", "x", 1, "m1", "x", "r0"),
    ]
    order = [(v.run, v.check, v.conn_id, v.seqno) for v in sort_violations(vs)]
    assert order == [
        ("r0", "fifo", "x", 1),
        ("r1", "fifo", "2", 7),
        ("r1", "fifo", "10", 1),
        ("r1", "complete", "10", 3),
        ("r1", "views_converge", None, None),
    ]
    doc = verdict_doc(vs, {})
    assert doc["ok"] is False
    assert [v["conn_id"] for v in doc["violations"]] == ["x", 2, 10, 10, None]
    assert verdict_doc([], {"a": 1}) == {"ok": True, "violations": [], "stats": {"a": 1}}


def test_numbers_and_strings_in_text_fields(tmp_path: Path) -> None:
    """conn_id and view_id may be JSON numbers or strings, even mixed in one file; unknown fields are ignored."""
    f = tmp_path / "A.jsonl"
    write_lines(
        f,
        [
            '{"t":1,"member":"A","event":"view","view_id":7,"members":["A","B"],"merge":false,"extra":{"x":1}}',
            '{"t":2,"member":"A","event":"send","kind":"unicast","sender":"A","dest":"B","conn_id":3,"seqno":1,'
            '"msg_id":"m1","size":10}',
            '{"t":3,"member":"A","event":"send","kind":"unicast","sender":"A","dest":"B","conn_id":"c-4","seqno":1,'
            '"msg_id":"m2","size":10}',
        ],
    )
    tbl, bad = read_history_file(f, "r", "history/A.jsonl")
    assert bad == []
    assert tbl["conn_id"].to_pylist() == [None, "3", "c-4"]
    assert tbl["view_id"].to_pylist() == ["7", None, None]
    assert tbl["pos"].to_pylist() == [0, 1, 2]
    assert tbl["run"].to_pylist() == ["r", "r", "r"]


def test_cut_and_damaged_lines_are_reported_with_neighbours(tmp_path: Path) -> None:
    f = tmp_path / "B.jsonl"
    write_lines(
        f,
        ['{"t":1,"member":"B","event":"stop"}', '{"t":2,"mem', "", '{"t":5,"member":"B","event":"stop"}', '{"t":9,'],
        newline_at_end=False,
    )
    tbl, bad = read_history_file(f, "r", "history/B.jsonl")
    assert tbl["t"].to_pylist() == [1, 5]
    assert [(b.line, b.last, b.prev_t, b.next_t) for b in bad] == [(2, False, 1, 5), (5, True, 5, None)]


@pytest.mark.parametrize("use_duckdb", [True, False], ids=["duckdb", "pyarrow"])
def test_both_json_readers_read_alike_and_are_strict_about_required_fields(tmp_path: Path, use_duckdb: bool) -> None:
    """DuckDB's reader (the default) and pyarrow's give the same table, and neither turns a required field of the
    wrong JSON type into a value (DuckDB alone would read "t": "5", 1.5 or true as a number, "member": 5 as "5"):
    such a line goes to the careful reader, which reports it."""
    good = [
        '{"t":1,"member":"A","event":"view","view_id":7,"members":["A","B"],"merge":false,"extra":{"x":1}}',
        '{"t":2,"member":"A","event":"send","kind":"unicast","sender":"A","dest":"B","dest_address":"B/2",'
        '"conn_id":3,"seqno":1,"msg_id":"m1","size":10}',
        '{"t":3,"member":"A","event":"deliver","kind":"multicast","sender":"B","seqno":4,"msg_id":"é😀"}',
    ]
    reader = JsonReader(use_duckdb=use_duckdb)
    f = tmp_path / "A.jsonl"
    write_lines(f, good)
    tbl, bad = read_history_file(f, "r", "history/A.jsonl", reader)
    assert bad == []
    assert tbl.to_pylist() == read_history_file(f, "r", "history/A.jsonl", JsonReader(use_duckdb=False))[0].to_pylist()
    assert tbl["members"].to_pylist() == [["A", "B"], None, None]
    for line in (
        '{"t":"4","member":"A","event":"stop"}',
        '{"t":4.5,"member":"A","event":"stop"}',
        '{"t":true,"member":"A","event":"stop"}',
        '{"t":4,"member":5,"event":"stop"}',
        '{"t":4,"member":"A","event":["stop"]}',
    ):
        write_lines(f, [*good, line, good[0]])
        tbl, bad = read_history_file(f, "r", "history/A.jsonl", reader)
        assert tbl.num_rows == 4 and [b.line for b in bad] == [4], line
    reader.close()


def test_split_groups_keeps_file_order_within_each_group() -> None:
    import pyarrow as pa

    tbl = pa.table({"key": ["B", None, "A", "B", "A", None], "pos": [0, 1, 2, 3, 4, 5]})
    parts = {k: p["pos"].to_pylist() for k, p in split_groups(tbl)}
    assert parts == {"B": [0, 3], "A": [2, 4], None: [1, 5]}
    assert [k for k, _ in split_groups(tbl.slice(0, 1))] == ["B"]


def test_tasks_grow_with_the_rows_up_to_two_per_slot() -> None:
    """A small input is one task (a task costs more than checking a few thousand rows); more rows make more tasks,
    up to two per slot, then one per rows_per_task; every group is in exactly one task, the biggest tasks first."""

    def groups(*rows: int) -> list[Group]:
        return [Group("run", f"m{i}", f"groups/g{i}", n) for i, n in enumerate(rows)]

    def sizes(tasks: list[list[Group]]) -> list[int]:
        return [sum(g.rows for g in t) for t in tasks]

    assert sizes(plan_tasks(groups(300, 250, 250, 200), slots=2)) == [1000]
    assert len(plan_tasks(groups(*[MIN_ROWS_PER_TASK // 4] * 8), slots=2)) == 2
    many = groups(*[MIN_ROWS_PER_TASK] * 8)
    assert len(plan_tasks(many, slots=2)) == 4
    assert len(plan_tasks(many, slots=2, rows_per_task=MIN_ROWS_PER_TASK)) == 8
    assert len(plan_tasks(groups(10**6), slots=2)) == 1  # never more tasks than groups
    mixed = plan_tasks(groups(*range(1, 40_000, 1_000)), slots=2)
    assert sorted(g.key for t in mixed for g in t) == sorted(g.key for g in groups(*range(1, 40_000, 1_000)))
    assert sizes(mixed) == sorted(sizes(mixed), reverse=True)


def test_ingest_tasks_are_whole_files_largest_first_small_ones_together() -> None:
    """The cluster ingest's tasks: one per file once each task has enough bytes to pay for itself (the largest first,
    so the slots take the next file as they free), small files packed onto few tasks; every file in one task."""
    mib = 1 << 20
    assert plan_files([10 * mib, 30 * mib, 20 * mib]) == [[1], [2], [0]]
    assert plan_files([mib, 2 * mib, mib]) == [[1, 0, 2]]
    assert plan_files([9 * mib, 3 * mib, 2 * mib, mib]) == [[0], [1, 2, 3]]
    assert plan_files([0, 0]) == [[0, 1]]
    tasks = plan_files([(i % 7 + 1) * mib for i in range(40)], min_task_bytes=16 * mib)
    assert sorted(i for t in tasks for i in t) == list(range(40)) and len(tasks) == 10


def test_liveness_and_incarnations(tmp_path: Path) -> None:
    faults = [
        {"t": 10, "kind": "kill", "member": "B"},
        {"t": 20, "kind": "restart", "member": "B"},
        {"t": 30, "kind": "kill", "member": "C"},
        {"t": 40, "kind": "partition", "from": ["A"], "to": ["B"], "for": "1s"},
    ]
    counts = {m: {"send": 1, "stop": 1} for m in "ABCD"}
    last = {"A": "stop", "B": "stop", "C": "stop", "D": "send"}  # D's history has no stop
    info = build_run_info("r", counts, last, [], faults, CheckConfig())
    assert info.alive == {"A": True, "B": True, "C": False, "D": False}
    assert (info.inc_at("B", 19), info.inc_at("B", 20), info.final_inc("B")) == (0, 1, 1)
    assert info.final_start("B") == 20 and info.final_start("A") < 0
    assert info.heal_time() == 40 + 10**9


def test_fault_ends() -> None:
    recs = [
        {"t": 1, "kind": "partition", "from": ["A"], "to": ["B"]},
        {"t": 5, "kind": "heal"},
        {"t": 7, "kind": "split", "groups": [["A"], ["B"]]},
        {"t": 8, "kind": "loss", "probability": 0.1, "for": "2ns"},
        {"t": 9, "kind": "kill", "member": "A"},
    ]
    ends = {f.kind: f.end for f in fault_intervals(recs)}
    assert ends == {"partition": 5, "heal": 5, "split": NEVER, "loss": 10, "kill": 9}


def test_fault_file_with_cut_last_line(tmp_path: Path) -> None:
    f = tmp_path / "faults.jsonl"
    f.write_text(json.dumps({"t": 1, "kind": "kill", "member": "A"}) + '\n{"t": 2, "ki')
    assert read_faults(f) == ([{"t": 1, "kind": "kill", "member": "A"}], 1)
    f.write_text('{"t": 2, "ki\n' + json.dumps({"t": 1, "kind": "kill", "member": "A"}) + "\n")
    with pytest.raises(InputError, match=r"faults\.jsonl:1"):
        read_faults(f)


def test_schedule_start_from_the_fault_files_start_line(tmp_path: Path) -> None:
    f = tmp_path / "faults.jsonl"
    assert read_schedule_start(f) is None  # no file: a run without faults
    f.write_text('\n{"event": "start", "t": 1500, "seed": 7, "backend": "netns"}\n{"t": 2000, "kind": "heal"}\n')
    assert read_schedule_start(f) == 1500
    f.write_text('{"t": 2000, "kind": "heal"}\n')  # written before the start line existed
    assert read_schedule_start(f) is None
    for bad in ('{"event": "start", "t": "soon"}\n', '{"event": "sta', ""):
        f.write_text(bad)
        assert read_schedule_start(f) is None


def test_report_puts_faults_on_the_scenarios_clock_too() -> None:
    """On a real cluster the members form their group before the schedule's clock starts: the report marks where
    it did and gives each fault's onset on that clock, which is what the scenario's `at` plans."""
    from analysis.report import _fault_table, scenario_start

    faults = [{"t": 3_500_000_000, "kind": "loss", "probability": 0.2, "for": "2s", "at": "2s"}]
    counts = {"A": {"send": 1, "stop": 1}}
    late = build_run_info("r", counts, {"A": "stop"}, [], faults, CheckConfig(), (0, 9 * 10**9), 1_500_000_000)
    assert scenario_start(late) == 1.5
    html = _fault_table(late)
    assert "scenario time (s)" in html and "started at 1.500 s" in html
    assert '<td class="n">3.500</td><td class="n">5.500</td><td class="n">2.000</td>' in html
    same = build_run_info("r", counts, {"A": "stop"}, [], faults, CheckConfig(), (0, 9 * 10**9), 0)
    unknown = build_run_info("r", counts, {"A": "stop"}, [], faults, CheckConfig(), (0, 9 * 10**9))
    for info in (same, unknown):  # the simulator's clock starts with the first event; older runs do not say
        assert scenario_start(info) is None
        assert "scenario time" not in _fault_table(info)


def test_run_discovery(tmp_path: Path) -> None:
    for p in ("a", "deep/er/b", ".chaosbed-cache/x"):
        (tmp_path / p / "history").mkdir(parents=True)
    assert [r.name for r in discover_runs(tmp_path)] == ["a", "deep/er/b"]
    assert [r.name for r in discover_runs(tmp_path / "a")] == ["a"]


def test_a_check_that_could_not_run_is_not_reported_as_held() -> None:
    from analysis.report import _verdict_rows
    from analysis.stats import Delivered, LatencyStats, NotRequired, Required, RunStats, Sends

    none = Delivered(0, 0)
    stats = RunStats(
        events=1,
        members={},
        checks={"fifo": True, "views_converge": 10.0},
        violations={},
        skipped=[],
        empty_history_files=[],
        faults=0,
        sends=Sends(0, 0),
        deliveries=0,
        duplicate_deliveries=0,
        phantom_deliveries=0,
        out_of_order_deliveries=0,
        required=Required(none, none),
        not_required=NotRequired(none, none, none, none),
        xmit=0,
        ack=0,
        latency_ms=LatencyStats({}, {}),
        notes=["views_converge not checked: no view events"],
    )
    rows = {r[0]: r[1].text for r in _verdict_rows(stats)}
    assert "not checked" in rows["views_converge"]
    assert "held" in rows["fifo"]
