"""Simulator speed: simulated application messages per second of real time.

Three members, every pair streaming, with and without faults (20% loss, 5% duplication, 1 ms jitter); every message
goes through the real stack and real wire encoding. Run: python -m bench.sim_speed
"""

from __future__ import annotations

import argparse

from bench.common import median_time, report
from orchestration.backends.sim import LinkFaults, Simulation

PROPS = {"unicast3": {"xmit_interval": "100ms"}}


def one_run(count: int, link: LinkFaults, stack: str = "unicast3") -> Simulation:
    sim = Simulation(3, seed=1, stack=stack, properties={stack: PROPS["unicast3"]}, link=link, record=False)
    for s in sim.members:
        for d in sim.members:
            if s != d:
                sim.stream(s, d, count, rate=5000)
    if not sim.run_until(sim.quiet, 300):
        raise RuntimeError("the benchmark run did not settle")
    return sim


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--count", type=int, default=5000, help="messages per sender and destination")
    args = ap.parse_args(argv)
    total = args.count * 6
    for label, link in (
        ("no faults", LinkFaults(delay=0.001)),
        ("20% loss, 5% dup, 1 ms jitter", LinkFaults(delay=0.001, jitter=0.001, loss=0.2, duplicate=0.05)),
    ):
        t = median_time(lambda link=link: one_run(args.count, link), repeats=3)
        report(f"simulator, unicast3, 3 members, {label}", total / t, "msgs/s real", f"({total} msgs, median of 3)")


if __name__ == "__main__":
    main()
