"""The real JGroups as a chaosbed member, every member program alike (the 2.12.2 jar's and the 5.x one's, each
started through the Cluster API as `chaosbed run` starts it): three members form one view, workloads through the
control contract arrive and are logged on both sides with the jar's own seqnos, every history line passes the history
schema, SIGTERM writes `stop` and nothing after, a restarted member (B/2) appends to its history and rejoins, `leave`
and `shutdown` end a member, bad requests get ok:false while the member goes on. On the process backend (loopback)
and in network namespaces when root."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from foreign import jgroups
from foreign.jgroups import jgroups5
from foreign.jgroups.maven import jar_path
from foreign.jgroups.releases import NEWEST, Release
from node.history_format import member_problems
from orchestration.cluster import Cluster
from tests.foreign.jgroups_clusters import (
    BACKENDS,
    GENERATIONS,
    JGroupsClusters,
    events,
    history,
    history_path,
    raw,
    request,
    skip_unless,
    system,
    system_missing,
    wait_for,
    wait_tasks,
    wait_view,
)

pytestmark = [pytest.mark.jgroups, pytest.mark.slow]

NAMES = ["A", "B", "C"]
# per member program: its default stack's name in the history, the protocols its seqnos come from
PROGRAM = {
    "jgroups-2.12": {"stack": "jgroups-2.12/unicast2-fast", "unicast": "UNICAST2", "multicast": "NAKACK",
                     "system": "jgroups-2.12"},
    "jgroups-5-udp": {"stack": f"jgroups-{NEWEST}/udp-fast", "unicast": "UNICAST3", "multicast": "NAKACK2",
                      "system": f"jgroups-{NEWEST}"},
}  # fmt: skip
GENERATION_PARAMS = [pytest.param(g, marks=skip_unless(g), id=g) for g in GENERATIONS]


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


@pytest.fixture
def jclusters(tmp_path: Path) -> Iterator[JGroupsClusters]:
    made = JGroupsClusters(tmp_path)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture(scope="module", params=[(g, b) for g in GENERATION_PARAMS for b in BACKENDS],
                ids=lambda p: f"{p[0].id}-{p[1].id}")  # fmt: skip
def shared(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Cluster]]:
    """Three members of each member program's default system, shared by the tests that leave them running."""
    generation, backend = (p.values[0] for p in request.param)
    for p in request.param:
        for mark in p.marks:
            if mark.name == "skipif" and mark.args and mark.args[0]:
                pytest.skip(mark.kwargs["reason"])
    made = JGroupsClusters(tmp_path_factory.mktemp(f"{generation}-{backend}"))
    try:
        yield generation, made.start(generation, NAMES, backend)
    finally:
        made.close()


def test_three_members_form_one_view(shared: tuple[str, Cluster]) -> None:
    generation, c = shared
    view = c.wait_for_view(timeout=30)
    assert sorted(view["members"]) == NAMES
    assert view["addresses"] == view["members"]  # type: ignore[typeddict-item]  # incarnation 1: addresses are names
    assert view["view_id"].split("|")[0] == view["members"][0]  # coordinator|id, the coordinator listed first
    assert view["members"][0] == "A"  # started first, so the coordinator
    for name in NAMES:
        first, *rest = history(c, name)
        assert first["event"] == "start" and first["address"] == name and first["stack"] == PROGRAM[generation]["stack"]
        views = [e for e in rest if e["event"] == "view"]
        assert views and views[-1]["view_id"] == view["view_id"], name
        ping = c.control(name, "ping")
        assert ping == {"ok": True, "member": name, "address": name, "pid": ping["pid"], "incarnation": 1}


def test_unicast_and_multicast_workloads_arrive_and_are_logged_on_both_sides(shared: tuple[str, Cluster]) -> None:
    generation, c = shared
    before = {n: len(history(c, n)) for n in NAMES}
    assert c.control("A", "send", to="B", count=20, size=100, rate=400)["ok"]
    assert c.control("C", "multicast", count=10, size=50)["ok"]
    wait_tasks(c, "A")
    wait_tasks(c, "C")
    tasks = c.control("A", "tasks")["tasks"]
    assert {"kind": "unicast", "dest": "B", "count": 20, "sent": 20, "done": True} in tasks.values()

    def new(name: str, event: str, **match: Any) -> list[dict[str, Any]]:
        return [e for e in history(c, name)[before[name]:] if e["event"] == event
                and all(e.get(k) == v for k, v in match.items())]  # fmt: skip

    wait_for(lambda: len(new("B", "deliver", sender="A", kind="unicast")) == 20, 20, "B to deliver A's 20 unicasts")
    for name in NAMES:
        wait_for(lambda n=name: len(new(n, "deliver", sender="C")) == 10, 20, f"{name} to deliver C's 10")

    # unicast: the receiver logs the sender's seqno and conn_id, which are the unicast protocol's, for each msg_id
    sends = {e["msg_id"]: e for e in new("A", "send", kind="unicast")}
    assert len(sends) == 20
    for d in new("B", "deliver", sender="A", kind="unicast"):
        s = sends[d["msg_id"]]
        assert (d["kind"], d["dest"], d["sender_address"], d["size"]) == ("unicast", "B", "A", 100)
        assert (d["conn_id"], d["seqno"]) == (s["conn_id"], s["seqno"])
        assert s["dest_address"] == "B" and s["t"] < d["t"]
    seqnos = [e["seqno"] for e in new("A", "send", kind="unicast")]
    assert seqnos == list(range(seqnos[0], seqnos[0] + 20))  # one connection, consecutive
    assert len({s["conn_id"] for s in sends.values()}) == 1

    # multicast: the multicast protocol's seqnos; the sender delivers its own, after its send line
    msends = {e["msg_id"]: e for e in new("C", "send", kind="multicast")}
    assert len(msends) == 10
    for name in NAMES:
        for d in new(name, "deliver", sender="C"):
            s = msends[d["msg_id"]]
            assert (d["kind"], d["dest"], d["conn_id"], d["seqno"], d["size"]) == ("multicast", None, None,
                                                                                  s["seqno"], 50)  # fmt: skip
            assert s["t"] <= d["t"]
    lines = [(e["event"], e.get("msg_id")) for e in history(c, "C")]
    for msg_id in msends:
        assert lines.index(("send", msg_id)) < lines.index(("deliver", msg_id)), msg_id

    counters = c.control("A", "stats")["counters"]
    unicast = PROGRAM[generation]["unicast"]
    assert counters["member"]["unicast_protocol"] == unicast
    if generation != "jgroups-2.12":  # the jar's own count of A's unicast DATA and the tap's agree
        # the tap counts every DATA on the wire; the jar counts a message once in num_msgs_sent and each resend of it
        # (a retransmission, the resent highest seqno: UNICAST3.retransmit(Message)) in num_xmits
        jar = counters["UNICAST3"]
        assert jar["num_msgs_sent"] + jar["num_xmits"] == counters["wire"]["UNICAST3"]["sent"]["DATA"]
        assert jar["num_msgs_sent"] >= 20
    for name in NAMES:
        assert c.control(name, "flush")["ok"]
        assert_valid_history(history_path(c, name))


def test_stats_and_view_commands(shared: tuple[str, Cluster]) -> None:
    generation, c = shared
    stats = c.control("A", "stats")
    counters = stats["counters"]
    # the contract's optional usage beside the counters (outcome.json's usage, the benchmarks' RSS): a JVM's peak RSS
    # is tens of MiB at least, and the member has used some CPU by now
    assert isinstance(stats["max_rss_kib"], int) and stats["max_rss_kib"] > 10_000, stats.get("max_rss_kib")
    assert isinstance(stats["cpu_s"], float) and stats["cpu_s"] > 0, stats.get("cpu_s")
    unicast, multicast = PROGRAM[generation]["unicast"], PROGRAM[generation]["multicast"]
    assert counters["member"]["unicast_protocol"] == unicast
    assert {"xmit_reqs_sent", "xmit_reqs_received"} <= set(counters[multicast])
    assert counters["control"]["requests"] >= 1
    if generation == "jgroups-2.12":
        assert {"num_messages_sent", "number_of_retransmissions"} <= set(counters["UNICAST2"])
    else:
        assert {"num_msgs_sent", "num_xmits", "num_acks_sent", "xmit_reqs_sent"} <= set(counters["UNICAST3"])
        assert set(counters["wire"]["UNICAST3"]["sent"]) == {"DATA", "ACK", "SEND_FIRST_SEQNO", "XMIT_REQ", "CLOSE",
                                                             "other"}  # fmt: skip
        assert counters["member"]["release"] == NEWEST
    view = c.control("B", "view")
    assert sorted(view["view"]["members"]) == NAMES
    views = [e for e in history(c, "B") if e["event"] == "view"]
    assert view["view"]["merge"] is False, (view, views)  # A starts first: no member's view is a merge view


def test_bad_requests_get_errors_and_the_member_goes_on(shared: tuple[str, Cluster]) -> None:
    generation, c = shared
    assert raw(c, "A", {"token": "wrong", "cmd": "ping"}) == [{"ok": False, "error": "bad or missing token"}]
    assert raw(c, "A", {"cmd": "ping"}) == [{"ok": False, "error": "bad or missing token"}]
    reply = request(c, "A", "frobnicate")
    assert reply["ok"] is False and "unknown command" in reply["error"] and "multicast" in reply["error"]
    for cmd, args in (("close", {"peer": "B"}), ("set", {"protocol": "x", "property": "y", "value": 1}),
                      ("incarnation", {"peer": "B", "incarnation": 2})):  # fmt: skip
        reply = request(c, "A", cmd, **args)
        assert reply["ok"] is False and f"not supported by {PROGRAM[generation]['system']}" in reply["error"], reply
    for args in ({"to": "A"}, {"to": "Z"}, {"to": 5}):
        reply = request(c, "A", "send", **args)
        assert reply["ok"] is False and ("destination" in reply["error"] or "member name" in reply["error"]), reply
    for args in ({"count": -1}, {"rate": 0}, {"size": 70000}, {"count": "many"}):
        reply = request(c, "A", "multicast", **args)
        assert reply["ok"] is False and reply["error"].startswith("multicast: "), reply
    replies = raw(c, "A", b"this is not json\n", b"[1, 2]\n")
    assert replies[0]["error"].startswith("malformed request")
    assert replies[1]["error"] == "malformed request: a request is a JSON object"
    assert c.control("A", "ping")["ok"]
    assert c.control("A", "stats")["counters"]["control"]["bad_token"] >= 2


@pytest.mark.parametrize("generation", GENERATION_PARAMS)
def test_sigterm_writes_stop_last_and_a_restarted_member_rejoins_as_b2(jclusters: JGroupsClusters,
                                                                      generation: str) -> None:  # fmt: skip
    backend = "netns" if not system_missing(generation) and os.geteuid() == 0 else "process"
    c = jclusters.start(generation, NAMES, backend)
    assert c.control("B", "send", to="A", count=5, size=64)["ok"]
    wait_tasks(c, "B")
    pid = c.members["B"].pid
    c.sigterm("B")  # type: ignore[attr-defined]
    wait_for(lambda: history(c, "B")[-1]["event"] == "stop", 15, "B's stop")
    records = assert_valid_history(history_path(c, "B"))
    assert records[-1]["event"] == "stop" and records[-1]["incarnation"] == 1
    assert PROGRAM[generation]["multicast"] in records[-1]["counters"]
    assert records[-1]["counters"]["member"]["sent"] == 5
    wait_view(c, ["A", "C"])  # a crash to the group: FD_SOCK notices at once, VERIFY_SUSPECT confirms
    assert events(c, "A", "suspect", peer="B") or events(c, "C", "suspect", peer="B")
    wait_for(lambda: c.running() == ["A", "C"] and pid is not None, 10, "B to exit")

    c.restart("B", timeout=60)
    assert c.control("B", "ping")["address"] == "B/2" and c.control("B", "ping")["incarnation"] == 2
    view = c.wait_for_view(timeout=30)
    assert sorted(view["addresses"]) == ["A", "B/2", "C"]  # type: ignore[typeddict-item]
    assert c.control("A", "send", to="B", count=3, size=64)["ok"]
    wait_tasks(c, "A")
    wait_for(lambda: len(events(c, "B", "deliver", sender="A", incarnation=2)) == 3, 20, "B/2 to get A's unicasts")
    assert {e["dest_address"] for e in events(c, "A", "send", dest="B")} == {"B/2"}
    c.stop_members()
    for name in NAMES:
        assert assert_valid_history(history_path(c, name))[-1]["event"] == "stop"
    b = [(r["incarnation"], r["event"]) for r in history(c, "B")]
    starts = [i for i, (_, e) in enumerate(b) if e == "start"]
    assert [b[i][0] for i in starts] == [1, 2] and b[starts[1] - 1] == (1, "stop")
    assert history(c, "B")[starts[1]]["address"] == "B/2"


@pytest.mark.parametrize("generation", GENERATION_PARAMS)
def test_shutdown_and_leave_commands(jclusters: JGroupsClusters, generation: str) -> None:
    c = jclusters.start(generation, NAMES, "process")
    assert c.control("C", "leave") == {"ok": True}
    wait_for(lambda: [e["event"] for e in history(c, "C")][-2:] == ["left", "stop"], 20, "C to leave")
    view = wait_view(c, ["A", "B"], timeout=20)  # a graceful leave: the others install a view without C at once
    assert sorted(view["members"]) == ["A", "B"]
    assert not events(c, "A", "suspect", peer="C") and not events(c, "B", "suspect", peer="C")
    assert c.control("B", "shutdown") == {"ok": True, "bye": True}
    wait_for(lambda: history(c, "B")[-1]["event"] == "stop", 20, "B to stop after shutdown")
    for name in NAMES:
        assert_valid_history(history_path(c, name))


def _member_argv(generation: str, path: Path) -> list[str]:
    if generation == "jgroups-2.12":
        return jgroups.member_command(path)
    return [*jgroups5.system_command(Release.parse(NEWEST))[:-1], str(path)]


BAD_CONFIGS = [
    (lambda cfg: cfg.pop("mcast_port"), 'missing key "mcast_port"'),
    (lambda cfg: cfg.update(port="7800"), 'key "port" must be an integer'),
    (lambda cfg: cfg.update(stack="nope"), 'unknown stack "nope"'),
    (lambda cfg: cfg.update(address="X/2"), 'key "address" "X/2" is not the name'),
    (lambda cfg: cfg.pop("token"), "no control token"),
    (lambda cfg: cfg.update(record_messages="false"), 'key "record_messages" must be true or false, not "false"'),
]


@pytest.mark.parametrize("generation", GENERATION_PARAMS)
@pytest.mark.parametrize(("change", "message"), BAD_CONFIGS)
def test_bad_config_exits_2_naming_the_key(tmp_path: Path, generation: str, change: Any, message: str) -> None:
    cfg = {"name": "A", "ip": "127.0.0.1", "port": 7800, "history": str(tmp_path / "A.jsonl"), "incarnation": 1,
           "cluster": "c", "token": "t", "mcast_group": "239.1.2.3", "mcast_port": 7900}  # fmt: skip
    change(cfg)
    path = tmp_path / "A.json"
    path.write_text(json.dumps(cfg))
    env = {k: v for k, v in os.environ.items() if k != "CHAOSBED_TOKEN"}
    proc = subprocess.run(_member_argv(generation, path), capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr, proc.stderr
    assert "stack" in message or str(path) in proc.stderr, proc.stderr  # a config error names the file
    assert not (tmp_path / "A.jsonl").exists()  # nothing started, nothing written


@pytest.mark.parametrize("generation", GENERATION_PARAMS)
def test_malformed_config_file(tmp_path: Path, generation: str) -> None:
    path = tmp_path / "A.json"
    path.write_text('{"name": "A",, }')
    proc = subprocess.run(_member_argv(generation, path), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "is not valid JSON" in proc.stderr and "offset" in proc.stderr, proc.stderr


@skip_unless("jgroups-2.12")
def test_the_ack_based_unicast_stack(jclusters: JGroupsClusters) -> None:
    """2.12's "fixed" variant: UNICAST instead of UNICAST2; the history's seqnos are then UNICAST's."""
    c = jclusters.start("jgroups-2.12-unicast", NAMES, "process")
    assert c.control("A", "stats")["counters"]["member"]["unicast_protocol"] == "UNICAST"
    assert c.control("C", "send", to="A", count=5, size=80)["ok"]
    wait_tasks(c, "C")
    wait_for(lambda: len(events(c, "A", "deliver", sender="C", kind="unicast")) == 5, 20, "A to deliver C's unicasts")
    sends = {e["msg_id"]: (e["conn_id"], e["seqno"]) for e in events(c, "C", "send")}
    assert {e["msg_id"]: (e["conn_id"], e["seqno"]) for e in events(c, "A", "deliver", sender="C")} == sends
    assert history(c, "A")[0]["stack"] == "jgroups-2.12/unicast-fast"


@pytest.mark.parametrize("generation", GENERATION_PARAMS)
def test_record_messages_false_writes_no_send_or_deliver_lines(jclusters: JGroupsClusters, generation: str) -> None:
    """`record_messages: false` (for benchmarks, through the system's member_config): the messages flow and are
    counted, the history has start and views but no send or deliver line; with the default the same workload is
    logged, in the same run."""
    counts = {"unicast": 30, "multicast": 10}
    clusters = {r: jclusters.start(system(generation, record_messages=r), ["A", "B"], "process") for r in (False, True)}
    for c in clusters.values():
        assert c.control("A", "send", to="B", count=counts["unicast"], size=200)["ok"]
        assert c.control("A", "multicast", count=counts["multicast"], size=200)["ok"]
    for record, c in clusters.items():
        wait_tasks(c, "A")
        wait_for(lambda c=c: c.control("B", "stats")["counters"]["member"]["delivered"] == sum(counts.values()), 20,
                 f"B to deliver A's messages (record_messages={record})")  # fmt: skip
        c.stop_members()
        member = {n: history(c, n)[-1]["counters"]["member"] for n in ("A", "B")}
        assert member["A"]["sent"] == sum(counts.values()) and member["B"]["delivered"] == sum(counts.values())
        for name in ("A", "B"):
            records = assert_valid_history(history_path(c, name))
            assert {"start", "view", "stop"} <= {r["event"] for r in records}, (record, name)
            messages = [r for r in records if r["event"] in ("send", "deliver")]
            if not record:
                assert messages == [], (name, messages[:3])
                continue
            sends = [r for r in messages if r["event"] == "send"]
            assert len(sends) == (sum(counts.values()) if name == "A" else 0), name
            want = counts["multicast"] if name == "A" else sum(counts.values())
            assert len([r for r in messages if r["event"] == "deliver"]) == want, name


def test_the_jars_live_in_mavens_repository_not_in_this_one() -> None:
    path = jar_path(Release.parse(NEWEST))
    assert ".m2" in str(path) or os.environ.get("CHAOSBED_M2_REPO"), path
    repo = Path(__file__).resolve().parents[2]
    tracked = subprocess.run(["git", "-C", str(repo), "ls-files", "*.jar"], capture_output=True, text=True).stdout
    assert tracked == ""
