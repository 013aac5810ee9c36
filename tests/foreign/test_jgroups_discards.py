"""Discards in JGroups' names on the real jar's traffic, in network namespaces (root, a JDK and the jar):
- `UNICAST2.DATA(seqno=6)` from A to B is decided by the kernel alone: its u32 rule drops exactly one datagram (the
  kernel's counter), the handler judges none of A's unicasts, and B's history shows the message repaired only by A's
  next burst (JGRP-1548: nothing else asks for a lost last message);
- discard precision (bench/bench_jgroups_discard.py): over 10,000 datagrams of mixed types, kernel and handler drop
  exactly what the decoder's reading of a capture says they should, and the histories show every message delivered
  once and in order."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from chaos import kernel
from foreign import jgroups
from orchestration.backends.netns import NetnsCluster
from orchestration.systems import SYSTEMS
from orchestration.systems.clusters import new_cluster, spec_of
from tests.foreign.jgroups_clusters import NETNS_MISSING

pytestmark = [
    pytest.mark.netns,
    pytest.mark.jgroups,
    pytest.mark.slow,
    pytest.mark.skipif(bool(NETNS_MISSING), reason=str(NETNS_MISSING)),
    pytest.mark.skipif(jgroups.missing() is not None, reason=str(jgroups.missing())),
]


def wait(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what}"
        time.sleep(0.02)  # polling a condition with a deadline
    return value


def events(cluster: Any, name: str) -> list[dict[str, Any]]:
    out = []
    for line in (Path(cluster.workdir) / "history" / f"{name}.jsonl").read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def never(condition: Callable[[], Any], seconds: float) -> None:
    """The condition stays false for this long (polled): nothing repairs what is being waited for meanwhile."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert not condition()
        time.sleep(0.02)


def delivered(cluster: Any, name: str) -> dict[str, int]:
    return {e["msg_id"]: e["t"] for e in events(cluster, name) if e["event"] == "deliver"}


def test_a_seqno_discard_drops_exactly_one_datagram_in_the_kernel_and_the_history_shows_the_delay(
    tmp_path: Path,
) -> None:
    cluster = new_cluster(spec_of(SYSTEMS["jgroups-2.12"], ["A", "B"], "netns"), workdir=tmp_path / "run")
    assert isinstance(cluster, NetnsCluster)
    try:
        cluster.start(timeout=60)
        cluster.wait_for_view(timeout=60)
        record = cluster.chaos.add("discard", {"match": "UNICAST2.DATA(seqno=6)", "from": "A", "to": "B"})
        rules = kernel.installed(cluster.member_ns("B"))["iptables"]
        assert "-j DROP" in rules and "-j RETURN" in rules and "NFQUEUE" in rules, rules
        # A's connection to B carried the JOIN_RSP as #1: its unicasts #1..#5 are seqnos 2..6, the last one dropped
        cluster.control("A", "send", to="B", count=5, size=100, rate=20)
        first = [f"A>B#{i}" for i in range(1, 5)]
        wait(lambda: set(first) <= set(delivered(cluster, "B")), 20, "B to deliver A>B#1..#4")
        wait(lambda: cluster.chaos.kernel_counters()["B"]["dropped"] == 1, 10, "the kernel to drop one datagram")
        counters = cluster.chaos.kernel_counters()["B"]
        assert counters["dropped"] == 1, counters
        handler = cluster.chaos.handler_stats()["B"]["rules"][f"{record.id}:A"]
        assert handler["matched"] == 0, f"the kernel decides A's unicasts, the handler saw {handler}"
        never(lambda: "A>B#5" in delivered(cluster, "B"), 1.5)  # no retransmitter in UNICAST2's sender: JGRP-1548
        assert cluster.chaos.kernel_counters()["B"]["dropped"] == 1
        cluster.chaos.heal()
        sent_again = time.monotonic_ns()
        cluster.control("A", "send", to="B", count=5, size=100, rate=20)
        wait(lambda: {f"A>B#{i}" for i in range(1, 11)} <= set(delivered(cluster, "B")), 30, "B to deliver #5..#10")
        cluster.stop_members()
    finally:
        cluster.down()
    sends = {e["msg_id"]: e for e in events(cluster, "A") if e["event"] == "send"}
    got = delivered(cluster, "B")
    late = {m: (got[m] - sends[m]["t"]) / 1e9 for m in sends}
    assert sends["A>B#5"]["seqno"] == 6
    assert got["A>B#5"] > sent_again, "A>B#5 was repaired before A sent again"
    assert late["A>B#5"] > 1.5 and all(late[m] < 0.5 for m in late if m != "A>B#5"), late
    order = [e["msg_id"] for e in events(cluster, "B") if e["event"] == "deliver"]
    assert order == [f"A>B#{i}" for i in range(1, 11)], "B delivered in another order than A sent"


def test_discard_precision_over_ten_thousand_datagrams(tmp_path: Path) -> None:
    from bench.bench_jgroups_discard import precision

    r = precision(tmp_path / "run")
    summary = {k: v for k, v in r.items() if k != "history_violations"}
    assert r["capture_lost"] == 0, f"the capture lost frames: the truth it counts is short ({summary})"
    assert r["datagrams"] >= 10_000 and r["unreadable"] == 0, summary
    assert r["wrong_drops"] == 0 and r["missed_drops"] == 0, summary
    assert r["a_probes"] > 0 and r["kernel_dropped"] <= r["a_probes"], summary
    before, after = r["c_nakack_matched"]
    assert before <= r["c_nakack_msgs"] <= after, summary
    assert r["history_violations"] == [], r["history_violations"][:5]
