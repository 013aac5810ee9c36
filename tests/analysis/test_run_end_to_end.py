"""`chaosbed run` end to end on the simulator, and histories of real clusters, through the Spark checker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestration.cli.main import main
from tests.clusters import BACKENDS, make_cluster  # noqa: F401 - the fixture

pytestmark = [pytest.mark.spark, pytest.mark.slow]

CLEAN = """
name = "clean"
seed = 4
timeout = "120s"
[cluster]
members = 3
stack = "unicast3"
properties = { unicast3 = { xmit_interval = "100ms" } }
[[workload]]
kind = "unicast"
from = "*"
to = "*"
count = 300
rate = 500
[[faults]]
at = "0.2s"
kind = "loss"
from = "*"
to = "*"
probability = 0.2
for = "0.5s"
[[faults]]
at = "0.1s"
kind = "partition"
from = ["A"]
to = ["C"]
one_way = true
for = "0.4s"
"""

LAST_LOST = """
name = "unicast2-last-message"
seed = 1
timeout = "20s"
[cluster]
members = 2
stack = "unicast2"
[[workload]]
kind = "unicast"
from = "A"
to = "B"
count = 50
[[faults]]
at = "0s"
kind = "discard"
match = "UNICAST2.DATA(seqno=50)"
from = "A"
to = "B"
count = 1
"""


def _run(tmp_path: Path, text: str) -> tuple[int, str, dict]:
    scenario = tmp_path / "s.toml"
    scenario.write_text(text)
    out = tmp_path / "out"
    result = CliRunner().invoke(
        main, ["run", str(scenario), "--backend", "sim", "--out", str(out)], catch_exceptions=False
    )
    return result.exit_code, result.output, json.loads((out / "verdict.json").read_text())


def test_a_clean_simulated_run_passes_and_writes_its_report(tmp_path: Path) -> None:
    code, output, verdict = _run(tmp_path, CLEAN)
    assert code == 0, output
    assert verdict["ok"] and verdict["violations"] == []
    assert output.strip().splitlines()[-1].startswith("verdict: PASS")
    report = (tmp_path / "out" / "report.html").read_text()
    assert "data:image/png;base64," in report
    assert "not checked" in report  # views_converge: this unicast-only stack has no views


def test_a_lost_last_message_of_unicast2_fails_with_exactly_its_violations(tmp_path: Path) -> None:
    code, output, verdict = _run(tmp_path, LAST_LOST)
    assert code == 1, output
    # in the verdict's stable order (docs/scenario-format.md's checks, then timeout): the runner's timeout comes last
    assert [(v["check"], v["msg_id"]) for v in verdict["violations"]] == [("complete", "A>B#50"), ("timeout", None)]
    assert "replay: chaosbed run" in output.strip().splitlines()[-1]


@pytest.mark.parametrize("backend", BACKENDS)
def test_histories_of_a_real_cluster_check_clean(make_cluster, backend: str) -> None:  # noqa: F811
    from analysis.command import check

    cluster = make_cluster(backend, 3)
    for s, d in (("A", "B"), ("B", "C"), ("C", "A")):
        cluster.control(s, "send", to=d, count=2000, size=64)
    cluster.wait_until(
        lambda: all(
            cluster.control(n, "stats")["counters"]["unicast3"]["msgs_delivered"] == 2000 for n in ("A", "B", "C")
        ),
        60,
        "delivery",
    )
    cluster.kill("C")  # a killed member: its history has no stop event, and messages to it do not count as missing
    cluster.stop_members()
    assert check(cluster.workdir) == 0
