"""The example of a user's own system (examples/naive_rb) on the process and netns backends: up, workloads through the
control contract, a one-way partition and its heal (netns), kill and restart, checked; the example scenario finds
exactly the flaw's violations, and passes on chaosbed's own member. (Docker: tests/docker/test_foreign_docker.py.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.clusters import netns_skip_reason
from tests.foreign.example_lifecycle import FLAW, NAIVE_RB, counts, lifecycle, restarted_history, run_scenario

NETNS = [pytest.mark.netns, pytest.mark.skipif(netns_skip_reason() is not None, reason=str(netns_skip_reason()))]
pytestmark = pytest.mark.spark


@pytest.mark.parametrize(
    ("partition", "expected"),
    [
        pytest.param(False, {}, marks=pytest.mark.chaosbed(system="naive-rb", member=NAIVE_RB, backend="process"),
                     id="process"),
        pytest.param(True, FLAW, marks=[pytest.mark.chaosbed(system="naive-rb", member=NAIVE_RB, backend="netns"),
                                        *NETNS], id="netns"),
    ],
)  # fmt: skip
def test_the_example_through_a_cluster_life(
    chaos_cluster: Any, history_check: Any, partition: bool, expected: dict[str, int]
) -> None:
    lifecycle(chaos_cluster, partition)
    if expected:
        with pytest.raises(pytest.fail.Exception):
            history_check(chaos_cluster)
    else:
        history_check(chaos_cluster)
    verdict = json.loads((Path(chaos_cluster.workdir) / "verdict.json").read_text())
    assert counts(verdict) == expected
    assert verdict["stats"]["members"]["C"]["incarnations"] == 2
    c = restarted_history(Path(chaos_cluster.workdir) / "history" / "C.jsonl")
    assert c == [(1, "start"), (2, "start"), (2, "stop")]  # killed: no stop of incarnation 1


@pytest.mark.netns
@pytest.mark.skipif(netns_skip_reason() is not None, reason=str(netns_skip_reason()))
@pytest.mark.parametrize(("system", "expected"), [("naive-rb", FLAW), ("chaosbed", {})])
def test_the_example_scenario(tmp_path: Path, system: str, expected: dict[str, int]) -> None:
    verdict = run_scenario("netns", tmp_path / "run", system)
    assert counts(verdict) == expected, verdict["violations"][:3]
    if system == "naive-rb":
        pairs = {(v["check"], v["sender"], v["receiver"]) for v in verdict["violations"]}
        assert pairs == {("fifo", "A", "B"), ("exactly_once", "B", "A")}
        assert sorted(v["seqno"] for v in verdict["violations"] if v["check"] == "fifo") == list(range(11, 21))


@pytest.mark.chaosbed(system="naive-rb", member=NAIVE_RB, backend="netns")
@pytest.mark.netns
@pytest.mark.skipif(netns_skip_reason() is not None, reason=str(netns_skip_reason()))
def test_what_the_system_cannot_do_is_refused_on_a_running_cluster(chaos_cluster: Any) -> None:
    """As when a scenario is loaded: no discard without a wire profile, no chaosbed command to a foreign member."""
    from click.testing import CliRunner

    from orchestration.cli.main import main
    from orchestration.cluster import ClusterError

    with pytest.raises(ClusterError, match="discard is refused for system 'naive-rb': it has no wire profile"):
        chaos_cluster.chaos.add("discard", {"match": "UNICAST3.ACK()"})
    with pytest.raises(ClusterError, match="'set' is chaosbed's own command, not the control contract's"):
        chaos_cluster.control("A", "set", protocol="unicast3", property="xmit_interval", value="1s")
    cli = CliRunner().invoke(main, ["fault", "discard", "UNICAST3.ACK()", "--cluster", chaos_cluster.label])
    assert cli.exit_code == 2 and "discard is refused for system 'naive-rb'" in cli.output
    assert not (Path(chaos_cluster.workdir) / "faults.jsonl").read_text().count('"discard"')
