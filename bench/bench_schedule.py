"""Faults on time: how far behind its planned instant each scheduled fault takes effect on the netns backend (root).

A 4-member cluster in network namespaces runs a schedule of 20 network faults at 5 instants (at = 1..5 s, 4 per
instant, each on its own directed link): a one-way partition, 100% loss, 20 ms delay (each lasting 0.4 s) and a
count-1 discard of a protocol message; plus, at each instant, a member action (`set` of a property). Probes measure
what the network did, not what the log says: every directed link carries a datagram every millisecond (a valid
UNICAST3.DATA message stamped with its CLOCK_MONOTONIC send time, on a port of its own: orchestration/onset_probes.py's
LinkProbes, as in tests/netns/test_onset.py), and each fault's observed onset is the send time of the first probe
it acted on (lost, or 10+ ms late); its observed end, the first probe it let through again. Printed: the lag of
onset and end behind the plan (median / p99 / max over the faults), the spread of the onsets of faults planned for
the same instant, the lag of the `t` that faults.jsonl records, and how long after its instant each member action
started. Probes resolve about 1 ms (more when the probe thread stalls).

Before this scheduler (faults installed one by one at their time, measured on main with the same schedule): the
logged `t` lagged its planned instant by a median 581 ms, p99 965 ms, max 1,160 ms, growing through the run.

    python -m bench.bench_schedule [--rounds N] [--backend netns|swarm]

With --backend swarm the same schedule runs on the swarm backend (orchestration/backends/swarm.py): members A and C
on engine 1, B and D on engine 2 of the local swarm (started for the benchmark if none runs, and stopped after), the
faults installed by each host's chaos agent, the probes sent from the member containers' namespaces over the overlay
network; the hosts' clock offsets (faults.jsonl's start line) are printed with the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from orchestration.backends.netns import NetnsCluster
from orchestration.backends.swarm import SwarmCluster
from orchestration.cluster import ClusterSpec
from orchestration.host import local_swarm
from orchestration.onset_probes import LinkProbes
from orchestration.scenario import parse
from orchestration.schedule import run_schedule

FAULT_FOR = 0.4
MEMBERS = "ABCD"
KINDS = ("partition", "loss", "delay", "discard")


def bench_scenario() -> dict:
    links = [(a, b) for a in MEMBERS for b in MEMBERS if a != b]
    faults = []
    for i in range(5):
        for k, kind in enumerate(KINDS):
            src, dst = links[(4 * i + k) % len(links)]
            f: dict = {"at": f"{1 + i}s", "kind": kind, "from": src, "to": dst}
            if kind == "partition":
                f.update(one_way=True, **{"for": f"{FAULT_FOR}s"})
            elif kind == "loss":
                f.update(probability=1.0, **{"for": f"{FAULT_FOR}s"})
            elif kind == "delay":
                f.update(delay="20ms", **{"for": f"{FAULT_FOR}s"})
            else:
                f.update(match="UNICAST3.DATA()", count=1)
            faults.append(f)
        # and a member action at the same instant: performed right after the network faults switched by the clock
        member = MEMBERS[i % len(MEMBERS)]
        faults.append(
            {"at": f"{1 + i}s", "kind": "set", "member": member, "property": "unicast3.xmit_interval", "value": "400ms"}
        )
    return {
        "name": "bench-schedule",
        "seed": 1,
        "timeout": "30s",
        "cluster": {"members": list(MEMBERS), "stack": "unicast3"},
        "faults": faults,
    }


def observe(
    probes: LinkProbes, kind: str, link: tuple[str, str], start: int, end: int | None
) -> tuple[int, int | None]:
    """(observed onset, observed end) in ns: the send time of the first probe the fault acted on, and of the first
    one it let through after that (None for a discard, which acts once)."""
    sent, got = probes.sent[link], probes.got[link]
    acted = [
        (t, seq in got and got[seq] - t < 10_000_000)
        for seq, t in enumerate(sent)
        if t >= start - 100_000_000  # from 100 ms before the plan: an early fault would show
    ]
    onset = next(t for t, ok in acted if not ok)
    if kind == "discard" or end is None:
        return onset, None
    after = next(t for t, ok in acted if t > onset and ok)
    return onset, after


def one_round(workdir: Path, backend: str = "netns") -> tuple[list[float], ...]:
    sc = parse(bench_scenario())
    spec = ClusterSpec(list(MEMBERS), "unicast3", "udp", {}, backend)
    cluster: NetnsCluster | SwarmCluster
    cluster = NetnsCluster(spec, workdir=workdir) if backend == "netns" else SwarmCluster(spec, workdir=workdir)
    onsets, ends, logged, spreads, actions = [], [], [], [], []
    try:
        cluster.start()
        with LinkProbes(cluster) as probes:
            time.sleep(0.3)  # probes flowing before the plan is installed (a benchmark, not a test)
            log = workdir / "faults.jsonl"
            result = run_schedule(cluster, sc, log)
            cluster.sleep(0.2)
        events = [json.loads(line) for line in log.read_text().splitlines()]
        for host, clock in events[0].get("clocks", {}).items():
            print(f"  host {host}: clock offset {clock['offset_ns']} ns (rtt {clock['rtt_ns'] / 1e3:.0f} us)")
        applied = [e for e in events if e.get("event") == "fault" and e["kind"] in KINDS]
        for e in events:
            if e.get("kind") == "set":
                actions.append((e["t"] - result.t0 - round(float(e["at"].rstrip("s")) * 1e9)) / 1e6)
        by_instant: dict[float, list[int]] = {}
        for e in applied:
            planned = result.t0 + round(float(e["at"].rstrip("s")) * 1e9)
            end = planned + round(FAULT_FOR * 1e9) if e["kind"] != "discard" else None
            onset, seen_end = observe(probes, e["kind"], (e["from"][0], e["to"][0]), planned, end)
            onsets.append((onset - planned) / 1e6)
            logged.append((e["t"] - planned) / 1e6)
            by_instant.setdefault(planned, []).append(onset)
            if end is not None and seen_end is not None:
                ends.append((seen_end - end) / 1e6)
        spreads = [(max(v) - min(v)) / 1e6 for v in by_instant.values()]
    finally:
        cluster.down()
    return onsets, ends, logged, spreads, actions


def summary(name: str, values: list[float]) -> str:
    v = sorted(values)
    p99 = v[min(len(v) - 1, round(0.99 * (len(v) - 1)))]
    return f"{name:<44} median {statistics.median(v):7.2f} ms   p99 {p99:7.2f} ms   max {v[-1]:7.2f} ms   (n={len(v)})"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--backend", choices=("netns", "swarm"), default="netns")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("bench_schedule needs root (network namespaces)")
    all_on, all_end, all_log, all_spread, all_act = [], [], [], [], []
    with local_swarm.using(2) if args.backend == "swarm" else contextlib.nullcontext():
        for r in range(args.rounds):
            with tempfile.TemporaryDirectory() as d:
                on, end, logged, spread, act = one_round(Path(d), args.backend)
            all_on += on
            all_end += end
            all_log += logged
            all_spread += spread
            all_act += act
            print(f"round {r + 1}: {len(on)} faults observed")
    print(f"lag behind the planned instant (negative = early), 4 {args.backend} members, 20 faults at 5 instants:")
    print(summary("observed onset (probe acted on)", all_on))
    print(summary("observed end (probe let through again)", all_end))
    print(summary("faults.jsonl `t`", all_log))
    print(summary("spread of onsets at one instant", all_spread))
    print(summary("member action (set) started after its instant", all_act))


if __name__ == "__main__":
    main()
