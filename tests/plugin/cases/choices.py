"""Backend choice, skips and bad arguments: nothing here checks histories (no Spark)."""

import os

import pytest

os.geteuid = lambda: 1000  # as an unprivileged user: the netns backend cannot run


@pytest.mark.chaosbed(members=2, stack="unicast3", backend="sim")
def test_marker_backend_wins(chaos_cluster):
    assert chaos_cluster.backend_name == "sim"
    assert chaos_cluster.spec.members == ["A", "B"]


@pytest.mark.chaosbed(members=["x", "y", "z"], stack="unicast3")
def test_option_backend(chaos_cluster):
    assert chaos_cluster.backend_name == "process"
    assert sorted(chaos_cluster.running()) == ["x", "y", "z"]


@pytest.mark.chaosbed(backend="docker")
def test_docker(chaos_cluster):
    raise AssertionError("must be skipped")


@pytest.mark.chaosbed(backend="netns")
def test_netns_unprivileged(chaos_cluster):
    raise AssertionError("must be skipped")


@pytest.mark.chaosbed(members=0)
def test_bad_members(chaos_cluster):
    raise AssertionError("must not run")


@pytest.mark.chaosbed(size=3)
def test_unknown_argument(chaos_cluster):
    raise AssertionError("must not run")


@pytest.mark.chaosbed(backend="nope")
def test_unknown_backend(chaos_cluster):
    raise AssertionError("must not run")
