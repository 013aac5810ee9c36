"""Each injected violation is found exactly once and nothing else; faults that are not violations stay clean.

All cases live in one matrix folder checked by one Spark job (module fixture), and the plain-Python reference
checker must agree with Spark on every run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.config import InputError
from analysis.pipeline import Analysis, analyze
from analysis.reference import check_path
from analysis.stats import NOT_REQUIRED_REASONS
from analysis.synth import Truth, write_run
from tests.analysis.helpers import cache_snapshot, cut_line_at_kill, expected_keys, violation_keys

pytestmark = pytest.mark.spark

VIOLATIONS = [
    "gap",
    "gap:multicast",
    "reorder",
    "reorder:multicast",
    "duplicate",
    "duplicate:multicast",
    "phantom",
    "phantom:multicast",
    "missing",
    "missing:multicast",
    "diverge",
]
CLEAN = ["clean", "crash", "truncated", "restart", "partition"]


def _name(spec: str) -> str:
    return spec.replace(":", "-")


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory, spark_target: str) -> tuple[Path, dict[str, Truth], Analysis]:
    root = tmp_path_factory.mktemp("matrix")
    truths = {}
    for spec in VIOLATIONS + CLEAN:
        inject = [] if spec == "clean" else [spec]
        truths[_name(spec)] = write_run(root / _name(spec), members=4, rounds=40, inject=inject, seed=len(truths))
    return root, truths, analyze(root)


@pytest.mark.parametrize("spec", VIOLATIONS)
def test_injected_violation_found_exactly_once(matrix: tuple, spec: str) -> None:
    _, truths, analysis = matrix
    truth = truths[_name(spec)]
    assert len(truth.expected) == 1
    got = violation_keys(analysis.results[_name(spec)].violations)
    assert got == expected_keys(truth)


@pytest.mark.parametrize("spec", CLEAN)
def test_faults_without_violations_are_clean(matrix: tuple, spec: str) -> None:
    _, _, analysis = matrix
    res = analysis.results[_name(spec)]
    assert res.violations == []
    assert analysis.stats[_name(spec)].violations == {}


def test_messages_to_a_crashed_member_are_counted_not_failed(matrix: tuple) -> None:
    _, truths, analysis = matrix
    stats = analysis.stats["crash"]
    (victim,) = truths["crash"].killed
    assert stats.members[victim].alive is False
    assert stats.not_required.to_crashed.messages > 0
    assert stats.not_required.from_crashed.messages > 0  # its own multicasts in flight when killed
    assert stats.required.unicast.messages == stats.required.unicast.delivered


def test_partition_excludes_messages_across_the_split(matrix: tuple) -> None:
    stats = matrix[2].stats["partition"]
    assert stats.not_required.excluded.messages > 0
    assert stats.required.multicast.messages == stats.required.multicast.delivered


def test_restart_is_a_new_incarnation(matrix: tuple) -> None:
    _, truths, analysis = matrix
    (victim,) = truths["restart"].killed
    member = analysis.stats["restart"].members[victim]
    assert member.alive is True
    assert member.incarnations == 2


def test_truncated_last_line_is_skipped_and_counted(matrix: tuple) -> None:
    _, truths, analysis = matrix
    stats = analysis.stats["truncated"]
    assert truths["truncated"].skipped_lines == 1
    assert stats.skipped_lines == 1
    (line,) = stats.skipped
    assert line.reason == "last line cut off"
    assert line.file == f"history/{truths['truncated'].killed[0]}.jsonl"


def test_counts_match_the_generated_history(matrix: tuple) -> None:
    _, truths, analysis = matrix
    for name, truth in truths.items():
        assert analysis.stats[name].events == truth.events, name


def test_reference_checker_agrees_with_spark(matrix: tuple) -> None:
    root, _, analysis = matrix
    ref = check_path(root)
    assert set(ref) == set(analysis.results)
    for name, r in ref.items():
        assert violation_keys(r.violations) == violation_keys(analysis.results[name].violations), name
        stats = analysis.stats[name]
        assert {k: v for k, v in r.counters.items() if v and k.startswith("not_required_")} == {
            f"not_required_{k}": n for k in NOT_REQUIRED_REASONS if (n := getattr(stats.not_required, k).messages)
        }, name
        counted = (stats.duplicate_deliveries, stats.phantom_deliveries, stats.out_of_order_deliveries)
        assert counted == (r.counters["duplicates"], r.counters["phantoms"], r.counters["reordered"]), name


def test_cache_is_reused_and_invalidated(tmp_path: Path, spark: object) -> None:
    write_run(tmp_path / "r", members=3, rounds=10, inject=["gap"])
    first = analyze(tmp_path / "r")
    again = analyze(tmp_path / "r")
    assert (first.timings["from_cache"], again.timings["from_cache"]) == (0.0, 1.0)
    assert violation_keys(again.results["r"].violations) == violation_keys(first.results["r"].violations)
    write_run(tmp_path / "r", members=3, rounds=10, inject=["duplicate"])  # rewrites the history files
    changed = analyze(tmp_path / "r")
    assert changed.timings["from_cache"] == 0.0
    assert [v.check for v in changed.results["r"].violations] == ["exactly_once"]


def test_scenario_checks_switch_checks_off(tmp_path: Path, spark: object) -> None:
    """With fifo off, a gap is still a message owed and never delivered: it shows as `complete`."""
    truth = write_run(tmp_path / "r", members=3, rounds=20, inject=["gap"], checks={"fifo": False})
    res = analyze(tmp_path / "r").results["r"]
    (exp,) = truth.expected
    assert [(v.check, v.msg_id) for v in res.violations] == [("complete", exp.msg_id)]


def test_views_converge_bound(tmp_path: Path, spark: object) -> None:
    """Merge views come 2 ms after the heal: within 1 s, not within 0.1 ms (one violation per live member)."""
    write_run(tmp_path / "r", members=4, rounds=40, inject=["partition"], checks={"views_converge": "1s"})
    assert analyze(tmp_path / "r").results["r"].violations == []
    late = analyze(tmp_path / "r", bound_views=0.0001).results["r"].violations
    assert sorted((v.check, v.receiver) for v in late) == [("views_converge", m) for m in "ABCD"]


def test_spark_reader_writes_the_local_cache_and_results(tmp_path: Path, spark: object) -> None:
    """The ingest of cluster masters (the files parsed on the executors: spark_ingest.py) against local mode's: the
    same summary (bad lines with their line numbers and neighbours' times, views, counters, empty files), the same
    part files, the same results and statistics."""
    specs = ("truncated", "gap:multicast", "duplicate", "restart")
    truths = {_name(s): write_run(tmp_path / _name(s), members=3, rounds=20, inject=[s]) for s in specs}
    cut_line_at_kill(tmp_path / "restart")  # a cut-off line in the middle of a file, skipped: its member was killed
    (tmp_path / "duplicate" / "history" / "Z.jsonl").write_text("\n\n")  # a file without events
    damaged = tmp_path / "gap-multicast" / "history" / "A.jsonl"
    with damaged.open("a") as f:  # `t` as text: the file is read line by line
        f.write('{"t":"7","member":"A","event":"stop"}\n')
    arrow = analyze(tmp_path, reader="arrow")
    local_cache = cache_snapshot(tmp_path)
    on_spark = analyze(tmp_path, reader="spark")
    assert on_spark.timings["from_cache"] == 0.0
    assert cache_snapshot(tmp_path) == local_cache
    runs = local_cache[0]["runs"]
    (cut,) = runs["restart"]["bad_lines"]
    assert (cut["file"], cut["last"]) == (f"history/{truths['restart'].killed[0]}.jsonl", False)
    assert cut["line"] > 1 and cut["prev_t"] is not None and cut["next_t"] is not None
    assert [(b["file"], b["line"]) for b in runs["gap-multicast"]["bad_lines"]] == [
        ("history/A.jsonl", len(damaged.read_text().splitlines()))
    ]
    assert runs["duplicate"]["empty_files"] == ["history/Z.jsonl"]
    for name in arrow.results:
        assert violation_keys(on_spark.results[name].violations) == violation_keys(arrow.results[name].violations)
        assert on_spark.stats[name].to_json() == arrow.stats[name].to_json(), name


def test_spark_reader_reports_a_damaged_line_as_local_mode_does(tmp_path: Path, spark: object) -> None:
    """A damaged line in the middle of a file (its member not killed there) stops the check with the same message
    (file and line number) whichever process parsed the file."""
    write_run(tmp_path / "r", members=3, rounds=10)
    path = tmp_path / "r" / "history" / "B.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([*lines[:5], '{"t":12,"member":"B",', *lines[5:]]) + "\n")
    errors = []
    for reader in ("arrow", "spark"):
        with pytest.raises(InputError) as caught:
            analyze(tmp_path / "r", reader=reader)
        errors.append(str(caught.value))
    assert errors[0] == errors[1] and f"{path}:6: not a complete JSON event" in errors[0], errors


def test_dataframe_entry_point_agrees(tmp_path: Path, spark: object) -> None:
    """stream_results_from_events (events in any DataFrame, one shuffle) gives the rows of the cached groups."""
    from analysis.cache import CACHE_DIR
    from analysis.results import collect
    from analysis.spark_job import stream_results_from_events

    write_run(tmp_path / "r", members=3, rounds=20, inject=["reorder", "phantom:multicast", "missing"])
    analysis = analyze(tmp_path / "r")
    events = spark.read.option("recursiveFileLookup", "true").parquet(str(tmp_path / "r" / CACHE_DIR / "groups"))
    infos = {"r": analysis.results["r"].info}
    rows = stream_results_from_events(events, infos).toArrow()
    assert violation_keys(collect(rows, infos)["r"].violations) == violation_keys(analysis.results["r"].violations)
    assert len(analysis.results["r"].violations) == 3
