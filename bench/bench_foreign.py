"""The cost of the foreign-member path: chaosbed's own member started natively (`python -m node CONFIG`, the native
config) and as a foreign member (`python -m foreign.chaosbed {config} --stack unicast3`: the contracts' config file,
placeholders, CHAOSBED_* environment, process-group signals, the foreign readiness and quiet rules), the same program
and interpreter both ways, side by side in one run on the netns backend:

- up: seconds from nothing to both members answering `ping` (two members, UNICAST3 only: no view to wait for);
- UNICAST3 over UDP, A -> B, 1000 B payloads: n / time until B delivered all n (bench_network's measurement).

The two paths alternate run by run (native, foreign, native, ...), so the machine's noise falls on both; medians.
Target (issue #26): the foreign path within 5% of the native one on both.
Run (root): python -m bench.bench_foreign [--repeats 9] [--messages 200000] [--size 1000]
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


def one_run(system: System, n: int, size: int) -> tuple[float, float]:
    """(up seconds, UNICAST3 msgs/s) of a fresh two-member cluster of `system` on netns."""
    spec = spec_of(system, ["A", "B"], "netns", stack=STACK)
    cluster: Any = new_cluster(spec)
    started = time.monotonic()
    with cluster:
        cluster.start()
        up = time.monotonic() - started
        return up, unicast3_rate(cluster, n, size)


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
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1000)
    args = ap.parse_args(argv)
    check_netns_available()
    paths = {"native": CHAOSBED, "foreign": foreign_system()}
    one_run(paths["native"], 1000, args.size)  # warm-up: page cache, interpreter, namespaces
    results: dict[str, list[tuple[float, float]]] = {p: [] for p in paths}
    for _ in range(args.repeats):
        for name, system in paths.items():
            results[name].append(one_run(system, args.messages, args.size))
    up = {p: statistics.median(r[0] for r in results[p]) for p in paths}
    rate = {p: statistics.median(r[1] for r in results[p]) for p in paths}

    def note(p: str, i: int) -> str:
        values = [r[i] for r in results[p]]
        return f"(median of {args.repeats}, alternating; range {min(values):,.2f}-{max(values):,.2f})"

    for p in paths:
        report(f"up, 2 members, netns: {p} path", up[p], "s", note(p, 0))
    report("  foreign / native", up["foreign"] / up["native"], "x", "(target <= 1.05)")
    for p in paths:
        report(f"UNICAST3 over UDP, A -> B, {args.size} B: {p} path", rate[p], "msgs/s", note(p, 1))
    report("  foreign / native", rate["foreign"] / rate["native"], "x", "(target >= 0.95)")


if __name__ == "__main__":
    main()
