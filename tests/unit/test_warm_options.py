"""Warm clusters without a cluster: which schedules run fresh (a discard aimed at a seqno or a first message), the
CLI's refusals of --warm (the simulator, the wire guide, a soak), how a worker's result says it ran warm, and the
sentence a search prints."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestration.cli.main import main
from orchestration.explore.case import CaseResult, load_base, scenario_of, with_faults
from orchestration.explore.real_session import warm_line
from orchestration.explore.warm import aims_at_seqnos

REPO = Path(__file__).resolve().parents[2]
BUG = REPO / "scenarios" / "bugs" / "unicast2-last-message.toml"


def discard(match: str) -> dict[str, object]:
    return {"at": "0s", "kind": "discard", "match": match, "from": ["A"], "to": ["B"], "count": 1}


@pytest.mark.parametrize(
    "fault, fresh",
    [
        (discard("UNICAST2.DATA(seqno=50)"), True),
        (discard("UNICAST2.DATA(first=1)"), True),
        (discard("UNICAST2.DATA()"), False),
        (discard("UNICAST2.STABLE()"), False),
        ({"at": "0s", "kind": "partition", "from": ["A"], "to": ["B"], "for": "1s"}, False),
    ],
)
def test_a_discard_aimed_at_a_seqno_runs_fresh(fault: dict[str, object], fresh: bool) -> None:
    sc = scenario_of(with_faults(load_base(BUG), [fault], 1))
    assert aims_at_seqnos(sc) is fresh


@pytest.mark.parametrize(
    "args, message",
    [
        (["--warm", "5", "--schedules", "1"], "--warm is for real members"),
        (["--warm", "5", "--backend", "netns", "--guide", "wire", "--schedules", "1"], "leave out --warm or --guide"),
        (["--warm", "5", "--soak", "--backend", "netns"], "--warm is for a search"),
    ],
)
def test_the_cli_refuses_warm_where_it_cannot_be(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["explore", str(BUG), *args], terminal_width=200)
    assert result.exit_code == 2 and message in result.output, result.output


def test_a_result_says_how_it_ran_across_the_worker_pipe() -> None:
    res = CaseResult(("complete",), warm="warm-unconfirmed: complete")
    assert CaseResult.from_json(res.as_json()).warm == "warm-unconfirmed: complete"
    old = {k: v for k, v in res.as_json().items() if k != "warm"}  # a worker line without the key
    assert CaseResult.from_json(old).warm == ""


def test_the_search_says_what_its_warm_clusters_did() -> None:
    line = warm_line({"warm": 40, "fresh-seqno": 3, "warm-unconfirmed": 1}, 20)
    assert line == (
        "warm clusters (afresh every 20): run fresh (a discard aimed at a seqno) 3, run warm 40, "
        "failed warm only (not counted) 1"
    )
