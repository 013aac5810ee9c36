"""JGroups 5.5.6 next to chaosbed on equal terms, side by side in one run (root, a JDK and the jars of `make setup`).

Both sides are members that write chaosbed's histories (a line per send and delivery): chaosbed's own (node/) and the
real JGroups 5.5.6 from Maven Central as the foreign member (foreign/jgroups/, the `jgroups-5-*` systems), each
cluster of three (A, B, C) in network namespaces on its own bridge, started through the Cluster API as `chaosbed run`
starts it. The JGroups stacks are the systems' `-fast` variants of the jar's own files; chaosbed's members get the
same timings (MATCHED below). For each message size (--sizes):
- UNICAST3, A -> B: jgroups-5-udp (udp-fast: UNICAST3 + NAKACK2, UFC/MFC, the pd bundler) against chaosbed's
  unicast3+nakack2 stack (C idle on both sides);
- NAKACK2, A multicasts to A, B, C: per receiver (the slower of B and C), the same two clusters;
- NAKACK4 against MCAST: jgroups-5-nakack4 (nakack4-fast: NAKACK4 + UNICAST4, udp-new.xml's windows) against
  chaosbed's unicast3+mcast with NAKACK4's window (capacity 6000).
A rate is N / (from the `send`/`multicast` command to the receivers' `stats` showing all N), polled as bench_network
does; the receivers' `flush` counts the history lines each round wrote (1.00 per message on both sides). After one
warm-up round per side, --repeats rounds with the order of the sides alternated; ratios are medians of per-round
ratios. Then, on the first pair of clusters, each member's start (C leaves gracefully and is started again, the
sides alternated): from the spawn to its `start` line, to answering `ping` (ready: the JGroups member answers once
`connect()` returned), to its first view of all three (joined); and each side's peak RSS (the `stats` reply's
max_rss_kib) idle and under the rounds' load. Last, recovery after a full partition of C (bench_partition's
repetition with --stream-s seconds of streams, the heal 1-4.2 s after the split was seen, stepped through MERGE3's
check period round by round, the same delays on every side): heal -> one view, and the unicast and multicast stalls, on
jgroups-5-udp and on chaosbed with the same timings, chaosbed twice: with its default `merge.other_view_check_delay`
(100 ms, not in MERGE3) and with 0 (MERGE3's own timing).
Run: python -m bench.bench_jgroups5 [--messages 100000] [--repeats 5] [--sizes 100,1000] [--partition-repeats 3]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bench.bench_network as network
import bench.bench_partition as partition
from bench.bench_jgroups import Side, jgroups_cluster, jgroups_round, ratio, rotated_rounds
from bench.common import report
from foreign import jgroups
from orchestration.backends.netns import NetnsCluster, check_netns_available
from orchestration.cluster import Cluster, ClusterSpec, Properties, name_of
from orchestration.systems import SYSTEMS
from orchestration.systems.clusters import new_cluster, spec_of
from orchestration.systems.jgroups5 import missing as release_missing

UDP, NAKACK4 = "jgroups-5-udp", "jgroups-5-nakack4"
STACKS = {UDP: "udp-fast", NAKACK4: "nakack4-fast"}
NAMES = ["A", "B", "C"]
# chaosbed's properties with the timings of the -fast stacks (foreign/jgroups/stacks5/udp-fast.xml, nakack4-fast.xml):
# FD_ALL3 heartbeat 500 ms, timeout 2 s, checked every interval (FD_ALL3's getTimeoutCheckInterval is `interval`);
# MERGE3 1-2 s; GMS join_timeout 500 ms (JGroups' discovery waits join_timeout too) and merge_timeout 3 s; STABLE
# every 2 s or 4M bytes; NAKACK2, UNICAST3 and NAKACK4 retransmit every 500 ms; NAKACK4's capacity 6000 for MCAST.
# Not matched (chaosbed has no such layer): VERIFY_SUSPECT2 (500 ms more before a suspect is excluded), FD_SOCK2,
# UFC/MFC credits (chaosbed's windows are its flow control), FRAG2, RED, BARRIER, STATE_TRANSFER.
MATCHED: Properties = {
    "fd": {"interval": "0.5s", "timeout": "2s", "timeout_check_interval": "0.5s"},
    "merge": {"min_interval": "1s", "max_interval": "2s"},
    "gms": {"join_timeout": "0.5s", "discovery_timeout": "0.5s", "merge_timeout": "3s"},
    "stable": {"desired_avg_gossip": "2s", "max_bytes": 4_000_000},
    "unicast3": {"xmit_interval": "0.5s"},
    "nakack2": {"xmit_interval": "0.5s"},
    "mcast": {"xmit_interval": "0.5s", "capacity": 6000},
}
MERGE3_TIMING: Properties = {**MATCHED, "merge": {**MATCHED["merge"], "other_view_check_delay": "0s"}}
TIMINGS = (
    "fd 0.5 s / 2 s (check every 0.5 s), merge 1-2 s, gms join 0.5 s and merge_timeout 3 s, stable 2 s / 4M, "
    "xmit 0.5 s; JGroups adds VERIFY_SUSPECT2 0.5 s"
)
DIFFERENCES = f"""\
What differs between the sides (the rate's definition, the message sizes, the namespaces, the history format and
the timings above do not):
- runtime: JGroups 5.5.6 on the JVM as chaosbed starts the member ({" ".join(jgroups.JVM_OPTIONS)}; Java 17 runs
  `use_virtual_threads` on platform threads), sending from a task thread, delivering on JGroups' thread pool;
  chaosbed: CPython, one process and event loop per member.
- stack: JGroups' udp.xml / udp-new.xml around the measured protocol (RED, PING, MERGE3, FD_SOCK2, FD_ALL3,
  VERIFY_SUSPECT2, BARRIER, STABLE, GMS, UFC/MFC credit flow control, FRAG2, STATE_TRANSFER; the per-destination
  bundler); chaosbed: unicast3+nakack2 (or unicast3+mcast) with stable, gms, fd and merge, windows as flow control,
  sends bundled per destination.
- history lines: the jar's member writes every line with its own write(2) as it happens; chaosbed's member buffers
  a batch's lines and writes them in one os.write.
- what is counted: JGroups' deliveries to the member's receive(); chaosbed's protocol's msgs_delivered."""


def missing() -> str | None:
    """What this machine lacks to run the JGroups 5 side, and how to get it (None: nothing)."""
    for system in (UDP, NAKACK4):
        problem = release_missing(SYSTEMS[system])
        if problem:
            return f"{problem} (make setup fetches it)"
    return None


@dataclass
class Pair:
    """A JGroups cluster and chaosbed's, each of A, B, C, both up while their rounds alternate."""

    jgroups: Cluster
    chaosbed: Cluster
    multicast_protocol: str  # chaosbed's counters' name: nakack2 or mcast
    up_s: dict[str, float] = field(default_factory=dict)  # side -> seconds from nothing to one view of three
    idle_rss_kib: dict[str, int] = field(default_factory=dict)  # side -> the largest member's peak RSS before load


def peak_rss(cluster: Cluster) -> int:
    """The largest peak RSS (KiB) of the cluster's members, from their `stats` replies (the contract's usage)."""
    return max(int(cluster.control(m, "stats").get("max_rss_kib", 0)) for m in cluster.running())


def start_pair(system: str, chaosbed_stack: str, exits: contextlib.ExitStack) -> Pair:
    """The two clusters, started one after the other (timed), taken down when `exits` closes."""
    t = time.monotonic()
    theirs = jgroups_cluster(system, NAMES, STACKS[system], True, exits)
    jgroups_up = time.monotonic() - t
    t = time.monotonic()
    ours = NetnsCluster(ClusterSpec(NAMES, stack=chaosbed_stack, properties=MATCHED, backend="netns"))
    exits.enter_context(ours)
    ours.start()
    network.wait_one_view(ours, len(NAMES))
    pair = Pair(theirs, ours, "mcast" if chaosbed_stack.endswith("mcast") else "nakack2")
    pair.up_s = {"jgroups": jgroups_up, "chaosbed": time.monotonic() - t}
    pair.idle_rss_kib = {"jgroups": peak_rss(theirs), "chaosbed": peak_rss(ours)}
    return pair


def compare(pair: Pair, multicast: bool, n: int, size: int, repeats: int) -> tuple[Side, Side]:
    """JGroups' side and chaosbed's, a warm-up round each, then `repeats` rounds with their order alternated."""
    receivers = ["B", "C"] if multicast else ["B"]
    theirs = Side(pair.jgroups, receivers, lambda: jgroups_round(pair.jgroups, multicast, n, size))
    if multicast:
        run: Callable[[], float] = lambda: network.nakack2(pair.chaosbed, n, size, pair.multicast_protocol)[0]  # noqa: E731
    else:
        run = lambda: network.unicast3(pair.chaosbed, n, size)[0]  # noqa: E731
    ours = Side(pair.chaosbed, receivers, run)
    rotated_rounds([theirs, ours], n, repeats)
    return theirs, ours


@dataclass
class StartTimes:
    """Seconds from a member's spawn to its `start` line, to answering `ping`, to its first view of all three."""

    start_line: float
    ready: float
    joined: float


def _events_from(path: Path, offset: int) -> list[dict[str, Any]]:
    with path.open("rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
    return [json.loads(line) for line in text.splitlines() if line.endswith("}")]


def restart_times(cluster: Cluster, name: str = "C", timeout: float = 60.0) -> StartTimes:
    """The member leaves gracefully, the others install a view without it, then it is started again (a new
    incarnation, appending to its history): its times, from the history's `t` (CLOCK_MONOTONIC, the cluster's clock)."""
    others = [m for m in NAMES if m != name]
    cluster.leave(name)
    cluster.wait_for_view(others, timeout=timeout)  # restart waits for the leaving process to exit
    m = cluster.members[name]  # type: ignore[attr-defined]
    history = Path(m.history)
    offset = history.stat().st_size
    t0 = cluster.clock.now_ns()
    cluster.restart(name, timeout=timeout)
    ready = cluster.clock.now_ns()
    cluster.wait_for_view(NAMES, timeout=timeout)
    cluster.control(name, "flush")
    evs = _events_from(history, offset)
    started = next(e["t"] for e in evs if e["event"] == "start")
    joined = next(e["t"] for e in evs if e["event"] == "view" and {name_of(x) for x in e["members"]} == set(NAMES))
    return StartTimes((started - t0) / 1e9, (ready - t0) / 1e9, (joined - t0) / 1e9)


def start_rounds(pair: Pair, repeats: int) -> dict[str, list[StartTimes]]:
    """`repeats` restarts of C on each side, alternated (the first side of a round changes every round)."""
    out: dict[str, list[StartTimes]] = {"jgroups": [], "chaosbed": []}
    sides = [("jgroups", pair.jgroups), ("chaosbed", pair.chaosbed)]
    for i in range(repeats):
        for key, cluster in sides[i % 2 :] + sides[: i % 2]:
            out[key].append(restart_times(cluster))
    return out


def jgroups_partition_cluster(workdir: Path) -> Cluster:
    """Three JGroups 5.5.6 members of jgroups-5-udp with udp-fast, in namespaces; not started."""
    return new_cluster(spec_of(SYSTEMS[UDP], NAMES, "netns", stack=STACKS[UDP]), workdir=workdir)


PARTITION_SIDES: dict[str, Callable[[Path], Cluster]] = {
    "JGroups 5.5.6 (udp-fast)": jgroups_partition_cluster,
    "chaosbed, the same timings": lambda w: partition.chaosbed_cluster(w, MATCHED),
    "chaosbed, merge.other_view_check_delay 0 (MERGE3's)": lambda w: partition.chaosbed_cluster(w, MERGE3_TIMING),
}


def heal_delays(repeats: int) -> list[float]:
    """Round i's delay from the split seen to the heal, the same on every side: 1 s plus a share of MERGE3's check
    period (1.6 x max_interval = 3.2 s on both sides) that steps through it, so that no side's heal falls at one
    phase of its merge checker every time (the checkers run on a fixed period from the members' start)."""
    period = 1.6 * 2.0
    return [1.0 + period * ((i * 0.618034) % 1.0) for i in range(repeats)]


def partition_rounds(out: Path, repeats: int, stream_s: int) -> dict[str, list[partition.Outcome]]:
    """bench_partition's full partition of C, `repeats` times per side, the sides' order rotated round by round."""
    names = list(PARTITION_SIDES)
    results: dict[str, list[partition.Outcome]] = {n: [] for n in names}
    for i, delay in enumerate(heal_delays(repeats)):
        for k in range(len(names)):
            side = names[(i + k) % len(names)]
            folder = out / f"side{(i + k) % len(names)}-round{i}"
            results[side].append(partition.one_run(folder, False, PARTITION_SIDES[side], stream_s, delay))
    return results


def print_rates(label: str, what: str, size: int, sides: tuple[Side, Side]) -> None:
    for name, side in zip(("JGroups 5.5.6", "chaosbed"), sides, strict=True):
        r = side.rates
        lines = statistics.median(side.lines_per_message)
        spread = f"(median of {len(r)}; {min(r):,.0f}-{max(r):,.0f}; {lines:.2f} history lines/msg per receiver)"
        report(f"{name}: {label}, {what}, {size} B", statistics.median(r), "msgs/s", spread)
    ratio(f"chaosbed / JGroups 5.5.6, {label}, {size} B", sides[1].rates, sides[0].rates, None)


def print_starts(pair: Pair, starts: dict[str, list[StartTimes]]) -> None:
    print(f"member start ({len(starts['jgroups'])} restarts of C per side after a graceful leave, alternated):")
    for key, name in (("jgroups", "JGroups 5.5.6 (JVM)"), ("chaosbed", "chaosbed (CPython)")):
        ts = starts[key]
        for attr, what in (("start_line", "spawn -> its `start` line"), ("ready", "spawn -> ready (`ping`)"),
                           ("joined", "spawn -> joined (a view of three)")):  # fmt: skip
            values = [getattr(t, attr) for t in ts]
            report(f"  {name}: {what}", statistics.median(values), "s", f"({min(values):.2f}-{max(values):.2f})")
        report(f"  {name}: `up` of 3 (one by one for JGroups) to one view", pair.up_s[key], "s", "(once)")
    joined = [c.joined / j.joined for c, j in zip(starts["chaosbed"], starts["jgroups"], strict=True)]
    report("  ratio chaosbed / JGroups, spawn -> joined", statistics.median(joined), "x", "(median of per-round)")


def print_rss(pairs: dict[str, Pair], peaks: dict[str, dict[str, int]]) -> None:
    print("peak RSS of the largest member (`stats` max_rss_kib), idle after the start / after the rounds' load:")
    for label, pair in pairs.items():
        for key, name in (("jgroups", "JGroups 5.5.6 (JVM, -Xmx256m)"), ("chaosbed", "chaosbed (CPython)")):
            idle, peak = pair.idle_rss_kib[key] / 1024, peaks[label][key] / 1024
            report(f"  {name}, {label}", peak, "MiB", f"(idle {idle:.1f} MiB)")


def print_partition(results: dict[str, list[partition.Outcome]], stream_s: int) -> None:
    reps = len(next(iter(results.values())))
    delays = ", ".join(f"{d:.1f}" for d in heal_delays(reps))
    print(f"recovery after a full partition of C ({reps} runs per side, rotated; {TIMINGS}; streams {stream_s} s;")
    print(f"the heal {delays} s after the split was seen, round by round):")
    for side, outs in results.items():
        partition.summary(f"  {side}: split seen by A and B", [o.split_ab for o in outs])
        partition.summary(f"  {side}: heal -> one view of three", [o.merged for o in outs])
        partition.summary(f"  {side}: heal -> C has A's split unicasts", [o.stall_unicast for o in outs])
        partition.summary(f"  {side}: heal -> C has A's split multicasts", [o.stall_multicast for o in outs])
        partition.summary(f"  {side}: heal -> A's multicasts resume at C", [o.resume_multicast for o in outs])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--sizes", default="100,1000", help="message payload bytes, comma-separated")
    ap.add_argument("--start-repeats", type=int, default=5, help="restarts of C per side for the start times")
    ap.add_argument("--partition-repeats", type=int, default=3, help="0: no partition runs")
    ap.add_argument("--stream-s", type=int, default=15, help="seconds of A's streams in a partition run")
    ap.add_argument("--out", type=Path, default=Path("runs/bench-jgroups5"))
    args = ap.parse_args(argv)
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        raise SystemExit(f"bench_jgroups5: --sizes takes comma-separated byte counts, not {args.sizes!r}") from None
    if not sizes or min(sizes) < 0 or args.messages < 1 or args.repeats < 1 or args.start_repeats < 0:
        raise SystemExit("bench_jgroups5: need --sizes >= 0, --messages >= 1, --repeats >= 1, --start-repeats >= 0")
    check_netns_available()
    if problem := missing():
        raise SystemExit(f"bench_jgroups5: {problem}")
    n, repeats = args.messages, args.repeats
    load = os.getloadavg()[0]
    rates: list[tuple[str, str, int, tuple[Side, Side]]] = []
    pairs: dict[str, Pair] = {}
    peaks: dict[str, dict[str, int]] = {}
    starts: dict[str, list[StartTimes]] = {}
    plan = (
        ("udp-fast / unicast3+nakack2", UDP, "unicast3+nakack2", (("UNICAST3", "A -> B", False),
                                                                 ("NAKACK2", "per receiver of 2", True))),
        ("nakack4-fast / unicast3+mcast", NAKACK4, "unicast3+mcast",
         (("NAKACK4 / MCAST", "per receiver of 2", True),)),
    )  # fmt: skip
    for label, system, ours, kinds in plan:
        with contextlib.ExitStack() as stack:  # one pair of clusters at a time: 3 JVMs and 3 members
            pair = pairs[label] = start_pair(system, ours, stack)
            for size in sizes:
                for proto, what, multicast in kinds:
                    rates.append((proto, what, size, compare(pair, multicast, n, size, repeats)))
            peaks[label] = {"jgroups": peak_rss(pair.jgroups), "chaosbed": peak_rss(pair.chaosbed)}
            if system == UDP and args.start_repeats:
                starts = start_rounds(pair, args.start_repeats)
    results = partition_rounds(args.out, args.partition_repeats, args.stream_s) if args.partition_repeats else {}
    print(f"{n:,} messages per round; {repeats} rounds per side after a warm-up round, alternated; this machine's load")
    print(f"average (1 min) {load:.1f} before, {os.getloadavg()[0]:.1f} after, on {os.cpu_count()} CPUs; {TIMINGS}")
    for proto, what, size, sides in rates:
        print_rates(proto, what, size, sides)
    if starts:
        print_starts(pairs[plan[0][0]], starts)
    print_rss(pairs, peaks)
    if results:
        print_partition(results, args.stream_s)
    print(DIFFERENCES)


if __name__ == "__main__":
    main()
