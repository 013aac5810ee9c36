"""Simulator speed: simulated application messages per second of CPU time on one core (the simulator is one thread;
CPU time, not wall time, so other work on the machine does not count).

Three members, every pair streaming, with and without faults (20% loss, 5% duplication, 1 ms jitter); every message
goes through the real stack and real wire encoding. Run: python -m bench.sim_speed

The first rows pace the workloads as a real member's sender loop does (node/runtime.py polls every 1 ms, so at 5,000
msgs/s about 5 messages to a destination go out together, bundled into one datagram), which is how `chaosbed run
--backend sim` runs scenarios (`Simulation(sender_poll=POLL)`, orchestration/sim/cluster.py); the "a wake per
message" rows run the same workload with `Simulation`'s default, which wakes a paced task for every single message.
"""

from __future__ import annotations

import argparse
import itertools
import time

from bench.common import median_time, report
from node.workload import POLL
from orchestration.sim.simulation import LinkFaults, Simulation

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


def multicast_run(stack: str, count: int, link: LinkFaults, sender_poll: float = POLL) -> tuple[float, int, int]:
    """4 members form a view, then each multicasts `count` 100-byte messages; returns (CPU s, multicasts,
    deliveries) for the streaming part only."""
    props = {k: v for k, v in MEMBERSHIP.items() if k in ("fd", "merge") or k in stack}
    sim = Simulation(4, seed=1, stack=stack, properties=props, link=link, record=False, sender_poll=sender_poll)
    if not sim.run_until(lambda: sim.views_agree() and len(sim.view("A").members) == 4, 60):
        raise RuntimeError("no view of 4")
    for m in sim.members:
        sim.multicast_stream(m, count, rate=5000, size=100)
    start = time.process_time()
    if not sim.run_until(sim.quiet, 300, check_every=0.5):
        raise RuntimeError("the multicast benchmark run did not settle")
    elapsed = time.process_time() - start
    deliveries = sum(len(m.deliveries) for m in sim.members.values())
    return elapsed, 4 * count, deliveries


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--count", type=int, default=5000, help="messages per sender and destination")
    args = ap.parse_args(argv)
    total = args.count * 6
    for poll in (POLL, 0.0):
        for label, link in (
            ("no faults", LinkFaults(delay=0.001)),
            ("20% loss, 5% dup, 1 ms jitter", LinkFaults(delay=0.001, jitter=0.001, loss=0.2, duplicate=0.05)),
        ):
            t = median_time(
                lambda link=link, poll=poll: one_run(args.count, link, sender_poll=poll), 3, time.process_time
            )
            label += "" if poll else ", a wake per message"
            report(f"simulator, unicast3, 3 members, {label}", total / t, "msgs/s CPU", f"({total} msgs, median of 3)")
    for stack, poll in itertools.product(("unicast3+nakack2", "unicast3+mcast"), (POLL, 0.0)):
        runs = [multicast_run(stack, args.count // 2, LinkFaults(delay=0.001), poll) for _ in range(3)]
        elapsed, sent, delivered = sorted(runs)[1]
        report(
            f"simulator, {stack}, 4 members multicasting" + ("" if poll else ", a wake per message"),
            sent / elapsed,
            "multicasts/s CPU",
            f"({delivered / elapsed:,.0f} deliveries/s; median of 3)",
        )


if __name__ == "__main__":
    main()
