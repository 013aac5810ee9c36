"""The protocols under real chaos: streams complete and in order through loss and DISCARD rules, a NAKACK2 group
through a one-way split and its heal, and every network fault kind from a scenario file on the netns backend.
Verdicts come from the histories alone (the plain-Python reference checker, so these tests need no Spark)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from analysis.reference import check_path
from chaos import kernel
from orchestration.backends.netns import NetnsCluster
from orchestration.cluster import ClusterSpec
from orchestration.runner import run
from orchestration.scenario import parse
from tests.clusters import assert_nothing_left, chaos_tests, read_history
from tests.netns.test_faults import assert_no_rules
from tests.process.test_membership_real import FAST

pytestmark = [
    pytest.mark.netns,
    pytest.mark.slow,
    *chaos_tests(),
]


@pytest.fixture
def make(tmp_path: Path) -> Iterator:
    made: list[NetnsCluster] = []

    def start(names: str, stack: str, properties: dict | None = None) -> NetnsCluster:
        spec = ClusterSpec(list(names), stack, "udp", properties or {}, "netns")
        c = NetnsCluster(spec, workdir=tmp_path / f"c{len(made)}")
        made.append(c)
        return c.start()

    yield start
    for c in made:
        c.down()
        assert_nothing_left(c)


def stop_and_check(cluster: NetnsCluster) -> None:
    cluster.stop_members()
    results = check_path(cluster.workdir)
    violations = [v for r in results.values() for v in r.violations]
    assert not violations, [f"{v.check} {v.sender}->{v.receiver} #{v.seqno}: {v.detail}" for v in violations[:5]]


def unicast_seqnos(cluster: NetnsCluster, sender: str, receiver: str) -> list[int]:
    events = read_history(cluster.members[receiver].history)
    return [e["seqno"] for e in events if e["event"] == "deliver" and e["kind"] == "unicast" and e["sender"] == sender]


def test_unicast3_stream_under_20pct_loss_and_an_ack_discard_is_complete_and_in_order(make) -> None:
    cluster = make("AB", "unicast3", {"unicast3": {"xmit_interval": "100ms"}})
    chaos = cluster.chaos
    chaos.add("loss", {"from": ["A", "B"], "to": ["A", "B"], "probability": 0.2}, seed=1)
    stateless = chaos.add("discard", {"match": "UNICAST3.ACK(seqno=100..2000)", "from": "B", "to": "A"}, seed=2)
    counted = chaos.add("discard", {"match": "UNICAST3.ACK()", "from": "B", "to": "A", "count": 5}, seed=3)
    first, n = 150, 3000

    def stateless_drops() -> int:
        """ACKs 100..2000 alone in a datagram are dropped by the kernel's u32 rule, those bundled (with an XMIT_REQ)
        by the handler."""
        in_kernel = kernel.counters(cluster.member_ns("A"))["dropped"]
        handled = {f.id: f.handled or {} for f in chaos.faults()}
        return in_kernel + handled.get(stateless.id, {}).get("dropped", 0)

    # The first 150 alone: every ACK of B's ends in 100..150 from then on (A resends its highest unacked message
    # and B acks the duplicate), so the stateless rule must hit. Streamed at once, a starved B's cumulative ACKs
    # could jump over the whole range (5, 25, ..., 3000) and the rule would have nothing to drop.
    cluster.control("A", "send", to="B", count=first, size=100, rate=1500)
    cluster.wait_until(
        lambda: (
            cluster.control("B", "stats")["counters"]["unicast3"]["msgs_delivered"] == first and stateless_drops() > 0
        ),
        60,
        f"B delivered {first} and an ACK of 100..2000 from B was dropped",
    )
    cluster.control("A", "send", to="B", count=n - first, size=100, rate=1500)
    cluster.wait_until(
        lambda: (
            cluster.control("B", "stats")["counters"]["unicast3"]["msgs_delivered"] == n
            and not cluster.control("A", "stats")["counters"]["unacked_by_peer"].get("B")
        ),
        90,
        f"{n} unicasts delivered under loss and acked",
    )
    handled = {f.id: f.handled or {} for f in chaos.faults()}
    assert handled[counted.id].get("dropped") == 5, handled  # exactly the first five ACKs, then nothing
    chaos.heal()
    assert_no_rules(cluster)
    assert unicast_seqnos(cluster, "A", "B") == list(range(1, n + 1))
    stop_and_check(cluster)


def test_nakack2_group_under_a_one_way_split_then_heal_merges_and_delivers(make) -> None:
    cluster = make("ABCD", "unicast3+nakack2", FAST)
    cluster.wait_for_view(timeout=30)
    chaos = cluster.chaos
    # C and D stop hearing A and B; A and B still hear C and D.
    chaos.add("partition", {"from": ["A", "B"], "to": ["C", "D"], "one_way": True})
    cluster.control("A", "multicast", count=300, size=64, rate=300)
    cluster.control("C", "multicast", count=300, size=64, rate=300)

    def c_and_d_alone() -> bool:
        views = cluster.views()
        return all({m.split("/")[0] for m in (views[x] or {}).get("members", [])} <= {"C", "D"} for x in "CD")

    cluster.wait_until(c_and_d_alone, 30, "C and D to install a view without A and B")
    chaos.heal()
    view = cluster.wait_for_view(["A", "B", "C", "D"], timeout=30)
    assert view["merge"], f"the healed group installed {view}, not a merge view"
    before = {n: cluster.control(n, "stats")["counters"]["nakack2"]["msgs_delivered"] for n in "ABCD"}
    for sender in "ABCD":
        cluster.control(sender, "multicast", count=200, size=64, rate=400)
    cluster.wait_until(
        lambda: all(
            cluster.control(n, "stats")["counters"]["nakack2"]["msgs_delivered"] >= before[n] + 800 for n in "ABCD"
        ),
        60,
        "every member to deliver the 4 x 200 multicasts sent after the merge",
    )
    stop_and_check(cluster)


SCENARIO_ALL_KINDS = {
    "name": "every-network-fault",
    "seed": 11,
    "timeout": "90s",
    "cluster": {
        "members": 3,
        "stack": "unicast3",
        "properties": {"unicast3": {"xmit_interval": "100ms"}},
    },
    "workload": [{"kind": "unicast", "from": "*", "to": "*", "count": 600, "size": 64, "rate": 150}],
    "faults": [
        {"at": "0.2s", "kind": "discard", "match": "UNICAST3.ACK()", "from": "B", "to": "A", "count": 3},
        {"at": "0.3s", "kind": "loss", "from": ["A"], "to": ["B", "C"], "probability": 0.2, "for": "1s"},
        {"at": "0.5s", "kind": "delay", "from": ["B"], "to": ["C"], "delay": "30ms", "jitter": "5ms", "for": "1s"},
        {"at": "0.7s", "kind": "reorder", "from": ["C"], "to": ["A"], "probability": 0.3, "for": "1s"},
        {"at": "0.9s", "kind": "duplicate", "from": ["A"], "to": ["C"], "probability": 0.3, "for": "1s"},
        {"at": "1.5s", "kind": "partition", "from": ["A"], "to": ["B"], "one_way": True, "for": "1s"},
        {"at": "2.8s", "kind": "split", "groups": [["A"], ["B", "C"]]},
        {"at": "3.5s", "kind": "heal"},
        {
            "at": "3.6s",
            "kind": "discard",
            "match": "UNICAST3.DATA(seqno=1..400)",
            "from": "C",
            "to": "B",
            "probability": 0.5,
            "for": "0.5s",
        },
    ],
    "nemesis": [{"kind": "flapping", "start": "4.2s", "interval": "1s", "for": "0.8s", "rounds": 1}],
    "checks": {"fifo": True, "exactly_once": True, "complete": True, "no_phantoms": True},
}


def test_every_network_fault_kind_from_a_scenario_file_on_netns(tmp_path: Path) -> None:
    sc = parse(json.loads(json.dumps(SCENARIO_ALL_KINDS)))
    outcome = run(sc, "netns", tmp_path / "run")
    assert not outcome.timed_out, outcome.extra_violations
    start, *records = [json.loads(line) for line in (tmp_path / "run" / "faults.jsonl").read_text().splitlines()]
    assert start["event"] == "start" and start["backend"] == "netns"
    kinds = [r["kind"] for r in records]
    for kind in ("discard", "loss", "delay", "reorder", "duplicate", "partition", "split", "heal"):
        assert kind in kinds, f"{kind} not in faults.jsonl: {kinds}"
    timed = [r["id"] for r in records if r.get("for")]
    partial = [i for r in records if r["kind"] == "heal" for i in r.get("faults", [])]
    assert set(timed) <= set(partial), "every fault with `for` is removed again, and the removal is logged"
    assert all(r["seed"] == 11 for r in records)
    flaps = [r for r in records if r["kind"] == "partition" and r.get("for") == "0.1s"]
    assert len(flaps) == 4, "the flapping nemesis cuts its link four times"
    results = check_path(tmp_path / "run")
    violations = [v for r in results.values() for v in r.violations]
    assert not violations, [f"{v.check} {v.sender}->{v.receiver} #{v.seqno}: {v.detail}" for v in violations[:5]]


def test_the_demo_scenario_runs_clean_on_netns(tmp_path: Path) -> None:
    """`make demo` runs scenarios/partition-heal.toml: the one-way partition changes the views, the heal merges them."""
    from orchestration.cli.demo import DEMO_SCENARIO
    from orchestration.scenario import load

    outcome = run(load(DEMO_SCENARIO), "netns", tmp_path / "demo")
    assert not outcome.timed_out
    views = [
        e
        for m in "ABCD"
        for e in read_history(str(tmp_path / "demo" / "history" / f"{m}.jsonl"))
        if e["event"] == "view"
    ]
    # From 2.5 s to the heal at 5.5 s, C and D do not hear A and B: they install a view without the coordinator A.
    # Which view exactly ([C, D], or [C, B, D] when the heal comes before B is suspected too) and which intermediate
    # views the merge passes through are races between failure detection and the heal; the end state is not. So is
    # the instant: fd.timeout 2 s plus a check every 0.5 s leave 0.5-1 s of the 3 s partition, and on a loaded machine
    # (the suite under -n 2) the suspicion can land just after the heal, before A's next heartbeat: still the
    # partition's doing. Counted are the views C and D install from 2.5 s until their first merge view.
    (start,) = [json.loads(line) for line in (tmp_path / "demo" / "faults.jsonl").read_text().splitlines()[:1]]
    merged = min((v["t"] for v in views if v["merge"] and v["member"] in ("C", "D")), default=float("inf"))
    split = [v for v in views if v["t"] - start["t"] >= 2.5e9 and v["t"] < merged and v["member"] in ("C", "D")]
    assert split and all("A" not in v["members"] for v in split), "the one-way partition took A out of C's and D's view"
    assert any(v["merge"] for v in views), "the heal was followed by a merge"
    last = {v["member"]: v for v in views}  # history order: each member's last view
    assert all(len(v["members"]) == 4 for v in last.values()) and len({v["view_id"] for v in last.values()}) == 1
    results = check_path(tmp_path / "demo")
    assert not [v for r in results.values() for v in r.violations]
