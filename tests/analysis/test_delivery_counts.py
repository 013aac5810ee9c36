"""verdict.json's duplicate_deliveries, phantom_deliveries and out_of_order_deliveries, exactly, on synthetic histories
with known damage: through `chaosbed check` (the Spark pipeline, read back from verdict.json) and through the
plain-Python reference checker. They count deliveries, where the violations count messages: a message delivered
three times is one exactly_once violation and two duplicate deliveries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.command import check
from analysis.reference import check_path
from analysis.synth import write_run

pytestmark = pytest.mark.spark

# run -> (injections, extra damage) and the expected (duplicate, phantom, out-of-order) deliveries
CASES: dict[str, tuple[list[str], str | None, tuple[int, int, int]]] = {
    "clean": ([], None, (0, 0, 0)),
    "duplicate": (["duplicate"], None, (1, 0, 0)),
    "duplicate-multicast": (["duplicate:multicast"], None, (1, 0, 0)),
    "phantom": (["phantom"], None, (0, 1, 0)),
    "phantom-multicast": (["phantom:multicast"], None, (0, 1, 0)),
    "reorder": (["reorder"], None, (0, 0, 1)),
    "reorder-multicast": (["reorder:multicast"], None, (0, 0, 1)),
    "gap": (["gap"], None, (0, 0, 0)),  # a missing message is not a late one
    "all-three": (["duplicate", "phantom:multicast", "reorder"], None, (1, 1, 1)),
    "three-times": ([], "deliver-thrice", (2, 0, 0)),  # one message delivered 3 times: 2 duplicate deliveries
    "phantom-twice": ([], "phantom-twice", (0, 2, 0)),  # one phantom delivered twice: 2 phantom deliveries
    "late-by-two": ([], "late-by-two", (0, 0, 1)),  # seqno n after n+1 and n+2: one late delivery
}


def deliveries_of(lines: list[str], sender: str, kind: str) -> list[int]:
    """Indices of the deliveries of the sender's messages of one kind in a member's history lines."""
    return [
        i
        for i, line in enumerate(lines)
        if (e := json.loads(line))["event"] == "deliver" and e["sender"] == sender and e["kind"] == kind
    ]


def damage(history: Path, how: str) -> None:
    """Edits B's history around its first three deliveries of A's unicasts (times stay in file order)."""
    path = history / "B.jsonl"
    lines = path.read_text().splitlines()
    got = deliveries_of(lines, "A", "unicast")
    first = json.loads(lines[got[0]])
    if how == "deliver-thrice":  # the first message twice more, at the time of its first delivery
        lines[got[0] + 1 : got[0] + 1] = [lines[got[0]]] * 2
    elif how == "phantom-twice":  # a message A never sent, delivered twice
        lines[got[0] + 1 : got[0] + 1] = [json.dumps(first | {"msg_id": "A.never", "seqno": 10**6})] * 2
    elif how == "late-by-two":  # the 1st, 2nd and 3rd messages delivered as 2nd, 3rd, 1st
        events = [json.loads(lines[i]) for i in got[:3]]
        for i, e in zip(got[:3], events[1:] + events[:1], strict=True):
            lines[i] = json.dumps(e | {"t": json.loads(lines[i])["t"]})
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("counts")
    for name, (inject, how, _) in CASES.items():
        write_run(root / name, members=3, rounds=20, inject=inject, seed=2)
        if how:
            damage(root / name / "history", how)
    return root


def test_the_pipeline_writes_the_exact_counts_to_verdict_json(runs: Path, spark: object) -> None:
    assert check(runs) == 1
    for name, (*_, expected) in CASES.items():
        stats = json.loads((runs / name / "verdict.json").read_text())["stats"]
        got = (stats["duplicate_deliveries"], stats["phantom_deliveries"], stats["out_of_order_deliveries"])
        assert got == expected, name


def test_the_reference_checker_counts_the_same(runs: Path) -> None:
    results = check_path(runs)
    for name, (*_, expected) in CASES.items():
        c = results[name].counters
        assert (c["duplicates"], c["phantoms"], c["reordered"]) == expected, name


def test_violations_count_messages_not_deliveries(runs: Path) -> None:
    results = check_path(runs)
    assert [v.check for v in results["three-times"].violations] == ["exactly_once"]
    assert [v.check for v in results["phantom-twice"].violations] == ["no_phantoms"]
    assert [v.check for v in results["late-by-two"].violations] == ["fifo"]
