"""A foreign system's histories that break the history contract (analysis/contract.py): each broken line is reported
with the member, the line and the field, the rest of the run is still checked, and exit 2 is only for a run that cannot
be checked at all. chaosbed's own runs keep their strict reading (a damaged line is an input error)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from analysis.command import check

pytestmark = pytest.mark.spark
FOREIGN = 'name = "foreign"\n\n[cluster]\nmembers = ["A", "B"]\nsystem = "naive-rb"\n\n[cluster.member]\n' + (
    'command = ["python3", "member.py", "{config}"]\n'
)


def ev(t: int, member: str, event: str, **fields: Any) -> dict[str, Any]:
    return {"t": t, "member": member, "event": event, "incarnation": 1, **fields}


def msg(t: int, member: str, event: str, sender: str, dest: str, n: int) -> dict[str, Any]:
    return ev(t, member, event, kind="unicast", sender=sender, dest=dest, conn_id=sender, seqno=n,
              msg_id=f"{sender}>{dest}#{n}", size=10)  # fmt: skip


def histories() -> dict[str, list[dict[str, Any]]]:
    """A clean run: A sends B five unicasts, B delivers them."""
    a = [ev(1000, "A", "start", address="A")] + [msg(2000 + n, "A", "send", "A", "B", n) for n in range(1, 6)]
    b = [ev(1001, "B", "start", address="B")] + [msg(3000 + n, "B", "deliver", "A", "B", n) for n in range(1, 6)]
    return {"A": [*a, ev(9000, "A", "stop")], "B": [*b, ev(9001, "B", "stop")]}


def write(folder: Path, files: dict[str, list[Any]], scenario: str | None = FOREIGN) -> Path:
    (folder / "history").mkdir(parents=True)
    for name, lines in files.items():
        text = "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines)
        (folder / "history" / f"{name}.jsonl").write_text(text)
    if scenario is not None:
        (folder / "scenario.toml").write_text(scenario)
    return folder


def verdict(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "verdict.json").read_text())


def test_broken_lines_are_reported_precisely_and_the_rest_is_checked(tmp_path: Path, spark: object, capsys) -> None:
    h = histories()
    b = h["B"]
    b.insert(3, '{"t": 3002, "member": "B", "event": "deliv')  # a damaged line in the middle: line 4
    b.insert(5, {k: v for k, v in msg(3003, "B", "deliver", "A", "B", 3).items() if k != "size"})  # line 6: no size
    b.insert(6, msg(3004, "B", "deliver", "A", "B", 3))  # line 7: A>B#3 a second time (a real duplicate)
    h["A"].insert(2, ev(2001, "A", "gossip", round=1))  # line 3: an unknown kind
    run = write(tmp_path / "run", h)
    assert check(run) == 1
    doc = verdict(run)
    history = [v["detail"] for v in doc["violations"] if v["check"] == "history"]
    assert len(history) == 2
    assert history[0].startswith("member B, line 4: not JSON (JSONDecodeError")
    assert history[1].startswith("member B, line 6, field size: deliver has no field 'size' (history/B.jsonl;")
    others = [(v["check"], v["msg_id"], v["detail"]) for v in doc["violations"] if v["check"] != "history"]
    assert others == [("exactly_once", "A>B#3", "delivered 3 times to B")]  # the line without size is one of them
    assert "member A, line 3: unknown event kind 'gossip': counted, not checked" in doc["stats"]["notes"]
    out = capsys.readouterr().out
    assert "member B, line 4" in out and "unknown event kind 'gossip'" in out


def test_an_unknown_kind_alone_is_a_note_not_a_failure(tmp_path: Path, spark: object) -> None:
    h = histories()
    h["B"].insert(1, ev(1500, "B", "heartbeat"))
    run = write(tmp_path / "run", h)
    assert check(run) == 0
    assert "member B, line 2: unknown event kind 'heartbeat': counted, not checked" in verdict(run)["stats"]["notes"]


def test_a_missing_msg_id_is_reported_and_its_line_still_counts(tmp_path: Path, spark: object) -> None:
    """The checks run on what the history says: a delivery without its msg_id is a delivery of no message sent."""
    h = histories()
    h["B"][2] = {k: v for k, v in h["B"][2].items() if k != "msg_id"}  # line 3: A>B#2 delivered, but no msg_id
    run = write(tmp_path / "run", h)
    assert check(run) == 1
    found = sorted((v["check"], v["detail"][:40]) for v in verdict(run)["violations"])
    assert found == [
        ("fifo", "B never delivered seqno 2, although it d"),
        ("history", "member B, line 3, field msg_id: deliver "),
        ("no_phantoms", "B delivered it but A never sent it"),
    ]


def test_only_a_run_that_cannot_be_checked_at_all_exits_2(tmp_path: Path, spark: object) -> None:
    garbage = write(tmp_path / "garbage", {"A": ["not json", "{also not"], "B": ['{"t": "x"}']})
    assert check(garbage) == 2  # no readable event in any history
    cut = histories()
    cut["B"].append('{"t": 9500, "member": "B", "ev')  # a cut-off last line: skipped, as for chaosbed's own
    assert check(write(tmp_path / "cut", cut)) == 0


def test_chaosbed_own_runs_keep_the_strict_reading(tmp_path: Path, spark: object) -> None:
    h = histories()
    h["B"].insert(3, '{"t": 3002, "member": "B", "event": "deliv')
    assert check(write(tmp_path / "own", h, scenario='name = "own"\n\n[cluster]\nmembers = ["A", "B"]\n')) == 2
