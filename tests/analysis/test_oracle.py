"""Property test without Spark: on randomly damaged histories, the per-group pass that Spark runs
(`streams.check_sender` over the cached groups) and the plain-Python reference checker find the same violations."""

from __future__ import annotations

import json
import random
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analysis.config import read_checks
from analysis.ingest import ingest
from analysis.membership import read_faults
from analysis.pipeline import run_infos
from analysis.reference import check_path
from analysis.results import collect
from analysis.schema import discover_runs
from analysis.spark_job import read_group
from analysis.streams import OUT_SCHEMA, check_sender
from analysis.synth import write_run
from tests.analysis.helpers import violation_keys


def local_results(root: Path) -> dict:
    """What check_events computes on Spark, in this process: every group file through check_sender."""
    import pyarrow as pa

    runs = discover_runs(root)
    ing = ingest(runs, root)
    faults = {r.name: read_faults(r.faults_file) for r in runs}
    checks = {r.name: read_checks(r.scenario_file) for r in runs}
    infos, _ = run_infos(runs, ing, faults, checks)
    tables = [check_sender(read_group(str(ing.cache / g.path)), infos[g.run], g.key) for g in ing.groups]
    return collect(pa.concat_tables([OUT_SCHEMA.empty_table(), *tables]), infos)


def damage(history: Path, rng: random.Random, drop: float, dup: float, swap: float, phantoms: int) -> None:
    """Drops, duplicates and reorders delivery lines and adds phantom deliveries, in every member's file."""
    for f in sorted(history.glob("*.jsonl")):
        lines = f.read_text().splitlines()
        cut = lines.pop() if lines and not lines[-1].endswith("}") else None  # a cut-off last line stays last
        out: list[str] = []
        for line in lines:
            if '"event":"deliver"' in line:
                if rng.random() < drop:
                    continue
                if rng.random() < dup:
                    out.insert(rng.randint(len(out) // 2, len(out)), line) if out else out.append(line)
            out.append(line)
        for i, line in enumerate(out):  # swap with one of the next deliveries of the same stream
            if '"event":"deliver"' in line and rng.random() < swap:
                e = json.loads(line)
                skip = rng.randint(0, 2)
                for j in range(i + 1, len(out)):
                    o = json.loads(out[j]) if out[j].endswith("}") else {}
                    if o.get("event") == "deliver" and (o["sender"], o["kind"]) == (e["sender"], e["kind"]):
                        if skip == 0:  # the lines change places, their times stay (t only grows in a file)
                            e["t"], o["t"] = o["t"], e["t"]
                            out[i], out[j] = json.dumps(o), json.dumps(e)
                            break
                        skip -= 1
        for k in range(phantoms):
            e = json.loads(next(x for x in out if '"event":"deliver"' in x))
            e["msg_id"] = f"ghost-{f.stem}-{k}"
            out.insert(rng.randint(1, len(out)), json.dumps(e))
        f.write_text("\n".join(out) + ("\n" + cut if cut else "\n"))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    scenario=st.sampled_from(["clean", "crash", "restart", "partition", "truncated"]),
    seed=st.integers(0, 10_000),
    drop=st.sampled_from([0.0, 0.02, 0.1]),
    dup=st.sampled_from([0.0, 0.02]),
    swap=st.sampled_from([0.0, 0.02, 0.1]),
    phantoms=st.integers(0, 2),
)
def test_spark_pass_and_reference_agree(
    tmp_path_factory, scenario: str, seed: int, drop: float, dup: float, swap: float, phantoms: int
) -> None:
    root = tmp_path_factory.mktemp("oracle")
    write_run(root / "r", members=4, rounds=16, inject=[] if scenario == "clean" else [scenario], seed=seed)
    damage(root / "r" / "history", random.Random(seed), drop, dup, swap, phantoms)
    ref = check_path(root)["r"]
    got = local_results(root)["r"]
    assert violation_keys(got.violations) == violation_keys(ref.violations)
    for counter in ("duplicates", "phantoms", "reordered"):  # every extra, phantom and late delivery, counted alike
        assert got.counters[counter] == ref.counters[counter], counter
    if drop == dup == swap == phantoms == 0:
        assert ref.violations == []
