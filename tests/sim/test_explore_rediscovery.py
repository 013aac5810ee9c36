"""Rediscovery: with a catalogue bug's flawed property set and none of its faults, explore finds a schedule violating
exactly the bug's checks, shrinks it to at most 4 faults, and the minimal scenario (as minimal.toml, replayed as
`chaosbed run` would) fails on the flawed variant and passes on the fixed one. A fixed seed and a budget in
schedules keep each case deterministic and under a minute; bench/bench_explore.py runs the whole catalogue."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestration.explore.case import load_base, run_case
from orchestration.explore.minimal import Provenance, write_minimal
from orchestration.explore.pool import make_pool
from orchestration.explore.rediscover import rediscover, variant_of
from orchestration.matrix.bugs import catalogue, find

pytestmark = pytest.mark.sim

# (bug, search seed, schedules): each is found well within its budget with that seed
CASES = [
    pytest.param("unicast3-duplicates-not-reacked", 1, 100, id="unicast3-duplicates-not-reacked"),
    pytest.param("mcast-window-full-two-stop-acking", 1, 100, id="mcast-window-full-two-stop-acking"),
    pytest.param("gms-leave-view-lost", 2, 100, id="gms-leave-view-lost", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("name, seed, schedules", CASES)
def test_explore_rediscovers_a_catalogue_bug_from_scratch(name: str, seed: int, schedules: int, tmp_path: Path) -> None:
    (entry,) = find(catalogue(), name)
    pool = make_pool(2)
    try:
        r = rediscover(entry, pool, seed=seed, schedules=schedules, scratch=tmp_path)
    finally:
        pool.close()
    assert r.found is not None and r.shrunk is not None, f"not found in {r.tried} schedules ({r.shared} shared)"
    want = tuple(sorted(entry.bug.violates))
    assert r.found.result.violated == want
    assert r.faults_after is not None and r.faults_after <= 4, r.shrunk.raw.get("faults")
    assert r.ok, f"minimal: flawed {r.flawed}, fixed {r.fixed}"
    for variant, expected in (("flawed", want), ("fixed", ())):
        path = tmp_path / variant / "minimal.toml"
        path.parent.mkdir()
        prov = Provenance("test", r.found.index, r.found.seed, want, tuple(r.found.faults))
        raw = variant_of(r.shrunk.raw, entry, variant)
        write_minimal(path, raw, prov, r.shrunk.trail, r.shrunk.runs, r.shrunk.complete)
        replay = run_case(load_base(path, keep_faults=True), tmp_path / variant / "run")
        assert replay.violated == expected, f"{variant}: {replay.details}"
