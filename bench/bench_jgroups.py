"""JGroups 2.12 next to chaosbed at 1000 B on equal terms, side by side in one run (root, a JDK and the jar).

Both sides are members that write chaosbed's histories: chaosbed's own (node/) and the real JGroups 2.12.2 jar as the
foreign member (foreign/jgroups/: a JChannel driven through the same control contract, one history line per send and
delivery). The JGroups member also runs with `record_messages: false` in its config (no send and deliver lines:
what its history lines cost it). Everything in network namespaces of this machine, each cluster on its own bridge:
- unicast: A sends B N messages of SIZE bytes as fast as its flow control allows; JGroups' UNICAST2 (udp.xml with
  UNICAST2 in UNICAST's place: the member's `unicast2` stack) against chaosbed's UNICAST3;
- multicast: A multicasts N messages to A, B, C; per receiver (the slower of B and C); JGroups' NAKACK (udp.xml: the
  `unicast` stack) against chaosbed's NAKACK2 (unicast3+nakack2).
One definition of a rate for every side: N / (from the `send` or `multicast` command to the moment the receivers'
`stats` report all N delivered), polled as bench_network does (few polls while messages flow, 10 ms at the end).
After each round the receivers' `flush` says how many history lines they wrote: the output gives lines per message
per receiver, so each side is seen doing what its name says. After one warm-up round of each side, --repeats rounds
are run with the order of the sides rotated round by round, so a busy spell on this shared machine falls on every
side; the ratios are the medians of the per-round ratios. Issue #27's targets: UNICAST3 >= 1.5x JGroups UNICAST2 and
NAKACK2 >= 1.0x JGroups NAKACK per receiver, both with histories.
Run: python -m bench.bench_jgroups [--messages 100000] [--repeats 5] [--size 1000]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import bench.bench_network as network
from bench.common import report
from foreign import jgroups
from orchestration.backends.netns import NetnsCluster, check_netns_available
from orchestration.cluster import Cluster, ClusterSpec
from orchestration.systems import SYSTEMS
from orchestration.systems.clusters import new_cluster, spec_of

SIDES = ("JGroups, histories", "JGroups, no send/deliver lines", "chaosbed, histories")
TIMEOUT = 600.0
DIFFERENCES = f"""\
What differs between the sides (the rate's definition, the message size, the namespaces and the history format do not):
- runtime: JGroups 2.12.2 on the JVM as chaosbed starts the member
  ({" ".join(jgroups.JVM_OPTIONS)}), sending from a task thread and delivering on
  JGroups' thread pools; chaosbed: CPython, one process and event loop per member.
- stack: JGroups' stock udp.xml around the measured protocol (PING, MERGE2, FD_SOCK, FD_ALL, VERIFY_SUSPECT,
  BARRIER, STABLE, GMS, UFC/MFC credit flow control, FRAG2 and the transport's bundler all running); chaosbed:
  unicast3 alone (A, B) or unicast3+nakack2 with stable, gms, fd and merge (A, B, C), windows as flow control, sends
  bundled per destination.
- history lines: the jar's member writes every line with its own write(2), under a lock, as it happens (a send's seqno
  read back from the message's header after ch.send); chaosbed's member buffers the lines of a batch and writes them
  in one os.write. Without send/deliver lines the jar's member still makes chaosbed's payload (the msg_id in it).
- what is counted: JGroups' deliveries to the member's receive(); chaosbed's protocol's msgs_delivered.
- all clusters of a comparison are up during its rounds (the idle ones' JVMs and members too)."""


def missing() -> str | None:
    """What this machine lacks to run the JGroups side, and how to get it (None: nothing)."""
    return jgroups.missing()


def jgroups_cluster(system: str, names: list[str], stack: str, record: bool, exits: contextlib.ExitStack) -> Cluster:
    """A JGroups cluster through the Cluster API, as `chaosbed run` starts one (the first member first), with or
    without the member's send/deliver lines (record_messages), in one view; taken down when `exits` closes."""
    chosen = dataclasses.replace(SYSTEMS[system], member_config={"record_messages": record})
    c = new_cluster(spec_of(chosen, names, "netns", stack=stack))
    exits.enter_context(c)
    c.start(timeout=60)
    c.wait_for_view(timeout=60)
    return c


def _delivered(cluster: Cluster, name: str) -> int:
    return int(cluster.control(name, "stats")["counters"]["member"]["delivered"])


def _lines(cluster: Any, name: str) -> int:
    """History lines member `name` has written so far (both kinds of member answer `flush` with events_written)."""
    reply = cluster.control(name, "flush")
    if not reply.get("ok", True):
        raise RuntimeError(f"flush at {name}: {reply}")
    return int(reply["events_written"])


def jgroups_round(cluster: Cluster, multicast: bool, n: int, size: int) -> float:
    """A sends (or multicasts) n messages; msgs/s until the slowest receiver had them all."""
    receivers = ["B", "C"] if multicast else ["B"]
    before = {r: _delivered(cluster, r) for r in receivers}
    start = time.monotonic()
    if multicast:
        cluster.control("A", "multicast", count=n, size=size)
    else:
        cluster.control("A", "send", to="B", count=n, size=size)
    while (done := min(_delivered(cluster, r) - before[r] for r in receivers)) < n:
        if time.monotonic() - start > TIMEOUT:
            raise RuntimeError(f"JGroups did not deliver {n} messages within {TIMEOUT:g} s")
        time.sleep(network.poll_interval(done, n, time.monotonic() - start))
    return n / (time.monotonic() - start)


class Side:
    """One side of a comparison: its rounds' rates and history lines per message at the receivers."""

    def __init__(self, cluster: Any, receivers: list[str], run: Callable[[], float]) -> None:
        self.cluster = cluster
        self.receivers = receivers
        self.run = run
        self.rates: list[float] = []
        self.lines_per_message: list[float] = []

    def round(self, n: int, keep: bool) -> None:
        before = {r: _lines(self.cluster, r) for r in self.receivers}
        rate = self.run()
        lines = min(_lines(self.cluster, r) - before[r] for r in self.receivers)  # outside the timed interval
        if keep:
            self.rates.append(rate)
            self.lines_per_message.append(lines / n)


def rotated_rounds(sides: list[Side], n: int, repeats: int) -> None:
    """One warm-up round of each side, then `repeats` rounds with the order rotated by one each round."""
    for side in sides:
        side.round(n, keep=False)
    for i in range(repeats):
        for k in range(len(sides)):
            sides[(i + k) % len(sides)].round(n, keep=True)


def ratio(label: str, ours: list[float], theirs: list[float], target: float | None) -> float:
    """ours / theirs, round by round: the median of the per-round ratios, and their range."""
    ratios = [o / t for o, t in zip(ours, theirs, strict=True)]
    goal = f"; target >= {target}" if target is not None else ""
    note = f"(median of {len(ratios)} rounds; {min(ratios):.2f}-{max(ratios):.2f}{goal})"
    value = statistics.median(ratios)
    report(f"  ratio {label}", value, "x", note)
    return value


def measure(kind: str, n: int, size: int, repeats: int, stack: contextlib.ExitStack) -> list[Side]:
    """The three sides of one comparison (unicast or multicast), rotated round by round."""
    multicast = kind == "multicast"
    names = ["A", "B", "C"] if multicast else ["A", "B"]
    receivers = names[1:]
    jstack = "unicast" if multicast else "unicast2"  # udp.xml: NAKACK with UNICAST; UNICAST2 in UNICAST's place
    sides = []
    for record in (True, False):
        c = jgroups_cluster("jgroups-2.12", names, jstack, record, stack)
        sides.append(Side(c, receivers, lambda c=c: jgroups_round(c, multicast, n, size)))
    if multicast:
        spec = ClusterSpec(names, stack="unicast3+nakack2", properties=network.FAST_MEMBERSHIP, backend="netns")
    else:
        spec = ClusterSpec(names, stack="unicast3", backend="netns")
    ours = NetnsCluster(spec)
    stack.enter_context(ours)
    ours.start()
    if multicast:
        network.wait_one_view(ours, 3)
    chaosbed = network.nakack2 if multicast else network.unicast3
    sides.append(Side(ours, receivers, lambda: chaosbed(ours, n)[0]))
    rotated_rounds(sides, n, repeats)
    return sides


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--size", type=int, default=1000)
    args = ap.parse_args(argv)
    check_netns_available()
    if problem := missing():
        raise SystemExit(f"bench_jgroups: {problem}")
    jgroups.build()
    network.SIZE = args.size
    n, size, repeats = args.messages, args.size, args.repeats
    load = os.getloadavg()[0]
    results: dict[str, list[Side]] = {}
    for kind in ("unicast", "multicast"):
        with contextlib.ExitStack() as stack:  # one comparison's clusters at a time: 6 JVMs and 3 members at most
            results[kind] = measure(kind, n, size, repeats, stack)
    what = {
        "unicast": ("UNICAST2", "UNICAST3", "A -> B"),
        "multicast": ("NAKACK", "NAKACK2", "3 members, per receiver"),
    }
    print(f"{n:,} messages of {size} B per round; {repeats} rounds per side after a warm-up round; this machine's load")
    print(f"average (1 min) {load:.1f} before the rounds, {os.getloadavg()[0]:.1f} after, on {os.cpu_count()} CPUs")
    for kind, sides in results.items():
        theirs, ours, how = what[kind]
        for name, side in zip(SIDES, sides, strict=True):
            proto = ours if name.startswith("chaosbed") else theirs
            r = side.rates
            lines = statistics.median(side.lines_per_message)
            spread = f"(median of {len(r)}; {min(r):,.0f}-{max(r):,.0f}; {lines:.2f} history lines/msg per receiver)"
            report(f"{name}: {proto}, {how}", statistics.median(r), "msgs/s", spread)
        rates = [s.rates for s in sides]
        target = 1.5 if kind == "unicast" else 1.0
        ratio(f"{ours} / JGroups {theirs}, both with histories", rates[2], rates[0], target)
        ratio(f"{ours} / JGroups {theirs} without send/deliver lines", rates[2], rates[1], None)
        ratio(f"JGroups {theirs}: with / without its history lines", rates[0], rates[1], None)
    print(DIFFERENCES)


if __name__ == "__main__":
    main()
