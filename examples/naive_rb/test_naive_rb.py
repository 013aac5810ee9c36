"""Your own system under chaos with the chaosbed pytest plugin: naive-rb (member.py) under a one-way partition.

B stops hearing A. naive-rb's unicasts from A to B are lost (one retry, then given up) and B's unicasts to A arrive
but their acks do not, so B's retry is delivered a second time. The checker finds exactly that: ten FIFO gaps from
A to B, ten duplicates at A. The same test on chaosbed's own member passes. Run it as root (network namespaces):

    pytest examples/naive_rb/test_naive_rb.py
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

NAIVE_RB = {"command": ["python3", str(Path(__file__).with_name("member.py")), "{config}"], "stack": "naive-rb-v1"}


def wait(condition: Any, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)  # polling a condition with a deadline


def sent_and_settled(cluster: Any) -> bool:
    """Every send task done, and nothing unacknowledged: naive-rb's `stats` counts `unacked`, 0 once each message
    was acked or given up after its retry (chaosbed's own members retry until the heal, and report no `unacked`)."""
    for name in cluster.running():
        if not all(t["done"] for t in cluster.control(name, "tasks")["tasks"].values()):
            return False
    return all(cluster.control(n, "stats")["counters"].get("unacked", 0) == 0 for n in cluster.running())


def exchange(cluster: Any, count: int = 10) -> None:
    for sender, dest in (("A", "B"), ("B", "A")):
        cluster.control(sender, "send", to=dest, count=count, size=100, rate=50)


@pytest.mark.parametrize(
    "expected",
    [
        pytest.param(
            {"fifo": 10, "exactly_once": 10},
            marks=pytest.mark.chaosbed(members=3, system="naive-rb", member=NAIVE_RB, backend="netns"),
            id="naive-rb",
        ),
        pytest.param({}, marks=pytest.mark.chaosbed(members=3, stack="unicast3", backend="netns"), id="chaosbed"),
    ],
)
def test_one_way_partition(chaos_cluster: Any, history_check: Any, expected: dict[str, int]) -> None:
    cluster = chaos_cluster
    exchange(cluster)  # before the partition: everything arrives
    wait(lambda: sent_and_settled(cluster), "the first messages")
    cluster.chaos.add("partition", {"from": ["A"], "to": ["B"], "one_way": True})  # B stops hearing A
    exchange(cluster)
    wait(lambda: sent_and_settled(cluster), "the sends during the partition (naive-rb: retried once, given up)")
    cluster.chaos.heal()
    exchange(cluster)  # after the heal
    if not expected:
        history_check(cluster)  # passes: fails the test with every violation otherwise
        return
    with pytest.raises(pytest.fail.Exception) as failure:
        history_check(cluster)
    verdict = json.loads((Path(cluster.workdir) / "verdict.json").read_text())
    found: dict[str, int] = {}
    for v in verdict["violations"]:
        found[v["check"]] = found.get(v["check"], 0) + 1
    assert found == expected, str(failure.value)
    gaps = {(v["sender"], v["receiver"]) for v in verdict["violations"] if v["check"] == "fifo"}
    duplicates = {(v["sender"], v["receiver"]) for v in verdict["violations"] if v["check"] == "exactly_once"}
    assert gaps == {("A", "B")} and duplicates == {("B", "A")}
