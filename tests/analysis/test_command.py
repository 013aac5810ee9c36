"""`check()`: exit codes, verdict.json as SCENARIO.md specifies it, and a self-contained report.html."""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path

import pytest

from analysis.command import check
from analysis.synth import write_run
from tests.analysis.helpers import write_lines

pytestmark = pytest.mark.spark

FIELDS = {"check", "sender", "receiver", "conn_id", "seqno", "msg_id", "detail", "run"}


def test_clean_run_exits_0_and_writes_verdict_and_report(tmp_path: Path, spark: object, capsys) -> None:
    write_run(tmp_path / "run", members=3, rounds=20)
    assert check(tmp_path / "run") == 0
    doc = json.loads((tmp_path / "run" / "verdict.json").read_text())
    assert doc["ok"] is True and doc["violations"] == []
    assert doc["stats"]["events"] > 0
    assert (tmp_path / "run" / "report.html").is_file()
    assert "OK" in capsys.readouterr().out


def test_violations_exit_1_with_every_field(tmp_path: Path, spark: object, capsys) -> None:
    write_run(tmp_path / "run", members=3, rounds=20, inject=["gap", "duplicate:multicast", "phantom"])
    assert check(tmp_path / "run") == 1
    doc = json.loads((tmp_path / "run" / "verdict.json").read_text())
    assert doc["ok"] is False
    assert [v["check"] for v in doc["violations"]] == ["fifo", "exactly_once", "no_phantoms"]  # stable order
    for v in doc["violations"]:
        assert set(v) >= FIELDS
        assert v["sender"] == "A" and v["receiver"] == "B" and v["run"] == "run"
        assert isinstance(v["seqno"], int) and isinstance(v["detail"], str)
    assert doc["violations"][0]["conn_id"] == 1  # written as a JSON number, read back as one
    assert doc["violations"][1]["conn_id"] is None  # multicast
    out = capsys.readouterr().out
    assert "FAIL" in out and "fifo" in out


def test_matrix_folder_gets_matrix_verdict_and_report(tmp_path: Path, spark: object) -> None:
    write_run(tmp_path / "a", members=3, rounds=10)
    write_run(tmp_path / "nested" / "b", members=3, rounds=10, inject=["missing"])
    assert check(tmp_path) == 1
    doc = json.loads((tmp_path / "verdict.json").read_text())
    assert set(doc["stats"]["runs"]) == {"a", "nested/b"}
    assert [(v["run"], v["check"]) for v in doc["violations"]] == [("nested/b", "complete")]
    assert json.loads((tmp_path / "a" / "verdict.json").read_text())["ok"] is True
    page = (tmp_path / "report.html").read_text()
    assert 'href="nested/b/report.html"' in page


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda p: None, id="empty-folder"),
        pytest.param(lambda p: (p / "history").mkdir(), id="no-history-files"),
        pytest.param(lambda p: write_lines(p / "history" / "A.jsonl", ["garbage", "more garbage"]), id="garbage"),
        pytest.param(lambda p: write_lines(p / "history" / "A.jsonl", ["", "  "]), id="blank"),
        pytest.param(
            lambda p: write_lines(
                p / "history" / "A.jsonl",
                ['{"t":1,"member":"A","event":"send"}', '{"t":2,"memb', '{"t":3,"member":"A","event":"stop"}'],
            ),
            id="damaged-middle-line",
        ),
        pytest.param(
            lambda p: (
                write_lines(p / "history" / "A.jsonl", ['{"t":1,"member":"A","event":"stop"}']),
                (p / "scenario.toml").write_text("[checks\nfifo = "),
            ),
            id="bad-scenario",
        ),
    ],
)
def test_unreadable_input_exits_2_with_one_line(tmp_path: Path, spark: object, capsys, make) -> None:
    make(tmp_path)
    assert check(tmp_path) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("chaosbed check: ") and "\n" not in err
    assert str(tmp_path) in err


def test_missing_folder_exits_2(tmp_path: Path, capsys) -> None:
    assert check(tmp_path / "nope") == 2
    assert "no such folder" in capsys.readouterr().err


def test_cut_line_between_incarnations_is_skipped(tmp_path: Path, spark: object) -> None:
    """A killed member's cut-off line followed by its next incarnation's lines is skipped, not damage."""
    lines = [
        '{"t":1,"member":"A","event":"view","view_id":"1","members":["A"]}',
        '{"t":2,"member":"A","event":"send","kind":"multicast","sender":"A","dest":null,"conn_id":null,"seq',
        '{"t":5,"member":"A","event":"view","view_id":"2","members":["A"]}',
        '{"t":6,"member":"A","event":"stop"}',
    ]
    write_lines(tmp_path / "history" / "A.jsonl", lines)
    faults = [
        {"t": 3, "event": "fault", "kind": "kill", "member": "A"},
        {"t": 4, "event": "fault", "kind": "restart", "member": "A"},
    ]
    (tmp_path / "faults.jsonl").write_text("".join(json.dumps(f) + "\n" for f in faults))
    assert check(tmp_path) == 0
    stats = json.loads((tmp_path / "verdict.json").read_text())["stats"]
    assert stats["skipped"] == [
        {"file": "history/A.jsonl", "line": 2, "text": lines[1][:80], "reason": "cut off by a kill"}
    ]
    assert stats["members"]["A"] | {"alive": True, "incarnations": 2} == stats["members"]["A"]


def test_report_is_self_contained_with_readable_plots(tmp_path: Path, spark: object) -> None:
    import matplotlib.image as mpimg

    write_run(tmp_path / "run", members=4, rounds=40, inject=["restart", "gap"])
    assert check(tmp_path / "run") == 1
    page = (tmp_path / "run" / "report.html").read_text()
    assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}/", page), "external URL in the report"
    assert "<script" not in page and "<link" not in page
    pngs = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(pngs) == 2  # timeline and latency
    for data in pngs:
        img = mpimg.imread(io.BytesIO(base64.b64decode(data)), format="png")
        assert img.shape[0] > 200 and img.shape[1] > 600
        assert img[..., :3].std() > 0.05  # not a blank image
    assert "never delivered seqno" in page  # the violation is listed
    assert "restart" in page and "kill" in page  # the faults are drawn and listed


def test_run_stats_are_the_verdict_stats_and_read_like_them(tmp_path: Path, spark: object) -> None:
    """Analysis.stats holds RunStats: typed attributes, to_json() exactly verdict.json's `stats`, and a read-only
    Mapping of that JSON for code written against the dict (docs/examples: run_stats["required"]["unicast"])."""
    from analysis.command import write_outputs
    from analysis.pipeline import analyze

    write_run(tmp_path / "run", members=3, rounds=20, inject=["crash", "duplicate"])
    analysis = analyze(tmp_path / "run")
    write_outputs(analysis)
    stats = analysis.stats["run"]
    on_disk = json.loads((tmp_path / "run" / "verdict.json").read_text())["stats"]
    assert stats.to_json() == on_disk and list(stats.to_json()) == list(on_disk)  # same keys, same order
    assert dict(stats) == on_disk and stats == on_disk
    assert stats["required"]["unicast"] == {
        "messages": stats.required.unicast.messages,
        "delivered": stats.required.unicast.delivered,
    }
    assert stats["members"]["C"]["alive"] is stats.members["C"].alive is False
    assert stats["violations"] == stats.violations == {"exactly_once": 1}
    assert stats["duplicate_deliveries"] == stats.duplicate_deliveries == 1
    assert "delivered_within" not in stats and stats.get("delivered_within") is None
    with pytest.raises(TypeError):
        stats["events"] = 0  # type: ignore[index]
