"""`chaosbed bisect` on real releases, as a user runs it: over five JGroups 5.4 releases it finds the fixing release
of two catalogue bugs, JGRP-2875 (5.4.6 -> 5.4.7) and JGRP-2904 (5.4.8 -> 5.4.10: Maven Central serves no 5.4.9),
and over five 3.x releases those of JGRP-1563 (3.2.5 -> 3.2.6) and JGRP-1874 (3.5.0 -> 3.5.1),
by binary search (four probes of five releases, not five), and writes bisect.json, index.html and every probe's
runs. One run per probe keeps the suite lean; docs/bisect.md shows a run with five."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.clusters import chaos_tests

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.netns, pytest.mark.spark, pytest.mark.slow, pytest.mark.jgroups, *chaos_tests(nfqueue=True)]

CASES = [
    ("mcast-window-full-two-stop-acking", "5.4.4..5.4.8", ("5.4.6", "5.4.7")),
    ("nakack4-spurious-ack-left-member", "5.4.6..5.4.11", ("5.4.8", "5.4.10")),
    # the 3.x member: JGRP-1563 was backported to 3.2.6 (Maven Central serves no 3.2.4), JGRP-1874 to 3.5.1
    ("unicast2-first-after-reset", "3.2.2..3.2.7", ("3.2.5", "3.2.6")),
    ("unicast3-sync-storm", "3.5.0..3.6.2", ("3.5.0", "3.5.1")),
]


@pytest.mark.parametrize(("bug", "span", "boundary"), CASES, ids=[c[0] for c in CASES])
def test_bisect_finds_the_fixing_release(bug: str, span: str, boundary: tuple[str, str], tmp_path: Path) -> None:
    out = tmp_path / "bisect"
    argv = [sys.executable, "-m", "orchestration", "bisect", f"scenarios/bugs/{bug}.toml", "--versions", span,
            "--runs", "1", "--out", str(out)]  # fmt: skip
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads((out / "bisect.json").read_text())
    assert len(doc["versions"]) == 5 and doc["status"] == "found" and doc["sharp"] is True, doc["summary"]
    before, after = doc["boundary"]["before"], doc["boundary"]["after"]
    assert (before["version"], after["version"]) == boundary, doc["summary"]
    assert (before["rate"], after["rate"]) == (1.0, 0.0)
    assert len(doc["probes"]) == 4, [p["version"] for p in doc["probes"]]  # a binary search, not a scan
    assert f"fixed in {boundary[1]}" in proc.stdout and "probe " in proc.stdout
    for p in doc["probes"]:  # every probe's run is kept, checked, with its verdict
        matrix = json.loads((out / p["runs_dir"] / "1" / "matrix.json").read_text())
        assert [c["status"] for c in matrix["cells"]] == ["ran"]
        assert (out / p["runs_dir"] / "1" / matrix["cells"][0]["run"] / "verdict.json").is_file()
    assert boundary[1] in (out / "index.html").read_text()
