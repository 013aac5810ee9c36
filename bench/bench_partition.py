"""Recovery after a partition on real members in network namespaces (root): how fast a split is seen, how fast the
healed cluster merges, and how long delivery stalls after the heal.

The anchor, measured on this machine kind with the real JGroups 2.12.2 (Debian's libjgroups-java) in three network
namespaces on a bridge, FD_ALL interval 1 s / timeout 3 s, VERIFY_SUSPECT 1 s, MERGE2 2-5 s:
- a full split of one member is seen on both sides after 4.4-5.7 s (median 5.7 s);
- heal -> merged view on all three: 3.4 s (range 1.0-5.6 s over 12 repetitions).
The same timeouts in chaosbed's properties: FD interval 1 s, timeout 3 s (chaosbed's FD has no VERIFY_SUSPECT
step: a suspect is excluded at once, which gives chaosbed up to 1 s on the split), MERGE min/max interval 2 s / 5 s.

Each repetition: three members form one view; 2 s later A starts streaming unicasts to C and multicasts to all, each
at 1,000 msgs/s; 1 s later C is cut off by a full partition, which holds until both sides have installed views
without each other (plus 1 s); then it is healed. Everything is read from the members' histories (CLOCK_MONOTONIC,
the clock of the fault times): the split as seen by A/B and by C, heal -> one view of all three, and the stall: from
the heal until C has delivered every unicast A sent during the split, and every multicast A sent during the split
that C delivers at all (multicasts to a view without C are not C's to deliver; their count is printed). The one-way
variant (C deaf to A only) prints what the views do and the stall.
Run: python -m bench.bench_partition [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import report
from orchestration.backends.netns import NetnsCluster, check_netns_available
from orchestration.cluster import Cluster, ClusterSpec, Properties

PROPERTIES = {
    "fd": {"interval": "1s", "timeout": "3s", "timeout_check_interval": "0.5s"},
    "merge": {"min_interval": "2s", "max_interval": "5s"},
    "gms": {"join_timeout": "1s", "discovery_timeout": "1s"},
}
RATE = 1_000  # msgs/s, each stream
STREAM_S = 30  # long enough to outlast split, heal and merge
NS = 1_000_000_000


@dataclass
class Outcome:
    split_ab: float | None  # s from the cut until A and B both have a view without C
    split_c: float | None  # s from the cut until C has a view without A and B
    merged: float | None  # s from the heal until all three have one view of all three
    stall_unicast: float | None  # s from the heal until C delivered A's last unicast sent during the split
    stall_multicast: float | None  # s from the heal until C delivered the split's multicasts it delivers at all
    resume_multicast: float | None  # s from the heal until C delivered a multicast A sent after the heal
    multicasts_not_for_c: int  # sent by A during the split, never delivered by C
    final_views: dict[str, str]


def events(folder: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.endswith("}"):
                out.append(json.loads(line))
    return sorted(out, key=lambda e: e["t"])


def first_time(
    evs: list[dict[str, Any]], after: int, member: str, pred: Callable[[dict[str, Any]], bool]
) -> int | None:
    return next((e["t"] for e in evs if e["t"] >= after and e["member"] == member and pred(e)), None)


def measure(evs: list[dict[str, Any]], cut: int, heal: int) -> Outcome:
    def without_c(e: dict[str, Any]) -> bool:
        return e["event"] == "view" and "C" not in e["members"]

    def alone(e: dict[str, Any]) -> bool:
        return e["event"] == "view" and e["members"] == ["C"]

    def since(t: int | None, t0: int) -> float | None:
        return None if t is None else (t - t0) / NS

    ab = [first_time(evs, cut, m, without_c) for m in ("A", "B")]
    c = first_time(evs, cut, "C", alone)
    last_view: dict[str, dict[str, Any]] = {}
    merged_at = None
    for e in evs:
        if e["event"] != "view":
            continue
        last_view[e["member"]] = e
        if e["t"] >= heal and len(last_view) == 3:
            ids = {v["view_id"] for v in last_view.values()}
            if len(ids) == 1 and set(next(iter(last_view.values()))["members"]) == {"A", "B", "C"}:
                merged_at = merged_at or e["t"]
    during = [e for e in evs if e["member"] == "A" and e["event"] == "send" and cut <= e["t"] < heal]
    delivered_at_c = {e["msg_id"]: e["t"] for e in evs if e["member"] == "C" and e["event"] == "deliver"}
    uni = [m for m in during if m.get("dest") == "C"]
    multi = [m for m in during if m["dest"] is None]
    uni_done = [delivered_at_c.get(m["msg_id"]) for m in uni]
    multi_done = [delivered_at_c[m["msg_id"]] for m in multi if m["msg_id"] in delivered_at_c]
    after = [e for e in evs if e["member"] == "A" and e["event"] == "send" and e["t"] >= heal and e["dest"] is None]
    resumed = min((delivered_at_c[m["msg_id"]] for m in after if m["msg_id"] in delivered_at_c), default=None)
    return Outcome(
        split_ab=since(max(ab), cut) if None not in ab else None,  # type: ignore[type-var]
        split_c=since(c, cut),
        merged=since(merged_at, heal),
        stall_unicast=max(0.0, since(max(uni_done), heal) or 0.0) if uni and None not in uni_done else None,  # type: ignore[type-var]
        stall_multicast=max(0.0, since(max(multi_done), heal) or 0.0) if multi_done else None,
        resume_multicast=since(resumed, heal),
        multicasts_not_for_c=len(multi) - len(multi_done),
        final_views={m: f"{v['view_id']} {''.join(v['members'])}" for m, v in sorted(last_view.items())},
    )


def chaosbed_cluster(workdir: Path, properties: Properties = PROPERTIES) -> Cluster:
    """Three of chaosbed's members (unicast3+nakack2) with these properties, in namespaces; not started."""
    spec = ClusterSpec(["A", "B", "C"], stack="unicast3+nakack2", properties=properties, backend="netns")
    return NetnsCluster(spec, workdir=workdir)


def one_run(
    workdir: Path,
    one_way: bool,
    cluster_of: Callable[[Path], Cluster] = chaosbed_cluster,
    stream_s: int = STREAM_S,
    heal_after_s: float = 1.0,
) -> Outcome:
    """One repetition on the cluster `cluster_of(workdir)` makes (members A, B, C; any system with views and the
    control contract), A's streams lasting `stream_s` seconds, the heal `heal_after_s` after both sides saw the
    split (a merge checker that runs on a fixed period from the start meets a heal at a fixed schedule's instant at
    the same phase every time: a varied delay spreads the heal over its period)."""
    shutil.rmtree(workdir, ignore_errors=True)  # a member appends to its history: an earlier run's would mix in
    with cluster_of(workdir) as cluster:
        cluster.start(timeout=60)
        cluster.wait_for_view(["A", "B", "C"], timeout=30)
        cluster.sleep(2.0)
        cluster.control("A", "send", to="C", count=RATE * stream_s, size=100, rate=RATE)
        cluster.control("A", "multicast", count=RATE * stream_s, size=100, rate=RATE)
        cluster.sleep(1.0)
        cut = cluster.clock.now_ns()
        if one_way:
            cluster.chaos.add("partition", {"from": ["A"], "to": ["C"], "one_way": True})
            cluster.sleep(8.0)  # what the views do in that time is part of the result
        else:
            cluster.chaos.add("partition", {"from": ["C"], "to": ["A", "B"]})

            def split() -> bool:
                views = cluster.views()
                return all(v and "C" not in v["members"] for n, v in views.items() if n != "C") and bool(
                    views.get("C") and views["C"]["members"] == ["C"]
                )

            cluster.wait_until(split, 30, "both sides to see the split")
            cluster.sleep(heal_after_s)
        heal = cluster.clock.now_ns()
        cluster.chaos.heal()

        def streamed() -> bool:
            return all(t["done"] for t in cluster.control("A", "tasks")["tasks"].values())

        cluster.wait_until(streamed, stream_s + 30, "A's streams")
        cluster.sleep(3.0)  # retransmissions of the last messages
        cluster.stop_members()
        return measure(events(workdir / "history"), cut, heal)


def summary(name: str, values: list[float | None], anchor: str = "") -> None:
    got = [v for v in values if v is not None]
    if not got:
        print(f"{name:<58} {'n/a':>14} (never, in {len(values)} runs)")
        return
    rng = f"range {min(got):.2f}-{max(got):.2f} s over {len(got)}" + (
        "" if len(got) == len(values) else f" of {len(values)}"
    )
    report(name, statistics.median(got), "s", f"({rng}){anchor}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("runs/bench-partition"))
    args = ap.parse_args(argv)
    check_netns_available()
    full = [one_run(args.out / f"full-{i}", one_way=False) for i in range(args.repeats)]
    print(f"full partition of C, {args.repeats} runs (fd 1s/3s, merge 2-5s), medians:")
    summary("split seen by A and B", [o.split_ab for o in full], "  JGroups: median 5.7 s (4.4-5.7)")
    summary("split seen by C", [o.split_c for o in full])
    summary("heal -> one view on all three", [o.merged for o in full], "  JGroups: 3.4 s (1.0-5.6)")
    summary("stall after the heal, unicast A -> C", [o.stall_unicast for o in full], "  target <= 2 x xmit + 0.1 s")
    summary("stall after the heal, multicast A -> C", [o.stall_multicast for o in full])
    summary("multicast from A resumes at C after the heal", [o.resume_multicast for o in full])
    print(f"  multicasts A sent during the split that C never delivered: {[o.multicasts_not_for_c for o in full]}")
    one = [one_run(args.out / f"oneway-{i}", one_way=True) for i in range(args.repeats)]
    print(f"one-way partition, C deaf to A for 8 s, {args.repeats} runs:")
    summary("split seen by A and B", [o.split_ab for o in one])
    summary("C alone", [o.split_c for o in one])
    summary("heal -> one view on all three", [o.merged for o in one])
    summary("stall after the heal, unicast A -> C", [o.stall_unicast for o in one])
    summary("stall after the heal, multicast A -> C", [o.stall_multicast for o in one])
    summary("multicast from A resumes at C after the heal", [o.resume_multicast for o in one])
    for i, o in enumerate(one):
        lost = o.multicasts_not_for_c
        print(f"  run {i}: final views {o.final_views}; multicasts of the split C never delivered: {lost}")


if __name__ == "__main__":
    main()
