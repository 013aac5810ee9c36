"""Parity: the demo's partition-heal (4 members on 2 engines; loss, a discard, a delay and a one-way partition, then
the heal) and one-way-split (3 members) give the same verdict on the swarm backend as on netns: the shipped
scenarios, unchanged, pass on both, and the run on the swarm logged its faults with the hosts' clocks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.reference import check_path
from orchestration.backends.swarm_hosts import SwarmDescription
from orchestration.runner import run
from orchestration.scenario import load
from tests.swarm.conftest import needs_swarm

pytestmark = needs_swarm
SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def verdict(out: Path, timed_out: bool) -> tuple[bool, set[str]]:
    (result,) = check_path(out).values()
    checks = {v.check for v in result.violations} | ({"timeout"} if timed_out else set())
    return not checks, checks


@pytest.mark.parametrize("name", ["partition-heal", "one-way-split"])
def test_same_verdict_on_netns_and_swarm(name: str, swarm: SwarmDescription, tmp_path: Path) -> None:
    outcomes = {}
    for backend in ("netns", "swarm"):
        out = tmp_path / backend
        outcome = run(load(SCENARIOS / f"{name}.toml"), backend, out)
        outcomes[backend] = verdict(out, outcome.timed_out)
        log = [json.loads(line) for line in (out / "faults.jsonl").read_text().splitlines()]
        assert log[0]["event"] == "start" and log[0]["backend"] == backend
        assert all("at" in e and "t" in e for e in log[1:]), log
    assert outcomes["swarm"] == outcomes["netns"] == (True, set()), outcomes
    start = json.loads((tmp_path / "swarm" / "faults.jsonl").read_text().splitlines()[0])
    assert set(start["clocks"]) == {h.name for h in swarm.hosts}
    histories = {p.stem for p in (tmp_path / "swarm" / "history").glob("*.jsonl")}
    assert histories == set(load(SCENARIOS / f"{name}.toml").members), histories
