"""Discard precision on the real JGroups 2.12.2 jar's traffic (root, a JDK and the jar): how many datagrams the
jgroups-2.12 rules drop that they should not, counted against what the decoder reads on the wire and what the
members' histories say arrived.

Three members of jgroups-2.12 (A the coordinator) on the netns backend; at B, four discard rules:
- A -> B `PING.GET_MBRS_REQ()` (stateless: u32 drops A's MERGE2/discovery probes in the kernel; harmless: B just does
  not answer them) and `UNICAST2.DATA(seqno=1000000000)` (stateless, never matches: A's unicasts are decided by the
  kernel's RETURN rules and never queued);
- C -> B `NAKACK.MSG() count=5` (the handler drops the first 5 of C's multicast messages, cutting them out of bundles
  where a bundle holds more; NAKACK repairs them) and `GMS.VIEW() count=1` (handler path, never matches: no view
  change).
An AF_PACKET socket in B's namespace captures every datagram reaching B's interface (before the rules) from A and C
while the rules are in force, and chaos/profiles/jgroups212.py decodes each: that is what the rules should have
matched. A then sends B unicasts and multicasts, C multicasts, until well over 10,000 datagrams arrived.

Wrong drops = (the kernel's DROP counter - A's datagrams that are a GET_MBRS_REQ) + (the handler's drops - 5) + the
never-matching rules' drops; missed = the reverse. Besides: the handler's `matched` for C's NAKACK.MSG equals the
messages with a NAKACK.MSG header the decoder finds in C's datagrams (every one judged, none twice); and the checker
finds every message delivered exactly once and in order at every member (the 5 dropped multicasts repaired). The
counters are read just before the capture stops and again just after (background traffic arriving in between is
seen by one side only): wrong drops compare the first reading, missed ones the second.

    python -m bench.bench_jgroups_discard [--unicasts 10000] [--multicasts 3000] [--rate 1000]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import report
from chaos.profiles import jgroups212 as wire
from foreign.jgroups.wire_capture import Capture
from orchestration.backends.netns import NetnsCluster
from orchestration.cluster import Cluster
from orchestration.systems import SYSTEMS
from orchestration.systems.clusters import new_cluster, spec_of

NEVER_SEQNO = 1_000_000_000
RULES = (
    ("A", {"match": "PING.GET_MBRS_REQ()"}),
    ("A", {"match": f"UNICAST2.DATA(seqno={NEVER_SEQNO})"}),
    ("C", {"match": "NAKACK.MSG()", "count": 5}),
    ("C", {"match": "GMS.VIEW()", "count": 1}),
)


def _delivered(cluster: Cluster, name: str) -> set[str]:
    path = Path(cluster.workdir) / "history" / f"{name}.jsonl"
    out = set()
    for line in path.read_text().splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("event") == "deliver":
            out.add(str(e["msg_id"]))
    return out


def _wait(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.1)  # polling a condition with a deadline


def _truth(captured: list[dict[str, Any]], ips: dict[str, str]) -> dict[str, int]:
    """What the rules should have done, from the decoder's reading of every captured datagram."""
    out = {"datagrams": 0, "from_a": 0, "from_c": 0, "a_probes": 0, "c_nakack_msgs": 0, "unreadable": 0}
    for d in captured:
        src = {v: k for k, v in ips.items()}.get(d["src_ip"])
        if src not in ("A", "C"):
            continue
        out["datagrams"] += 1
        dg = wire.decode(d["payload"])
        if not dg.skippable:
            out["unreadable"] += 1
            continue
        keys = [[h.key for h in m.headers] for m in dg.messages]
        if src == "A":
            out["from_a"] += 1
            out["a_probes"] += len(keys) == 1 and "PING.GET_MBRS_REQ" in keys[0]
        else:
            out["from_c"] += 1
            out["c_nakack_msgs"] += sum("NAKACK.MSG" in k for k in keys)
    return out


def precision(workdir: Path, unicasts: int = 10_000, multicasts: int = 3000, rate: float = 1000) -> dict[str, Any]:
    """Runs the measurement (see the module docstring); returns its figures, `wrong_drops` and `missed_drops`."""
    cluster = new_cluster(spec_of(SYSTEMS["jgroups-2.12"], ["A", "B", "C"], "netns"), workdir=workdir)
    assert isinstance(cluster, NetnsCluster)
    try:
        cluster.start(timeout=60)
        cluster.wait_for_view(timeout=60)
        ips = {n: m.ip for n, m in cluster.members.items()}
        ids = [cluster.chaos.add("discard", {**args, "from": src, "to": "B"}).id for src, args in RULES]
        cap = Capture(cluster.member_ns("B"), reassemble=True)  # a bundle of multicasts may exceed the MTU
        try:
            sends = {
                ("A", "send"): {"to": "B", "count": unicasts, "size": 100, "rate": rate},
                ("A", "multicast"): {"count": multicasts, "size": 100, "rate": rate / 2},
                ("C", "multicast"): {"count": multicasts, "size": 100, "rate": rate / 2},
            }
            for (member, cmd), args in sends.items():
                cluster.control(member, cmd, **args)
            want = {f"A>B#{i}" for i in range(1, unicasts + 1)}
            want |= {f"{s}>*#{i}" for s in "AC" for i in range(1, multicasts + 1)}
            _wait(lambda: want <= _delivered(cluster, "B"), 300, "B to deliver every message")
            # read before and after the capture stops: background traffic (MERGE2 probes, STABLE gossip) that
            # arrives meanwhile is counted by one side only, so the truth must lie between the two readings
            kernel = cluster.chaos.kernel_counters()["B"]
            handler = cluster.chaos.handler_stats()["B"]
        finally:
            cap.stop()
        kernel_after = cluster.chaos.kernel_counters()["B"]
        rules_after = cluster.chaos.handler_stats()["B"]["rules"]
        rules = handler["rules"]
        cluster.chaos.remove(ids)
        cluster.stop_members()
    finally:
        cluster.down()
    from analysis.reference import check_path

    checked = check_path(workdir)  # the histories: every message delivered once and in order (C's 5 repaired)
    violations = [f"{v.check} {v.detail}" for res in checked.values() for v in res.violations]
    truth = _truth(cap.datagrams, ips)
    handler_drops = {rid: c["dropped"] for rid, c in rules.items()}
    never = handler_drops.get(f"{ids[1]}:A", 0) + handler_drops.get(f"{ids[3]}:C", 0)
    c_drops = handler_drops.get(f"{ids[2]}:C", 0)
    kernel_wrong = max(0, kernel["dropped"] - truth["a_probes"])  # dropped before the capture ended, yet no probe
    c_rule = f"{ids[2]}:C"
    c_judged = (rules.get(c_rule, {}).get("matched", 0), rules_after.get(c_rule, {}).get("matched", 0))
    return {
        **truth,
        "capture_lost": cap.lost,  # frames the capture's socket overflowed on: the truth would be short by them
        "kernel_dropped": kernel["dropped"],
        "kernel_queued": kernel["queued"],
        "handler_packets": handler["packets"],
        "handler_unparsed": handler["unparsed"],
        "handler_dropped": {rid: c["dropped"] for rid, c in rules.items()},
        "handler_matched": {rid: c["matched"] for rid, c in rules.items()},
        "c_nakack_matched": c_judged,  # (read before the capture stopped, after): c_nakack_msgs lies between
        "wrong_drops": kernel_wrong + max(0, c_drops - 5) + never,
        "missed_drops": max(0, truth["a_probes"] - kernel_after["dropped"]) + max(0, 5 - c_drops),
        "history_violations": violations,
        "events": sum(res.events for res in checked.values()),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--unicasts", type=int, default=10_000)
    ap.add_argument("--multicasts", type=int, default=3000)
    ap.add_argument("--rate", type=float, default=1000)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="chaosbed-discard-precision-") as tmp:
        r = precision(Path(tmp), args.unicasts, args.multicasts, args.rate)
    report("datagrams from A and C captured at B", r["datagrams"], "datagrams",
           f"(A {r['from_a']}, C {r['from_c']}; frames the capture lost: {r['capture_lost']})")  # fmt: skip
    report("kernel drops (A's GET_MBRS_REQ: decoder's count)", r["kernel_dropped"], "datagrams", f"({r['a_probes']})")
    report("datagrams queued to the handler", r["kernel_queued"], "datagrams", "(the rest decided by the kernel)")
    judged = r["c_nakack_matched"]
    report("handler: C's NAKACK.MSG messages judged", judged[0], "messages", f"(decoder {r['c_nakack_msgs']}, "
           f"{judged[1]} when the capture had stopped)")  # fmt: skip
    report("wrong drops", r["wrong_drops"], "", f"(missed: {r['missed_drops']})")
    report("violations in the histories", len(r["history_violations"]), "", f"({r['events']:,} events checked)")


if __name__ == "__main__":
    main()
