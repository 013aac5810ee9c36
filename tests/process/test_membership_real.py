"""Real members with membership: one view, multicast + unicast streams exactly once in order, kill and rejoin."""

from __future__ import annotations

from collections import defaultdict

import pytest

from tests.clusters import BACKENDS, read_history

pytestmark = pytest.mark.slow

# Short failure detection and merge intervals: the defaults (JGroups': 40 s FD timeout) would make tests slow.
FAST = {
    "fd": {"interval": "0.5s", "timeout": "2s", "timeout_check_interval": "0.5s"},
    "merge": {"min_interval": "0.5s", "max_interval": "2s"},
    "gms": {"join_timeout": "1s", "discovery_timeout": "1s"},
}


def wait_one_view(cluster, members: set[str], timeout: float = 30) -> dict:
    return cluster.wait_for_view(sorted(members), timeout)


def delivered(cluster, name: str, protocol: str) -> int:
    return cluster.control(name, "stats")["counters"][protocol]["msgs_delivered"]


def check_histories(cluster, multicasters: list[str], unicasts: list[tuple[str, str]], count: int) -> None:
    """From the histories alone: every receiver got every multicast of each sender once, in seqno order, and each
    unicast stream once, in order; nothing that was never sent."""
    sent = set()
    mc = defaultdict(list)
    uc = defaultdict(list)
    for name, m in cluster.members.items():
        for e in read_history(m.history):
            if e["event"] == "send":
                sent.add(e["msg_id"])
            elif e["event"] == "deliver" and e["kind"] == "multicast":
                mc[(e["sender"], name)].append(e)
            elif e["event"] == "deliver":
                uc[(e["sender"], name)].append(e)
    for s in multicasters:
        for r in cluster.members:
            events = mc[(s, r)]
            seqnos = [e["seqno"] for e in events]
            assert seqnos == list(range(1, count + 1)), f"multicasts {s}->{r}: {len(seqnos)} delivered, not 1..{count}"
            assert len({e["msg_id"] for e in events}) == count
    for s, r in unicasts:
        ids = [e["msg_id"] for e in uc[(s, r)]]
        assert ids == [f"{s}>{r}#{i}" for i in range(1, count + 1)], f"unicasts {s}->{r}"
    assert all(e["msg_id"] in sent for events in (*mc.values(), *uc.values()) for e in events), "phantom"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("transport", ["udp", "tcp"])
def test_five_members_one_view_and_streams_exactly_once_in_order(make_cluster, backend: str, transport: str) -> None:
    cluster = make_cluster(backend, 5, stack="unicast3+nakack2", transport=transport, properties=FAST)
    view = wait_one_view(cluster, set("ABCDE"))
    assert len(view["members"]) == 5
    n = 10_000
    for s in ("A", "C"):
        cluster.control(s, "multicast", count=n, size=100)
    cluster.control("B", "send", to="D", count=n, size=100)
    cluster.control("E", "send", to="A", count=n, size=100)
    cluster.wait_until(
        lambda: (
            all(delivered(cluster, m, "nakack2") >= 2 * n for m in "ABCDE")
            and delivered(cluster, "D", "unicast3") >= n
            and delivered(cluster, "A", "unicast3") >= n
        ),
        120,
        "every stream to be delivered",
    )
    cluster.stop_members()
    check_histories(cluster, ["A", "C"], [("B", "D"), ("E", "A")], n)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_killed_member_is_excluded_and_rejoins_as_a_new_incarnation(make_cluster, backend: str) -> None:
    cluster = make_cluster(backend, 4, stack="unicast3+nakack2", properties=FAST)
    wait_one_view(cluster, set("ABCD"))
    cluster.kill("C")
    after_kill = wait_one_view(cluster, set("ABD"))
    assert "C" not in after_kill["members"]
    cluster.restart("C")
    rejoined = wait_one_view(cluster, set("ABCD"))
    assert "C/2" in rejoined["members"]
    before = delivered(cluster, "C", "nakack2")
    cluster.control("A", "multicast", count=1000, size=50)
    cluster.control("B", "send", to="C", count=1000, size=50)
    cluster.wait_until(
        lambda: delivered(cluster, "C", "nakack2") - before >= 1000 and delivered(cluster, "C", "unicast3") >= 1000,
        60,
        "the new incarnation to receive new multicasts and unicasts",
    )
    cluster.stop_members()
    events = read_history(cluster.members["C"].history)
    new = [e for e in events if e["event"] == "deliver" and e["incarnation"] == 2]
    assert {e["msg_id"] for e in new if e["kind"] == "unicast"} == {f"B>C#{i}" for i in range(1, 1001)}
    views_of_c2 = [e for e in events if e["event"] == "view" and e["incarnation"] == 2]
    assert views_of_c2 and "C" in views_of_c2[0]["members"]
