"""`chaosbed explore --confirm netns`: each minimal scenario the simulator found is replayed N times on real members
in network namespaces, and explore.json and the output say how many runs reproduced it (the same checks violated);
none reproducing it labels the failure a possible parity bug. No cluster of ours is left behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from analysis.reference import check_run
from analysis.schema import RunFolder
from orchestration.cli.main import main
from tests.clusters import chaos_tests, clusters_under

pytestmark = [*chaos_tests(nfqueue=True), pytest.mark.slow]

BUG = Path(__file__).resolve().parents[2] / "scenarios" / "bugs" / "unicast3-duplicates-not-reacked.toml"


def test_confirm_replays_the_minimal_scenario_on_netns_and_counts_reproductions(tmp_path: Path) -> None:
    out = tmp_path / "x"
    flawed = "cluster.properties.unicast3.ack_duplicates=false"
    confirm = ["--confirm", "netns", "--confirm-runs", "2"]
    args = ["explore", str(BUG), "--set", flawed, "--schedules", "60", "--stop-at-first", "--no-check", *confirm,
            "--out", str(out)]  # fmt: skip
    result = CliRunner().invoke(main, args, terminal_width=200)
    assert result.exit_code == 1, result.output
    (failure,) = json.loads((out / "explore.json").read_text())["failures"]
    confirm = failure["confirm"]
    assert confirm["backend"] == "netns" and confirm["runs"] == 2 and len(confirm["violated"]) == 2
    folder = (out / failure["minimal"]).parent
    again = 0
    for k in (1, 2):
        run = folder / f"confirm-netns-{k}"
        assert sorted(p.stem for p in (run / "history").glob("*.jsonl")) == ["A", "B"]
        violated = sorted({v.check for v in check_run(RunFolder(run.name, run)).violations})
        assert violated == confirm["violated"][k - 1]
        again += violated == failure["violated"]
    assert confirm["reproduced"] == again
    assert f"reproduced {again}/2 on netns" in result.output
    assert confirm["parity"] == (again == 0)
    assert clusters_under(tmp_path) == []
