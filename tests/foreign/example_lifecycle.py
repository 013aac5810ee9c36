"""The example system (examples/naive_rb) through a cluster's whole life, shared by the process/netns tests
(tests/foreign/test_example_system.py) and the docker ones (tests/docker/test_foreign_docker.py): a workload through
the control contract, a one-way partition and its heal (where the backend has a network), a kill and a restart; then
the checker must find exactly the violations naive-rb's flaw causes."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from orchestration.runner import run
from orchestration.scenario import load, parse

REPO = Path(__file__).resolve().parents[2]
NAIVE_RB = {"command": ["python3", str(REPO / "examples" / "naive_rb" / "member.py"), "{config}"], "stack": "naive"}
SCENARIO = REPO / "examples" / "naive_rb" / "one_way.toml"
# what the flaw does to the example's one-way partition (examples/naive_rb/one_way.toml): A's ten unicasts to B in
# it are lost (FIFO gaps: B delivers A's later ones), B's ten to A whose acks were lost are delivered twice
FLAW = {"fifo": 10, "exactly_once": 10}


def wait(condition: Any, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)  # polling a condition with a deadline


def settled(cluster: Any) -> bool:
    """Every send task done and nothing unacknowledged (naive-rb's `unacked`: acked, or given up after its retry)."""
    running = [n for n in cluster.running() if not cluster.members[n].paused]
    tasks = [t for n in running for t in cluster.control(n, "tasks")["tasks"].values()]
    unacked = [cluster.control(n, "stats")["counters"]["unacked"] for n in running]
    return all(t["done"] for t in tasks) and not any(unacked)


def exchange(cluster: Any, pairs: tuple[tuple[str, str], ...] = (("A", "B"), ("B", "A")), count: int = 10) -> None:
    for sender, dest in pairs:
        cluster.control(sender, "send", to=dest, count=count, size=100, rate=50)
    wait(lambda: settled(cluster), f"the sends {pairs}")


def lifecycle(cluster: Any, partition: bool) -> None:
    """Workloads, a multicast, (a one-way partition B does not hear A, and its heal), C killed and restarted."""
    exchange(cluster)
    cluster.control("A", "multicast", count=5, size=50)
    wait(lambda: settled(cluster), "the multicasts")
    if partition:
        cluster.chaos.add("partition", {"from": ["A"], "to": ["B"], "one_way": True})
        exchange(cluster)
        cluster.chaos.heal()
    cluster.kill("C")
    assert "C" not in cluster.running()
    cluster.restart("C")
    assert cluster.members["C"].incarnation == 2 and "C" in cluster.running()
    assert cluster.control("C", "ping")["address"] == "C/2"
    exchange(cluster, (("A", "B"), ("B", "A"), ("C", "A"), ("A", "C")))


def counts(verdict: dict[str, Any]) -> dict[str, int]:
    found: dict[str, int] = {}
    for v in verdict["violations"]:
        found[v["check"]] = found.get(v["check"], 0) + 1
    return found


def restarted_history(path: Path) -> list[tuple[int, str]]:
    """(incarnation, event) of the start and stop lines of a member's history."""
    events = [json.loads(x) for x in path.read_text().splitlines() if x.endswith("}")]
    return [(e["incarnation"], e["event"]) for e in events if e["event"] in ("start", "stop")]


def run_scenario(backend: str, out: Path, system: str = "naive-rb") -> dict[str, Any]:
    """examples/naive_rb/one_way.toml on `backend` (or, system "chaosbed", the same schedule on chaosbed's own
    member), checked; returns verdict.json."""
    from analysis.command import check

    sc = load(SCENARIO)
    if system == "chaosbed":
        raw = dict(sc.raw)
        raw["cluster"] = {k: v for k, v in raw["cluster"].items() if k != "member"} | {"system": "chaosbed"}
        sc = parse(raw)
    run(sc, backend, out)
    assert check(out) in (0, 1)
    return json.loads((out / "verdict.json").read_text())
