"""What NAKACK2's default last-seqno announcement costs: the same explore schedules run side by side, in one process
and interleaved, with `nakack2.resend_last_seqno_max_times` = 0 (the default: HIGHEST_SEQNO at every retransmit run
until STABLE has purged it, as JGroups' ReliableMulticast) and = 1 (NAKACK2's default, JGRP-2167's flawed value).

Printed per variant: the median CPU seconds per schedule (run and checked, as explore does; CPU time, so other work
on the machine does not count), the HIGHEST_SEQNOs and datagrams all members sent per schedule (medians, from their
`stop` events), and how many schedules failed; then the ratio of the CPU medians.

    python -m bench.bench_last_seqno [--scenario FILE] [--seed N] [--schedules N]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench.common import report
from orchestration.explore.case import load_base, run_case, scenario_of, with_faults
from orchestration.explore.context import context_of
from orchestration.explore.generator import Generator
from orchestration.explore.search import schedule_rng, schedule_seed

VARIANTS = (0, 1)  # resend_last_seqno_max_times


def sent_counters(run: Path) -> tuple[int, int]:
    """(HIGHEST_SEQNOs, datagrams) every member sent in a run, from the counters of their `stop` events."""
    highest = datagrams = 0
    for path in (run / "history").glob("*.jsonl"):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            if event.get("event") == "stop":
                counters = event["counters"]
                highest += counters.get("nakack2", {}).get("highest_seqno_sent", 0)
                datagrams += counters["stack"]["datagrams_sent"]
    return highest, datagrams


def measure(scenario: str, seed: int, schedules: int) -> dict[int, dict[str, list[float]]]:
    bases = {v: load_base(scenario, [f"cluster.properties.nakack2.resend_last_seqno_max_times={v}"]) for v in VARIANTS}
    generator = Generator(context_of(scenario_of(bases[VARIANTS[0]])))
    figures: dict[int, dict[str, list[float]]] = {
        v: {"cpu": [], "hsn": [], "dgrams": [], "failed": []} for v in VARIANTS
    }
    work = Path(tempfile.mkdtemp(prefix="bench-last-seqno-"))
    try:
        for i in range(schedules):
            s = schedule_seed(seed, i)
            faults = generator.draw(schedule_rng(s))
            for v in VARIANTS if i % 2 == 0 else VARIANTS[::-1]:  # alternate the order: no variant always runs first
                out = work / f"run-{v}"
                t = time.process_time()
                res = run_case(with_faults(bases[v], faults, s), out, keep=True)
                figures[v]["cpu"].append(time.process_time() - t)
                hsn, dgrams = sent_counters(out)
                shutil.rmtree(out, ignore_errors=True)
                figures[v]["hsn"].append(hsn)
                figures[v]["dgrams"].append(dgrams)
                figures[v]["failed"].append(float(res.failed))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return figures


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="scenarios/partition-heal.toml")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--schedules", type=int, default=24)
    a = ap.parse_args(argv)
    figures = measure(a.scenario, a.seed, a.schedules)
    print(f"{a.schedules} schedules of {a.scenario} (explore seed {a.seed}), each with both values:")
    for v in VARIANTS:
        f = figures[v]
        note = f"failed {int(sum(f['failed']))} of {a.schedules}"
        report(f"max_times={v}: CPU per schedule (median)", statistics.median(f["cpu"]), "s", note)
        report(f"max_times={v}: HIGHEST_SEQNOs sent per schedule (median)", statistics.median(f["hsn"]), "")
        report(f"max_times={v}: datagrams sent per schedule (median)", statistics.median(f["dgrams"]), "")
    cpu = {v: statistics.median(figures[v]["cpu"]) for v in VARIANTS}
    report("CPU per schedule, 0 against 1 (ratio of medians)", cpu[0] / cpu[1], "x")


if __name__ == "__main__":
    main()
