"""The process backend places a cluster on a subnet whose addresses are free: a member of a killed run can outlive its
cluster's claim (the claim lapses with its owner) and still hold 127.77.S.10's ports; a new cluster that claimed S
would then fail at start with EADDRINUSE."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestration.backends import process
from orchestration.cluster import ClusterSpec
from orchestration.host import claims


@pytest.fixture
def two_subnets(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """claims.claim hands out index 41, then 42 (as a real claim would after a release), recording what it gave."""
    given: list[int] = []

    def claim(label: str, kind: str, space: int, state_dir: Path) -> int:
        given.append(41 if not given else 42)
        return given[-1]

    monkeypatch.setattr(claims, "claim", claim)
    yield given


def test_a_subnet_whose_address_is_held_is_passed_over(two_subnets: list[int], tmp_path: Path) -> None:
    held = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        held.bind(("127.77.42.10", process.DATA_PORT))  # index 41 is subnet 42: a leftover member's socket
        cluster = process.ProcessCluster(ClusterSpec(members=["A", "B"]), label="cbtest01", workdir=tmp_path)
        cluster._place(["A", "B"])
    finally:
        held.close()
    assert two_subnets == [41, 42]
    assert [m.ip for m in cluster.members.values()] == ["127.77.43.10", "127.77.43.11"]


def test_a_free_subnet_is_taken_at_once(two_subnets: list[int], tmp_path: Path) -> None:
    cluster = process.ProcessCluster(ClusterSpec(members=["A"]), label="cbtest02", workdir=tmp_path)
    cluster._place(["A"])
    assert two_subnets == [41] and cluster.members["A"].ip == "127.77.42.10"
