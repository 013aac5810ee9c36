"""Simulator speed: simulated application messages per second of real time.

Three members, every pair streaming, with and without faults (20% loss, 5% duplication, 1 ms jitter); every message
goes through the real stack and real wire encoding. Run: python -m bench.sim_speed

Paced workloads wake for every single message by default; the "real-member pacing" rows run the same workload with
`Simulation(sender_poll=POLL)`, the real member's sender loop (node/runtime.py polls every 1 ms, so at 5,000 msgs/s
about 5 messages to a destination go out together, bundled into one datagram, as on a real member).
"""

from __future__ import annotations

import argparse
import time

from bench.common import median_time, report
from node.workload import POLL
from orchestration.backends.sim import LinkFaults, Simulation

PROPS = {"unicast3": {"xmit_interval": "100ms"}}


def one_run(count: int, link: LinkFaults, stack: str = "unicast3", sender_poll: float = 0.0) -> Simulation:
    sim = Simulation(
        3, seed=1, stack=stack, properties={stack: PROPS["unicast3"]}, link=link, record=False, sender_poll=sender_poll
    )
    for s in sim.members:
        for d in sim.members:
            if s != d:
                sim.stream(s, d, count, rate=5000)
    if not sim.run_until(sim.quiet, 300):
        raise RuntimeError("the benchmark run did not settle")
    return sim


MEMBERSHIP = {
    "fd": {"interval": "0.2s", "timeout": "1s", "timeout_check_interval": "0.2s"},
    "merge": {"min_interval": "0.2s", "max_interval": "0.5s"},
    "nakack2": {"xmit_interval": "100ms"},
    "mcast": {"xmit_interval": "100ms"},
}


def multicast_run(stack: str, count: int, link: LinkFaults) -> tuple[float, int, int]:
    """4 members form a view, then each multicasts `count` 100-byte messages; returns (real s, multicasts,
    deliveries) for the streaming part only."""
    props = {k: v for k, v in MEMBERSHIP.items() if k in ("fd", "merge") or k in stack}
    sim = Simulation(4, seed=1, stack=stack, properties=props, link=link, record=False)
    if not sim.run_until(lambda: sim.views_agree() and len(sim.view("A").members) == 4, 60):
        raise RuntimeError("no view of 4")
    for m in sim.members:
        sim.multicast_stream(m, count, rate=5000, size=100)
    start = time.perf_counter()
    if not sim.run_until(sim.quiet, 300, check_every=0.5):
        raise RuntimeError("the multicast benchmark run did not settle")
    elapsed = time.perf_counter() - start
    deliveries = sum(len(m.deliveries) for m in sim.members.values())
    return elapsed, 4 * count, deliveries


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--count", type=int, default=5000, help="messages per sender and destination")
    args = ap.parse_args(argv)
    total = args.count * 6
    for poll in (0.0, POLL):
        for label, link in (
            ("no faults", LinkFaults(delay=0.001)),
            ("20% loss, 5% dup, 1 ms jitter", LinkFaults(delay=0.001, jitter=0.001, loss=0.2, duplicate=0.05)),
        ):
            t = median_time(lambda link=link, poll=poll: one_run(args.count, link, sender_poll=poll), repeats=3)
            label += ", real-member pacing" if poll else ""
            report(f"simulator, unicast3, 3 members, {label}", total / t, "msgs/s real", f"({total} msgs, median of 3)")
    for stack in ("unicast3+nakack2", "unicast3+mcast"):
        runs = [multicast_run(stack, args.count // 2, LinkFaults(delay=0.001)) for _ in range(3)]
        elapsed, sent, delivered = sorted(runs)[1]
        report(
            f"simulator, {stack}, 4 members multicasting",
            sent / elapsed,
            "multicasts/s real",
            f"({delivered / elapsed:,.0f} deliveries/s; median of 3)",
        )


if __name__ == "__main__":
    main()
