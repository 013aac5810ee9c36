"""A side-by-side matrix (root, a JDK and the jar): the same scenario file on the real JGroups 2.12 jar and on
chaosbed's own stack, a `cluster.system` axis, one report that names each cell's system with its stack; the jar
fails as its bug file says, chaosbed's UNICAST3 passes."""

from __future__ import annotations

from pathlib import Path

import pytest

from foreign import jgroups
from tests.foreign.jgroups_clusters import MATRIX_ON_NETNS, run_matrix

pytestmark = [
    *MATRIX_ON_NETNS,
    pytest.mark.skipif(jgroups.missing() is not None, reason=str(jgroups.missing())),
]
REPO = Path(__file__).resolve().parents[2]


def test_the_same_file_on_the_jar_and_on_chaosbed_in_one_report(tmp_path: Path) -> None:
    matrix = tmp_path / "side.toml"
    matrix.write_text(
        'name = "side"\n'
        f'scenarios = ["{REPO / "scenarios" / "bugs" / "jgroups-unicast2-last-message.toml"}"]\n'
        '[axes]\n"cluster.system" = ["jgroups-2.12", "chaosbed"]\nbackend = ["netns"]\n'
        '[report]\nrows = ["scenario"]\ncolumns = ["cluster.system"]\n'
        '[[expect]]\nwhere = { "cluster.system" = "jgroups-2.12" }\nviolates = ["delivered_within"]\n'
    )
    out = tmp_path / "out"
    proc, doc = run_matrix(matrix, out)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert doc is not None
    cells = {c["system"]: c for c in doc["cells"]}
    assert set(cells) == {"jgroups-2.12 (unicast2-fast)", "chaosbed (unicast3)"}
    assert cells["jgroups-2.12 (unicast2-fast)"]["violated"] == ["delivered_within"]
    assert cells["chaosbed (unicast3)"]["passed"] is True
    report = (out / "report.html").read_text()
    assert "<th>jgroups-2.12 (unicast2-fast)</th>" in report and "<th>chaosbed (unicast3)</th>" in report
    assert "(unicast2-fast)" in proc.stdout and "chaosbed (unicast3)" in proc.stdout  # the cells table's system
