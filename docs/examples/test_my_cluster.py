"""Chaos tests of your own with the chaosbed pytest plugin (docs/pytest.md). Copy this file into your tests and run
`pytest -n 2 test_my_cluster.py` (netns as root, else the process backend; `--chaosbed-backend sim` runs it in the
deterministic simulator anywhere)."""

import pytest

# Quick failure detection, join and merge (JGroups property names), so a test takes seconds, not the defaults' tens
QUICK = {
    "nakack2": {"xmit_interval": "200ms"},
    "fd": {"interval": "0.3s", "timeout": "1s", "timeout_check_interval": "0.3s"},
    "gms": {"join_timeout": "1s", "discovery_timeout": "1s"},
    "merge": {"min_interval": "0.5s", "max_interval": "2s"},
}


@pytest.mark.chaosbed(members=3, stack="unicast3+nakack2", properties=QUICK)
def test_unicast_stream_survives_loss(chaos_cluster, history_check):
    """A streams 300 messages to B while 30% of A's packets to B are lost for a second; UNICAST3 repairs it."""
    cluster = chaos_cluster
    loss = cluster.chaos.add("loss", {"from": "A", "to": "B", "probability": 0.3})
    cluster.control("A", "send", to="B", count=300, size=100, rate=300)
    cluster.sleep(1.0)
    cluster.chaos.remove([loss.id])
    result = history_check(cluster, delivered_within="5s")
    assert result.run_stats["required"]["unicast"] == {"messages": 300, "delivered": 300}


@pytest.mark.chaosbed(members=3, stack="unicast3+nakack2", properties=QUICK)
def test_multicast_while_a_member_restarts(chaos_cluster, history_check):
    """A multicasts to the group while C is killed and restarted: every live member gets every multicast it is
    owed, in order, once, and all three end in one view (C/2 rejoined)."""
    cluster = chaos_cluster
    cluster.control("A", "multicast", count=200, size=100, rate=200)
    cluster.sleep(0.3)
    cluster.kill("C")
    cluster.wait_for_view(["A", "B"], timeout=15)
    cluster.restart("C")
    cluster.wait_for_view(["A", "B", "C"], timeout=15)
    result = history_check(cluster, views_converge="10s")
    assert result.run_stats["members"]["C"]["incarnations"] == 2
