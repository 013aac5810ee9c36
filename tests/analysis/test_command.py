"""`check()`: exit codes, verdict.json as docs/scenario-format.md specifies it, and a self-contained report.html."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.command import check
from analysis.synth import write_run
from analysis.verdict import Violation
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


HEADERS = ("run", "verdict", "events", "fifo", "once", "complete", "phantoms", "views", "within", "control", "skipped")
LONG_NAME = "a-run-folder-with-a-rather-long-name-seed-12345"


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of runs whose table has every column (both bounds configured somewhere) and a long run name."""
    root = tmp_path_factory.mktemp("table")
    write_run(root / "run-0", members=4, rounds=20, inject=["gap"])
    write_run(root / "run-1", members=4, rounds=20, inject=["truncated"])
    bounds = {"delivered_within": "1s", "control_per_heal": {"xmit": 5}}
    write_run(root / LONG_NAME, members=4, rounds=20, inject=["partition"], checks=bounds)
    return root


def table_lines(text: str) -> list[str]:
    """The lines of the verdict table: from its header line to the legend."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if "verdict" in line and "skipped" in line)
    end = next(i for i, line in enumerate(lines) if line.startswith("violations per check"))
    return lines[start:end]


def test_check_piped_prints_whole_headers_and_names(three_runs: Path, spark: object) -> None:
    """`chaosbed check DIR | cat` without COLUMNS: rich would lay the table out for 80 columns and cut the headers
    ("compl…"); a pipe gets the table at its natural width instead."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.run(
        [sys.executable, "-m", "orchestration.cli", "check", str(three_runs)],
        capture_output=True,  # stdout is a pipe, not a terminal
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stderr
    out = proc.stdout
    assert "…" not in out
    header = next(line for line in out.splitlines() if "verdict" in line)
    assert all(re.search(rf"\b{h}\b", header) for h in HEADERS), header
    rows = table_lines(out)
    assert any(LONG_NAME in line for line in rows) and any("run-0" in line and "FAIL" in line for line in rows)
    assert out.splitlines()[-1].startswith("FAIL: 1 violation(s) in 1 of 3 run(s)")
    assert out.splitlines()[-1].endswith(str(three_runs / "verdict.json"))


@pytest.mark.parametrize("width", [120, 80])
def test_the_table_fits_a_terminal(three_runs: Path, spark: object, width: int) -> None:
    """In a terminal the table keeps to its width: boxed at 120 columns, without the box at 80; no header or count is
    cut, the long run name folds within its column."""
    from rich.console import Console

    from analysis.command import print_verdict
    from analysis.pipeline import analyze

    console = Console(width=width, force_terminal=True, color_system=None, highlight=False, record=True)
    print_verdict(console, analyze(three_runs))
    text = console.export_text()
    rows = table_lines(text)
    assert "…" not in text
    assert all(len(line.rstrip()) <= width for line in rows), max(rows, key=len)
    assert all(re.search(rf"\b{h}\b", rows[0]) for h in HEADERS), rows[0]
    assert ("┃" in rows[0]) == (width == 120)  # the box where it fits
    end = rows[0].index("verdict")  # the run column ends where the verdict column starts
    names = "".join(line[:end].strip(" │┃") for line in rows[1:] if not set(line) <= set("━─┡┩└┘┴╇ "))
    assert names == LONG_NAME + "run-0run-1"  # folded, in order, nothing lost


def test_a_violation_line_leaves_out_what_does_not_apply() -> None:
    timeout = Violation("timeout", None, None, None, None, None, "the run did not finish", run="r1")
    assert timeout.where() == "" and timeout.line() == "timeout: the run did not finish"
    gap = Violation("fifo", "A", "B", "7", 12, "A>B#12", "B never delivered seqno 12", run="r1", kind="unicast")
    assert gap.line() == "fifo A->B unicast conn 7 seqno 12 msg A>B#12: B never delivered seqno 12"
    history = Violation("history", None, "C", None, None, None, "line 3: t is negative")
    assert history.line() == "history *->C: line 3: t is negative"
