"""The real JGroups 2.12.2 jar as a chaosbed member (foreign/jgroups/): three members form one view, workloads through
the control contract arrive and are logged on both sides with the jar's own seqnos, every history line passes the
history schema, SIGTERM writes `stop` and nothing after, a restarted member (B/2) appends to its history and rejoins,
and bad requests get ok:false while the member goes on. On loopback, and in network namespaces when root."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from foreign import jgroups
from foreign.jgroups.launch import JGroupsCluster, wait_until
from node.history_format import member_problems
from tests.foreign.conftest import MODES, NETNS_MISSING, assert_removed

pytestmark = [pytest.mark.jgroups, pytest.mark.slow]

NAMES = ["A", "B", "C"]


def events(c: JGroupsCluster, name: str, event: str, **match: Any) -> list[dict[str, Any]]:
    return [e for e in c.history(name) if e["event"] == event and all(e.get(k) == v for k, v in match.items())]


def assert_valid_history(path: Path) -> list[dict[str, Any]]:
    """Every line is whole and passes the schema; each incarnation starts with `start` and, if it has a `stop`,
    writes nothing after it (the next line, if any, is the next incarnation's `start`)."""
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b"", f"{path}: the last line is cut off"
    records = [json.loads(raw) for raw in lines[:-1]]
    problems = [f"line {i + 1}: {p}" for i, r in enumerate(records) for p in member_problems(r)]
    assert not problems, f"{path}:\n" + "\n".join(problems)
    for i, r in enumerate(records):
        where = f"{path} line {i + 1}"
        if i == 0 or records[i - 1]["event"] == "stop":
            assert r["event"] == "start", f"{where}: an incarnation starts with {r['event']}, not start"
        if r["event"] == "start" and i > 0:
            assert r["incarnation"] > records[i - 1]["incarnation"], f"{where}: a start of an older incarnation"
        elif i > 0:
            assert r["incarnation"] == records[i - 1]["incarnation"], f"{where}: another incarnation without start"
    return records


@pytest.fixture(scope="module", params=MODES)
def cluster(request: pytest.FixtureRequest) -> Iterator[JGroupsCluster]:
    """Three members (unicast2-fast), shared by the tests of this module that leave them running."""
    missing = jgroups.missing()
    if missing:
        pytest.skip(missing)
    c = JGroupsCluster(NAMES, mode=request.param)
    try:
        c.start()
        c.wait_view(timeout=30)
        yield c
    finally:
        c.close()
        assert_removed(c)


def test_three_members_form_one_view(cluster: JGroupsCluster) -> None:
    view = cluster.wait_view(timeout=30)
    assert sorted(view["members"]) == NAMES
    assert view["addresses"] == view["members"]  # incarnation 1: addresses are the names
    assert view["view_id"].split("|")[0] == view["members"][0]  # coordinator|id, the coordinator listed first
    for name in NAMES:
        first, *rest = cluster.history(name)
        assert first["event"] == "start" and first["address"] == name and first["stack"] == "jgroups-2.12/unicast2-fast"
        views = [e for e in rest if e["event"] == "view"]
        assert views and views[-1]["view_id"] == view["view_id"], name
        ping = cluster.control(name, "ping")
        assert ping == {"ok": True, "member": name, "address": name, "pid": cluster.members[name].proc.pid,
                        "incarnation": 1}  # fmt: skip


def test_unicast_and_multicast_workloads_arrive_and_are_logged_on_both_sides(cluster: JGroupsCluster) -> None:
    c = cluster
    assert c.control("A", "send", to="B", count=20, size=100, rate=400) == {"ok": True, "task": 1}
    assert c.control("C", "multicast", count=10, size=50) == {"ok": True, "task": 1}
    tasks = c.wait_tasks("A")
    assert tasks == {"1": {"kind": "unicast", "dest": "B", "count": 20, "sent": 20, "done": True}}
    assert c.wait_tasks("C") == {"1": {"kind": "multicast", "dest": None, "count": 10, "sent": 10, "done": True}}
    wait_until(lambda: len(events(c, "B", "deliver", sender="A")) == 20, 20, "B to deliver A's 20 unicasts")
    for name in NAMES:
        wait_until(lambda n=name: len(events(c, n, "deliver", sender="C")) == 10, 20, f"{name} to deliver C's 10")

    # unicast: the receiver logs the sender's seqno and conn_id, which are UNICAST2's, for each msg_id
    sends = {e["msg_id"]: e for e in events(c, "A", "send", kind="unicast")}
    assert sorted(sends) == sorted(f"A>B#{i}" for i in range(1, 21))
    for d in events(c, "B", "deliver", sender="A"):
        s = sends[d["msg_id"]]
        assert (d["kind"], d["dest"], d["sender_address"], d["size"]) == ("unicast", "B", "A", 100)
        assert (d["conn_id"], d["seqno"]) == (s["conn_id"], s["seqno"])
        assert s["dest_address"] == "B" and s["t"] < d["t"]
    seqnos = [sends[f"A>B#{i}"]["seqno"] for i in range(1, 21)]
    assert seqnos == list(range(seqnos[0], seqnos[0] + 20))  # one connection, consecutive
    assert len({s["conn_id"] for s in sends.values()}) == 1

    # multicast: NAKACK seqnos, the sender delivers its own, after its send line (pitfall a)
    msends = {e["msg_id"]: e for e in events(c, "C", "send", kind="multicast")}
    assert sorted(msends) == sorted(f"C>*#{i}" for i in range(1, 11))
    for name in NAMES:
        for d in events(c, name, "deliver", sender="C"):
            s = msends[d["msg_id"]]
            assert (d["kind"], d["dest"], d["conn_id"], d["seqno"], d["size"]) == ("multicast", None, None,
                                                                                  s["seqno"], 50)  # fmt: skip
            assert s["t"] <= d["t"]
    lines = [(e["event"], e.get("msg_id")) for e in c.history("C")]
    for msg_id in msends:
        assert lines.index(("send", msg_id)) < lines.index(("deliver", msg_id)), msg_id

    for name in NAMES:
        assert c.control(name, "flush")["ok"]
        assert_valid_history(c.members[name].history)  # type: ignore[arg-type]


def test_stats_and_view_commands(cluster: JGroupsCluster) -> None:
    stats = cluster.control("A", "stats")
    assert stats["ok"]
    counters = stats["counters"]
    assert counters["member"]["unicast_protocol"] == "UNICAST2"
    assert {"xmit_reqs_sent", "xmit_reqs_received", "current_seqno"} <= set(counters["NAKACK"])
    assert {"num_messages_sent", "number_of_retransmissions"} <= set(counters["UNICAST2"])
    assert counters["control"]["requests"] >= 1
    view = cluster.control("B", "view")
    assert view["ok"] and sorted(view["view"]["members"]) == NAMES
    # start() starts A before the others, so B and C join A's view and no view is a merge view
    views = [e for e in cluster.history("B") if e["event"] == "view"]
    assert view["view"]["merge"] is False, (view, views)


def test_bad_requests_get_errors_and_the_member_goes_on(cluster: JGroupsCluster) -> None:
    c = cluster
    assert c.request("A", {"token": "wrong", "cmd": "ping"}) == {"ok": False, "error": "bad or missing token"}
    assert c.request("A", {"cmd": "ping"}) == {"ok": False, "error": "bad or missing token"}
    reply = c.control("A", "frobnicate")
    assert reply["ok"] is False and "unknown command" in reply["error"] and "multicast" in reply["error"]
    for cmd, args in (("close", {"peer": "B"}), ("set", {"protocol": "x", "property": "y", "value": 1}),
                      ("incarnation", {"peer": "B", "incarnation": 2})):  # fmt: skip
        reply = c.control("A", cmd, **args)
        assert reply["ok"] is False and "not supported by jgroups-2.12" in reply["error"], reply
    for args in ({"to": "A"}, {"to": "Z"}, {"to": 5}):
        reply = c.control("A", "send", **args)
        assert reply["ok"] is False and ("destination" in reply["error"] or "member name" in reply["error"]), reply
    for args in ({"count": -1}, {"rate": 0}, {"size": 70000}, {"count": "many"}):
        reply = c.control("A", "multicast", **args)
        assert reply["ok"] is False and reply["error"].startswith("multicast: "), reply
    with c.connect("A") as s:
        s.sendall(b"this is not json\n[1, 2]\n")
        with s.makefile("rb") as f:
            assert json.loads(f.readline())["error"].startswith("malformed request")
            assert json.loads(f.readline())["error"] == "malformed request: a request is a JSON object"
    assert c.control("A", "ping")["ok"]
    assert c.control("A", "stats")["counters"]["control"]["bad_token"] >= 2


def test_sigterm_writes_stop_last_and_a_restarted_member_rejoins_as_b2(make_jgroups: Any) -> None:
    c = make_jgroups(NAMES, mode="auto")
    c.start()
    c.wait_view(timeout=30)
    assert c.control("B", "send", to="A", count=5, size=64)["ok"]
    c.wait_tasks("B")
    assert c.terminate("B") == 0
    records = assert_valid_history(c.members["B"].history)
    assert records[-1]["event"] == "stop" and records[-1]["incarnation"] == 1
    assert "NAKACK" in records[-1]["counters"] and records[-1]["counters"]["member"]["sent"] == 5
    c.wait_view(["A", "C"], timeout=30)  # FD_SOCK notices at once, VERIFY_SUSPECT confirms

    m = c.restart("B")
    assert m.address == "B/2"
    assert c.control("B", "ping") == {"ok": True, "member": "B", "address": "B/2", "pid": m.proc.pid,
                                      "incarnation": 2}  # fmt: skip
    view = c.wait_view(timeout=30)
    assert sorted(view["addresses"]) == ["A", "B/2", "C"]
    assert c.control("A", "send", to="B", count=3, size=64)["ok"]
    c.wait_tasks("A")
    wait_until(lambda: len(events(c, "B", "deliver", sender="A", incarnation=2)) == 3, 20, "B/2 to get A's unicasts")
    assert {e["dest_address"] for e in events(c, "A", "send", dest="B")} == {"B/2"}
    c.stop_all()
    for name in NAMES:
        records = assert_valid_history(c.members[name].history)
        assert records[-1]["event"] == "stop"
    b = [(r["incarnation"], r["event"]) for r in c.history("B")]
    starts = [i for i, (_, e) in enumerate(b) if e == "start"]
    assert [b[i][0] for i in starts] == [1, 2] and b[starts[1] - 1] == (1, "stop")
    assert c.history("B")[starts[1]]["address"] == "B/2"


def test_shutdown_and_leave_commands(make_jgroups: Any) -> None:
    c = make_jgroups(NAMES, mode="loopback")
    c.start()
    c.wait_view(timeout=30)
    assert c.control("C", "leave") == {"ok": True}
    wait_until(lambda: not c.members["C"].running(), 20, "C to exit after leaving")
    tail = [e["event"] for e in c.history("C")][-2:]
    assert tail == ["left", "stop"]
    view = c.wait_view(["A", "B"], timeout=20)  # a graceful leave: the others install a view without C at once
    assert sorted(view["members"]) == ["A", "B"]
    assert c.control("B", "shutdown") == {"ok": True, "bye": True}
    wait_until(lambda: not c.members["B"].running(), 20, "B to exit after shutdown")
    assert c.history("B")[-1]["event"] == "stop"
    for name in NAMES:
        assert_valid_history(c.members[name].history)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda cfg: cfg.pop("mcast_port"), 'missing key "mcast_port"'),
        (lambda cfg: cfg.update(port="7800"), 'key "port" must be an integer'),
        (lambda cfg: cfg.update(stack="nope"), 'unknown stack "nope"'),
        (lambda cfg: cfg.update(address="X/2"), 'key "address" "X/2" is not the name'),
        (lambda cfg: cfg.pop("token"), "no control token"),
        (lambda cfg: cfg.update(record_messages="false"), 'key "record_messages" must be true or false, not "false"'),
    ],
)
def test_bad_config_exits_2_naming_the_key(jgroups_built: None, tmp_path: Path, change: Any, message: str) -> None:
    cfg = {"name": "A", "ip": "127.0.0.1", "port": 7800, "history": str(tmp_path / "A.jsonl"), "incarnation": 1,
           "cluster": "c", "token": "t", "mcast_group": "239.1.2.3", "mcast_port": 7900}  # fmt: skip
    change(cfg)
    path = tmp_path / "A.json"
    path.write_text(json.dumps(cfg))
    env = {k: v for k, v in os.environ.items() if k != "CHAOSBED_TOKEN"}
    proc = subprocess.run(jgroups.member_command(path), capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr, proc.stderr
    assert "stack" in message or str(path) in proc.stderr, proc.stderr  # a config error names the file
    assert not (tmp_path / "A.jsonl").exists()  # nothing started, nothing written


def test_malformed_config_file(jgroups_built: None, tmp_path: Path) -> None:
    path = tmp_path / "A.json"
    path.write_text('{"name": "A",, }')
    proc = subprocess.run(jgroups.member_command(path), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "is not valid JSON" in proc.stderr and "offset" in proc.stderr, proc.stderr


def test_the_ack_based_unicast_stack(make_jgroups: Any) -> None:
    """The "fixed" variant: UNICAST instead of UNICAST2; the history's seqnos are then UNICAST's."""
    c = make_jgroups(NAMES, mode="loopback", stack="unicast-fast")
    c.start()
    c.wait_view(timeout=30)
    assert c.control("A", "stats")["counters"]["member"]["unicast_protocol"] == "UNICAST"
    assert c.control("C", "send", to="A", count=5, size=80)["ok"]
    c.wait_tasks("C")
    wait_until(lambda: len(events(c, "A", "deliver", sender="C")) == 5, 20, "A to deliver C's unicasts")
    sends = {e["msg_id"]: (e["conn_id"], e["seqno"]) for e in events(c, "C", "send")}
    assert {e["msg_id"]: (e["conn_id"], e["seqno"]) for e in events(c, "A", "deliver", sender="C")} == sends
    assert c.history("A")[0]["stack"] == "jgroups-2.12/unicast-fast"
    c.stop_all()
    for name in NAMES:
        assert_valid_history(c.members[name].history)


def test_record_messages_false_writes_no_send_or_deliver_lines(make_jgroups: Any) -> None:
    """`record_messages: false` (for benchmarks): the messages flow and are counted, the history has start and views
    but no send or deliver line; with the default (true) the same workload is logged, in the same run."""
    counts = {"unicast": 30, "multicast": 10}
    clusters = {r: make_jgroups(["A", "B"], mode="loopback", config={"record_messages": r}) for r in (False, True)}
    for c in clusters.values():
        c.start()
        c.wait_view(timeout=30)
        assert c.control("A", "send", to="B", count=counts["unicast"], size=200)["ok"]
        assert c.control("A", "multicast", count=counts["multicast"], size=200)["ok"]
    for record, c in clusters.items():
        c.wait_tasks("A")
        wait_until(
            lambda c=c: c.control("B", "stats")["counters"]["member"]["delivered"] == sum(counts.values()),
            20,
            f"B to deliver A's messages (record_messages={record})",
        )
        c.stop_all()
        member = {n: c.history(n)[-1]["counters"]["member"] for n in ("A", "B")}
        assert member["A"]["sent"] == sum(counts.values()) and member["B"]["delivered"] == sum(counts.values())
        for name in ("A", "B"):
            records = assert_valid_history(c.members[name].history)  # type: ignore[arg-type]
            kinds = {r["event"] for r in records}
            assert {"start", "view", "stop"} <= kinds, (record, name, kinds)
            messages = [r for r in records if r["event"] in ("send", "deliver")]
            if record:
                want = sum(counts.values()) if name == "A" else 0
                assert len([r for r in messages if r["event"] == "send"]) == want, name
                assert len([r for r in messages if r["event"] == "deliver"]) == (
                    counts["multicast"] if name == "A" else sum(counts.values())
                ), name
            else:
                assert messages == [], (name, messages[:3])


@pytest.mark.netns
@pytest.mark.skipif(NETNS_MISSING is not None, reason=str(NETNS_MISSING))
def test_a_split_and_its_heal_complete_in_seconds_with_the_fast_stack(make_jgroups: Any) -> None:
    """C is cut off from A and B (iptables in the namespaces): both sides install their own views, and after the
    heal MERGE2 merges them; the merge view is logged with merge=true and the views it merged."""
    c = make_jgroups(NAMES, mode="netns")
    c.start()
    c.wait_view(timeout=30)
    ip = {n: m.ip for n, m in c.members.items()}
    rules = [("C", ip["A"]), ("C", ip["B"]), ("A", ip["C"]), ("B", ip["C"])]
    for member, src in rules:
        c.ns_run(member, "iptables", "-I", "INPUT", "-s", src, "-p", "udp", "-j", "DROP")
    try:
        c.wait_view(["A", "B"], timeout=20)
        c.wait_view(["C"], timeout=20)
    finally:
        for member, src in rules:
            c.ns_run(member, "iptables", "-D", "INPUT", "-s", src, "-p", "udp", "-j", "DROP")
    view = c.wait_view(timeout=30)
    assert view["merge"] is True
    for name in NAMES:
        merge = events(c, name, "view", view_id=view["view_id"])
        assert len(merge) == 1 and merge[0]["merge"] is True and len(merge[0]["merged_from"]) == 2, merge
    c.stop_all()
    for name in NAMES:
        assert_valid_history(c.members[name].history)
