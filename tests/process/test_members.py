"""Real member processes on real sockets: the process backend (loopback) and the netns backend (as root)."""

from __future__ import annotations

import contextlib
import json
import random
import socket
from collections import defaultdict
from pathlib import Path

import pytest

from node import wire
from orchestration.backends.netns import in_namespace
from orchestration.cluster import ClusterError
from tests.clean_unicast2 import STACKS, assert_a_clean_unicast2_run_passes
from tests.clusters import BACKENDS, read_history

pytestmark = pytest.mark.slow


def delivered_counts(cluster, name: str) -> int:
    return cluster.control(name, "stats")["counters"]["unicast3"]["msgs_delivered"]


def check_unicast_histories(cluster, expected: dict[tuple[str, str], int]) -> None:
    """From the histories alone: per (sender, receiver, conn) seqnos 1..n in order, every msg_id sent delivered once."""
    sends, delivers = {}, defaultdict(list)
    for name, m in cluster.members.items():
        for e in read_history(m.history):
            if e["event"] == "send":
                sends[e["msg_id"]] = e
            elif e["event"] == "deliver":
                delivers[(e["sender"], name, e["conn_id"])].append(e)
    got: dict[tuple[str, str], int] = defaultdict(int)
    for (sender, receiver, _conn), events in delivers.items():
        seqnos = [e["seqno"] for e in events]
        assert seqnos == list(range(seqnos[0], seqnos[0] + len(seqnos))), f"{sender}->{receiver}: not FIFO"
        ids = [e["msg_id"] for e in events]
        assert len(ids) == len(set(ids)), f"{sender}->{receiver}: duplicates"
        assert all(i in sends for i in ids), f"{sender}->{receiver}: phantom deliveries"
        got[(sender, receiver)] += len(events)
    assert dict(got) == expected


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("transport", ["udp", "tcp"])
def test_unicast_streams_are_delivered_exactly_once_in_order(make_cluster, backend: str, transport: str) -> None:
    cluster = make_cluster(backend, 3, transport=transport)
    pairs = [("A", "B"), ("C", "B"), ("B", "A")]
    for s, d in pairs:
        cluster.control(s, "send", to=d, count=10_000, size=100)
    cluster.wait_until(
        lambda: delivered_counts(cluster, "B") == 20_000 and delivered_counts(cluster, "A") == 10_000,
        120,
        "all 30,000 unicasts to be delivered",
    )
    cluster.stop_members()
    check_unicast_histories(cluster, {p: 10_000 for p in pairs})
    for m in cluster.members.values():
        assert read_history(m.history)[-1]["event"] == "stop"


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_datagrams_and_bad_commands_do_not_disturb_a_member(make_cluster, backend: str) -> None:
    cluster = make_cluster(backend, 2)
    b = cluster.members["B"]
    rng = random.Random(1)
    good = wire.encode_datagram(cluster.label, "A", "B", [wire.header_class("UNICAST3", "CLOSE")(12345)])
    bad = [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300))) for _ in range(200)]
    bad += [good[:n] for n in range(len(good))]
    bad += [bytes([good[0], wire.WIRE_VERSION + 1, *good[2:]])]
    send_raw_datagrams(cluster, "A", (b.ip, b.port), bad)
    cluster.wait_until(
        lambda: cluster.control("B", "stats")["counters"]["stack"]["malformed_datagrams"] == len(bad),
        20,
        "B to count every malformed datagram",
    )
    # bad control requests get an error reply and the member goes on
    with cluster._connect(b, 5) as s:
        f = s.makefile("rwb")
        for line in (
            b"not json\n",
            b"[1,2]\n",
            json.dumps({"token": "wrong", "cmd": "stats"}).encode() + b"\n",
            json.dumps({"token": cluster.token, "cmd": "explode"}).encode() + b"\n",
            json.dumps({"token": cluster.token, "cmd": "send"}).encode() + b"\n",
            json.dumps({"token": cluster.token, "cmd": "send", "to": "Z"}).encode() + b"\n",
            json.dumps(
                {"token": cluster.token, "cmd": "set", "protocol": "unicast3", "property": "nope", "value": 1}
            ).encode()
            + b"\n",
        ):
            f.write(line)
            f.flush()
            reply = json.loads(f.readline())
            assert reply["ok"] is False and reply["error"]
    with pytest.raises(ClusterError, match="unknown command"):
        cluster.control("B", "explode")
    control = cluster.control("B", "stats")["counters"]["control"]
    assert control["malformed"] == 2 and control["bad_token"] == 1 and control["errors"] >= 4
    # the cluster still works
    cluster.control("A", "send", to="B", count=1000, size=10)
    cluster.wait_until(lambda: delivered_counts(cluster, "B") == 1000, 30, "delivery after the garbage")


def send_raw_datagrams(cluster, from_member: str, target: tuple[str, int], datagrams: list[bytes]) -> None:
    """Sends raw bytes to a member's data port from inside the sender's network (its namespace for netns)."""
    m = cluster.members[from_member]
    with in_namespace(m.netns) if m.netns else contextlib.nullcontext():
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with s:
        for d in datagrams:
            s.sendto(d, target)


@pytest.mark.parametrize("backend", BACKENDS)
def test_kill_leaves_a_readable_history_and_down_cleans_up(make_cluster, backend: str) -> None:
    cluster = make_cluster(backend, 2)
    cluster.control("A", "send", to="B", count=100_000, size=100, rate=20_000)
    cluster.wait_until(lambda: delivered_counts(cluster, "B") > 1000, 30, "traffic to flow")
    cluster.kill("B")
    events = read_history(cluster.members["B"].history)
    assert events and events[-1]["event"] != "stop"  # no stop event after SIGKILL
    assert "B" not in cluster.running() and "A" in cluster.running()
    cluster.pause("A")
    cluster.resume("A")
    assert cluster.control("A", "ping")["member"] == "A"


@pytest.mark.parametrize("backend", BACKENDS)
def test_kill_and_restart_is_a_new_incarnation_that_receives_new_messages(make_cluster, backend: str) -> None:
    cluster = make_cluster(backend, 2, properties={"unicast3": {"max_retransmit_time": "3s", "xmit_interval": "200ms"}})
    cluster.control("A", "send", to="B", count=500, size=50)
    cluster.wait_until(lambda: delivered_counts(cluster, "B") == 500, 30, "the first 500")
    cluster.kill("B")
    cluster.control("A", "send", to="B", count=50, size=50)  # to the dead incarnation
    cluster.restart("B")
    assert cluster.control("B", "ping")["address"] == "B/2"
    cluster.control("A", "send", to="B", count=500, size=50)
    cluster.wait_until(lambda: delivered_counts(cluster, "B") == 500, 30, "500 messages to the new incarnation")
    # A gives up the connection to the dead incarnation (max_retransmit_time), so it goes quiet
    cluster.wait_until(
        lambda: cluster.control("A", "stats")["counters"]["unicast3"]["conns_removed_unacked"] == 1,
        30,
        "A to drop its connection to the dead incarnation",
    )
    cluster.stop_members()
    events = read_history(cluster.members["B"].history)
    incarnations = [e["incarnation"] for e in events if e["event"] == "deliver"]
    assert incarnations.count(1) == 500 and incarnations.count(2) == 500
    new_ids = [e["msg_id"] for e in events if e["event"] == "deliver" and e["incarnation"] == 2]
    assert len(set(new_ids)) == 500 and all(i.startswith("A>B#") for i in new_ids)


@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_clean_unicast2_run_with_default_properties_passes(backend: str, stack: str, tmp_path: Path) -> None:
    """Quiet is what the checks need (every message delivered, nothing missing), not UNICAST2's lazy purge."""
    assert_a_clean_unicast2_run_passes(stack, backend, tmp_path / "run")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_restarted_member_resumes_its_share_of_the_workload(backend: str, tmp_path: Path) -> None:
    """Killed at 1 s and restarted at 2 s, A's second incarnation sends the messages due from 2 s on (paced), and
    with B deaf to A until 3 s, the unpaced share's rest (read from A's tasks just before the kill)."""
    from analysis.reference import check_path
    from orchestration.runner import run
    from orchestration.scenario import parse

    faults: list[dict[str, object]] = [
        {"at": "1s", "kind": "kill", "member": "B"},
        {"at": "1s", "kind": "kill", "member": "A"},
        {"at": "2s", "kind": "restart", "member": "A"},
        {"at": "2s", "kind": "restart", "member": "B"},
    ]
    if backend == "netns":  # A deaf to B until 3 s: B's unpaced stream waits at its flow-control window
        faults.insert(0, {"at": "0s", "kind": "partition", "from": ["B"], "to": ["A"], "one_way": True, "for": "3s"})
    raw: dict[str, object] = {
        "name": "resume",
        "timeout": "40s",
        "cluster": {"members": 2, "stack": "unicast3", "properties": {"unicast3": {"xmit_interval": "100ms"}}},
        "workload": [
            {"kind": "unicast", "from": "A", "to": "B", "count": 300, "rate": 100, "size": 50},
            {"kind": "unicast", "from": "B", "to": "A", "count": 30000, "size": 50},
        ],
        "faults": faults,
    }
    outcome = run(parse(raw), backend, tmp_path / "run")
    assert not outcome.timed_out
    out = tmp_path / "run"

    def sends(member: str, dest: str) -> dict[int, int]:
        counts: dict[int, int] = defaultdict(int)
        for e in read_history(str(out / "history" / f"{member}.jsonl")):
            if e["event"] == "send" and e.get("dest") == dest:
                counts[e["incarnation"]] += 1
        return dict(counts)

    a = sends("A", "B")
    assert 90 <= a[1] <= 101 and a[2] == 100, a  # paced: due before 1 s, then from 2 s on (messages 200..299)
    b = sends("B", "A")
    assert b[1] + b.get(2, 0) == 30000, b  # unpaced: the rest of what the first incarnation had not sent
    (result,) = check_path(out).values()
    assert result.violations == [], [v.line() for v in result.violations]
