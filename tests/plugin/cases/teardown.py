"""A test body that fails (or is interrupted) while its cluster runs; the outer test checks what is left."""

import json
import os
import sys

import pytest

HOW = os.environ["CASE_HOW"]  # error | interrupt
BACKEND = os.environ["CASE_BACKEND"]


@pytest.mark.chaosbed(members=3, stack="unicast3+nakack2", backend=BACKEND)
def test_body_fails(chaos_cluster):
    cluster = chaos_cluster
    if cluster.backend_name == "netns":
        cluster.chaos.add("loss", {"from": "A", "to": "B", "probability": 0.5})  # a fault handler-free kernel rule
    cluster.control("A", "send", to="B", count=100000, size=100, rate=1000)  # still running at the end
    facts = {
        "label": cluster.label,
        "state_dir": str(cluster.state_dir),
        "pids": [m.pid for m in cluster.members.values() if m.pid is not None],
    }
    with open(os.environ["CASE_FACTS"], "w") as f:
        json.dump(facts, f)
    sys.stdout.flush()
    if HOW == "interrupt":
        raise KeyboardInterrupt
    raise RuntimeError("the test body broke")
