"""The chaos agent's wire without a swarm (the swarm tests run it for real): a request's fields are checked by type,
the replies the orchestrator reads by field (orchestration/agent/replies.py) come back through JSON as the
orchestrator's types, and a swarm cluster's state file gives back its placement and host clocks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chaos.fault_table import QueueBypass
from chaos.faults import ChaosError, FaultRecord
from chaos.normalize import normalize
from orchestration.agent.client import HostClock
from orchestration.agent.replies import StatsReply, bypass_reply
from orchestration.agent.server import Agent
from orchestration.backends.swarm import SwarmCluster
from orchestration.backends.swarm_faults import SwarmFaultTable
from orchestration.cluster import ClusterSpec

NAMES = ["A", "B", "C"]


class _Host:
    """What the agent's requests ask of a Host, answered without an engine."""

    name = "h1"

    def cluster(self, label: object) -> object:
        return label

    def renew(self, c: object) -> dict[str, object]:
        return {"lease_s": 1.0, "expired_at": None}

    def member(self, c: object, name: str, action: str, timeout: float) -> dict[str, object]:
        return {"state": action, "timeout": timeout}


def _handle(**req: object) -> dict[str, object]:
    return Agent(_Host(), "secret").handle({"token": "secret", "cluster": "cb1", **req})


def test_a_request_field_of_the_wrong_type_is_a_bad_request_naming_it() -> None:
    assert _handle(cmd="member", name="A", action="state") == {"ok": True, "state": "state", "timeout": 10.0}
    assert _handle(cmd="member", name="A", action="state", timeout=3)["timeout"] == 3.0
    assert _handle(cmd="member", name=1, action="state") == {"ok": False, "error": "member: name must be str, not 1"}
    reply = _handle(cmd="member", name="A", action="state", timeout=None)
    assert reply == {
        "ok": False,
        "error": "member: bad request (TypeError: timeout must be a number of seconds, not None)",
    }


def test_the_stats_of_every_host_come_back_as_the_orchestrators_types(tmp_path: Path) -> None:
    loss = FaultRecord("f1", normalize("loss", {"from": "A", "to": "B", "probability": 0.5}, NAMES), seed=3)
    split = FaultRecord("f2", normalize("split", {"groups": [["A"], ["B", "C"]]}, NAMES))
    bypass = QueueBypass("B", 100, 3, 20, 1, ["f1"])
    assert json.dumps(bypass_reply(bypass)) == json.dumps(vars(bypass))  # the JSON the agent sent before

    def stats(handled: dict[str, int], member: str) -> StatsReply:
        reply: StatsReply = {
            "faults": [loss.with_handled(handled).to_json(), split.to_json()],
            "kernel": {member: {"drop": 2}},
            "bypass": {member: bypass_reply(bypass)},
        }
        return json.loads(json.dumps(reply))

    class _Agent:
        def __init__(self, reply: StatsReply) -> None:
            self.reply = reply

        def request(self, cmd: str, **args: object) -> StatsReply:
            return self.reply

    agents = {"h1": _Agent(stats({"dropped": 3}, "A")), "h2": _Agent(stats({"dropped": 2, "delayed": 5}, "B"))}
    table = SwarmFaultTable(tmp_path, "cb1", NAMES, "udp", agents, {}, dict)
    with table._locked() as state:
        state.faults = [loss, split]
    assert [(r.id, r.handled) for r in table.faults()] == [("f1", {"dropped": 5, "delayed": 5}), ("f2", None)]
    assert table.kernel_counters() == {"A": {"drop": 2}, "B": {"drop": 2}}
    assert table.queue_bypass() == {"A": bypass, "B": bypass}


def test_a_swarm_clusters_state_gives_back_its_hosts() -> None:
    clocks = {"h1": HostClock(5, 100, False, 5), "h2": HostClock(0, 10, True, 3)}
    network = {"placement": {"A": "h1", "B": "h2"}, "history_dirs": {"h1": "/h"}, "leaving": ["B"],
               "clocks": {h: c.to_json() for h, c in clocks.items()}}  # fmt: skip
    cluster = SwarmCluster(ClusterSpec(["A", "B"], "s", "udp", {}, "swarm"), label="cbtest")
    cluster._restore_network(json.loads(json.dumps(network)))
    assert (cluster.placement, cluster.history_dirs, cluster._leaving) == ({"A": "h1", "B": "h2"}, {"h1": "/h"}, {"B"})
    assert cluster.clocks == clocks
    with pytest.raises(TypeError, match="placement"):
        cluster._restore_network({"placement": {"A": 1}})
    with pytest.raises(TypeError, match="not a host clock"):
        HostClock.from_json({"offset_ns": 1})


def test_a_push_fails_at_once_on_a_host_the_lease_renewal_lost_and_still_reaches_the_others(tmp_path: Path) -> None:
    """A stopped agent would hold a push for its whole timeout (twice: the add, then its undo): a host already lost
    is not asked, the push names it, and the hosts that answer get the table (and its undo)."""
    pushed: dict[str, list[int]] = {"h1": [], "h2": []}

    class _Agent:
        def __init__(self, host: str) -> None:
            self.host = host

        def request(self, cmd: str, **args: object) -> dict[str, object]:
            assert self.host != "h2", "a lost host was asked"
            pushed[self.host].append(len(args["records"]))  # type: ignore[arg-type]
            return {"ok": True}

    lost = {"h2": "host h2 is lost: its agent at 10.0.0.2:7790 did not answer 'lease' (timed out)"}
    table = SwarmFaultTable(tmp_path, "cb1", NAMES, "udp", {h: _Agent(h) for h in pushed}, {}, dict, lost)
    with pytest.raises(ChaosError, match=r"^host h2 is lost: its agent at 10.0.0.2:7790"):
        table.add("loss", {"from": "C", "to": "B", "probability": 0.5})
    assert pushed == {"h1": [1, 0], "h2": []}
    with table._locked() as state:
        assert state.faults == []
    lost["h2"] = "host h2: the lease ran out and its agent healed the cluster's faults there"
    with pytest.raises(ChaosError, match=r"^host h2 is lost: host h2: the lease ran out"):
        table.add("loss", {"from": "C", "to": "B", "probability": 0.5})
