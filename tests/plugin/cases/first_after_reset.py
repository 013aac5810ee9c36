"""JGRP-1563 (scenarios/bugs/unicast2-first-after-reset.toml) as a user's chaos test: the flawed UNICAST2 variant
fails its delivered_within check, the fixed one passes. Copied into a temporary folder as a test file."""

import pytest

SETTINGS = {"xmit_interval": "200ms", "stable_interval": "1s"}


def acknowledged(cluster, name):
    """Every task of the member done and nothing it sent unacknowledged."""
    tasks = cluster.control(name, "tasks")["tasks"].values()
    waiting = cluster.control(name, "stats")["counters"]["waiting_on"]
    return all(t["done"] for t in tasks) and not any(waiting.values())


def first_message_after_reset(cluster, history_check):
    """Both ends close their connection, and the first message of A's new connection to B is dropped."""
    cluster.control("A", "send", to="B", count=50, size=100, rate=100)
    cluster.wait_until(lambda: acknowledged(cluster, "A"), 10, "A's stream acknowledged")
    cluster.chaos.add("discard", {"match": "UNICAST2.DATA(first=1)", "from": "A", "to": "B", "count": 1})
    cluster.control("A", "close", peer="B")
    cluster.control("B", "close", peer="A")
    cluster.sleep(1.0)
    cluster.control("A", "send", to="B", count=1, size=100)
    cluster.sleep(3.0)  # the flawed variant repairs the first message only when A sends again
    cluster.control("A", "send", to="B", count=20, size=100, rate=100)
    return history_check(cluster, delivered_within="2s")


@pytest.mark.chaosbed(members=2, stack="unicast2", properties={"unicast2": {**SETTINGS, "resend_first_msg": False}})
def test_flawed(chaos_cluster, history_check):
    first_message_after_reset(chaos_cluster, history_check)


@pytest.mark.chaosbed(members=2, stack="unicast2", properties={"unicast2": {**SETTINGS, "resend_first_msg": True}})
def test_fixed(chaos_cluster, history_check):
    result = first_message_after_reset(chaos_cluster, history_check)
    assert result.run_stats["required"]["unicast"] == {"messages": 71, "delivered": 71}
