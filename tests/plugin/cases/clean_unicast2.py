"""A healthy UNICAST2 cluster with default properties: five unicasts, no fault. history_check passes at once (it
waited for UNICAST2's first STABLE round, 60 s away, and failed with a timeout after its 30 s quiet_within)."""

import pytest


@pytest.mark.chaosbed(members=2, stack="unicast2")
def test_unicast2(chaos_cluster, history_check):
    chaos_cluster.control("A", "send", to="B", count=5)
    result = history_check(chaos_cluster)
    assert result.run_stats["required"]["unicast"] == {"messages": 5, "delivered": 5}


@pytest.mark.chaosbed(members=2, stack="unicast2+nakack2")
def test_unicast2_nakack2(chaos_cluster, history_check):
    chaos_cluster.control("A", "send", to="B", count=5)
    chaos_cluster.control("B", "multicast", count=5)
    result = history_check(chaos_cluster, quiet_within="20s")
    assert result.run_stats["required"]["unicast"] == {"messages": 5, "delivered": 5}
