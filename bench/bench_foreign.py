"""The cost of the foreign-member path: chaosbed's own member started natively (`python -m node CONFIG`, the native
config) and as a foreign member (`python -m foreign.chaosbed {config} --stack unicast3`: the contracts' config file,
placeholders, CHAOSBED_* environment, process-group signals, the foreign readiness and quiet rules), the same program
and interpreter both ways, side by side in one run on the netns backend:

- up: seconds from nothing to both members answering `ping` (two members, UNICAST3 only: no view to wait for);
- UNICAST3 over UDP, A -> B, 1000 B payloads: n / time until B delivered all n (bench_network's measurement).

The two paths alternate run by run (native, foreign, native, ...), so the machine's noise falls on both; medians.
Target (issue #26): the foreign path within 5% of the native one on both.
Run (root): python -m bench.bench_foreign [--repeats 9] [--up-repeats 31] [--messages 200000] [--size 1000]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from bench.bench_network import poll_interval
from bench.common import report
from orchestration.backends.netns import check_netns_available
from orchestration.host.member_python import member_python
from orchestration.systems import CHAOSBED, System
from orchestration.systems.clusters import new_cluster, spec_of

STACK = "unicast3"


def foreign_system() -> System:
    """chaosbed's own member through the foreign path, with the interpreter the native path uses."""
    command = (member_python(), "-m", "foreign.chaosbed", "{config}", "--stack", STACK)
    return System("chaosbed-contract", command, wire="chaosbed", stack=STACK, inline=True)


def up_time(system: System) -> float:
    """Seconds from nothing to both members of a fresh two-member cluster of `system` on netns answering."""
    cluster: Any = new_cluster(spec_of(system, ["A", "B"], "netns", stack=STACK))
    started = time.monotonic()
    with cluster:
        cluster.start()
        return time.monotonic() - started


def throughput(system: System, n: int, size: int) -> float:
    """UNICAST3 msgs/s, A -> B, of a fresh two-member cluster of `system` on netns."""
    with new_cluster(spec_of(system, ["A", "B"], "netns", stack=STACK)) as cluster:
        cluster.start()
        return unicast3_rate(cluster, n, size)


def unicast3_rate(cluster: Any, n: int, size: int) -> float:
    def got() -> int:
        return int(cluster.control("B", "stats")["counters"]["unicast3"]["msgs_delivered"])

    before = got()
    start = time.monotonic()
    cluster.control("A", "send", to="B", count=n, size=size)
    while (done := got() - before) < n:
        if time.monotonic() - start > 300:
            raise RuntimeError("UNICAST3 did not deliver every message within 300 s")
        time.sleep(poll_interval(done, n, time.monotonic() - start))
    return n / (time.monotonic() - start)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=9, help="throughput runs per path")
    ap.add_argument("--up-repeats", type=int, default=31, help="up runs per path (cheap, and noisier)")
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1000)
    args = ap.parse_args(argv)
    check_netns_available()
    paths = {"native": CHAOSBED, "foreign": foreign_system()}
    throughput(paths["native"], 1000, args.size)  # warm-up: page cache, interpreter, namespaces
    ups: dict[str, list[float]] = {p: [] for p in paths}
    rates: dict[str, list[float]] = {p: [] for p in paths}
    for _ in range(args.up_repeats):
        for name, system in paths.items():
            ups[name].append(up_time(system))
    for _ in range(args.repeats):
        for name, system in paths.items():
            rates[name].append(throughput(system, args.messages, args.size))
    show("up, 2 members, netns", ups, "s", "(target <= 1.05)")
    show(f"UNICAST3 over UDP, A -> B, {args.size} B", rates, "msgs/s", "(target >= 0.95)")


def show(what: str, values: dict[str, list[float]], unit: str, target: str) -> None:
    """Both paths' medians side by side (with their ranges) and the ratio."""
    median = {p: statistics.median(v) for p, v in values.items()}
    for p, v in values.items():
        note = f"(median of {len(v)}, alternating; range {min(v):,.2f}-{max(v):,.2f})"
        report(f"{what}: {p} path", median[p], unit, note)
    report("  foreign / native", median["foreign"] / median["native"], "x", target)


if __name__ == "__main__":
    main()
