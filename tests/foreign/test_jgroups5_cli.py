"""The JGroups 5 systems from the command line, as a user drives them (netns): `chaosbed up --system ... --version`,
then `send`, `kill`, `restart`, `pause`, `resume`, `leave` (graceful: the others install a view without the member,
no suspicion), `status` and `down`; `chaosbed run` of the shipped scenarios/jgroups5-split-heal.toml (loss, a split
and its heal, checked with delivered_within and control_per_heal) passes on jgroups-5-udp, and on
jgroups-5-tcp-noxmit fails `complete` (in most runs: a race) exactly where NAKACK2 without retransmission cannot
repair the split: C's multicasts after the merge, never delivered to A and B."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from foreign.jgroups.releases import NOXMIT
from orchestration.cli.main import main
from tests.foreign.jgroups_clusters import NETNS_MISSING, skip_unless, wait_for

pytestmark = [
    pytest.mark.jgroups,
    pytest.mark.netns,
    pytest.mark.slow,
    pytest.mark.skipif(bool(NETNS_MISSING), reason=str(NETNS_MISSING)),
    skip_unless("jgroups-5-udp"),
]
REPO = Path(__file__).resolve().parents[2]
SPLIT_HEAL = REPO / "scenarios" / "jgroups5-split-heal.toml"


def chaosbed(*args: str, code: int = 0) -> Any:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == code, result.output
    return result


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_a_5x_cluster_by_hand(tmp_path: Path) -> None:
    up = chaosbed("up", "--system", "jgroups-5-nakack4", "--version", "5.5.6", "--stack", "nakack4", "--backend",
                  "netns", "--out", str(tmp_path / "run"))  # fmt: skip
    label = up.output.split("cluster ", 1)[1].split(" ", 1)[0]
    history = tmp_path / "run" / "history"
    try:
        assert "system jgroups-5-nakack4:" in up.output and "jgroups-5.5.6.Final.jar" in up.output
        assert lines(history / "A.jsonl")[0]["stack"] == "jgroups-5.5.6/nakack4"
        chaosbed("send", "A", "B", "--count", "5", "--cluster", label)
        wait_for(lambda: sum(e["event"] == "deliver" for e in lines(history / "B.jsonl")) == 5, 20, "B's 5")
        for kind, member in (("kill", "B"), ("restart", "B"), ("pause", "C"), ("resume", "C"), ("leave", "C")):
            assert f"{kind} {member}: done" in chaosbed(kind, member, "--cluster", label).output
        wait_for(lambda: [e["event"] for e in lines(history / "C.jsonl")][-2:] == ["left", "stop"], 20, "C to leave")
        wait_for(lambda: any(e["event"] == "view" and e["members"] == ["A", "B"] for e in lines(history / "A.jsonl")),
                 20, "A's view without C")  # fmt: skip
        suspects = [e for e in lines(history / "A.jsonl") if e["event"] == "suspect"]
        assert "C" not in [e["peer"] for e in suspects], suspects  # C left; B (killed) may be suspected
        status = chaosbed("status", "--cluster", label).output
        assert "system jgroups-5-nakack4 (5.5.6, nakack4)" in status
    finally:
        chaosbed("down", "--cluster", label)
    assert [e["incarnation"] for e in lines(history / "B.jsonl") if e["event"] == "start"] == [1, 2]


def test_the_split_heal_scenario_on_jgroups_5_udp(tmp_path: Path) -> None:
    out = tmp_path / "udp"
    chaosbed("run", str(SPLIT_HEAL), "--backend", "netns", "--out", str(out))
    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["ok"] and verdict["stats"]["checks"]["control_per_heal"] == {"sync": 10, "xmit": 2000}
    ran = {"name": "jgroups-5-udp", "stack": "udp-fast", "release": "5.5.6"}  # what the verdict was reached on
    assert verdict["system"] == ran and json.loads((out / "outcome.json").read_text())["system"] == ran
    assert verdict["stats"]["xmit"] > 0  # the loss made the jar retransmit, and the taps logged it
    views = [e for e in lines(out / "history" / "B.jsonl") if e["event"] == "view"]
    assert views[-1]["merge"] is True and len(views[-1]["merged_from"]) == 2


def test_nakack2_without_retransmission_cannot_repair_the_split(tmp_path: Path) -> None:
    """The real jar's outcome is not the same every run (whether TCP still delivers what C sent into the split
    before JGroups closes the connections is a race): measured 6 failing runs of 7 on netns. So up to 3 runs: one
    must fail, and every one may fail only `complete` for C's multicasts to A and B."""
    failed = 0
    for attempt in range(3):
        out = tmp_path / f"noxmit{attempt}"
        result = CliRunner().invoke(main, ["run", str(SPLIT_HEAL), "--backend", "netns", "--set",
                                           "cluster.system=jgroups-5-tcp-noxmit", "--out", str(out)])  # fmt: skip
        assert result.exit_code in (0, 1), result.output
        verdict = json.loads((out / "verdict.json").read_text())
        assert verdict["system"] == {"name": "jgroups-5-tcp-noxmit", "stack": "tcp-noxmit-fast", "release": NOXMIT}
        found = Counter((v["check"], v["sender"], v["receiver"]) for v in verdict["violations"])
        assert set(found) <= {("complete", "C", "A"), ("complete", "C", "B")}, found
        assert lines(out / "history" / "A.jsonl")[0]["release"] == NOXMIT
        if found:
            failed += 1
            break
    assert failed == 1, "the scenario passed 3 times in a row on NAKACK2 without retransmission"
