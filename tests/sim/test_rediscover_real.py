"""orchestration/explore/rediscover_real.py, the real-member rediscovery of bench_explore, driven here through a
simulator pool (the same search, judged shrink and confirmation, in seconds): a catalogue bug is found, shrunk with
each candidate's control run beside it, confirmed on every run and its control passes; a schedule whose control fails
too is searched past; the variants a real pair sets (a release) are what the control runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestration.explore.case import CaseResult
from orchestration.explore.pool import make_pool
from orchestration.explore.rediscover_real import CONTROL_FAILED, RealSpec, _Judged, rediscover_real, variant_pair
from orchestration.explore.tables import TomlTable
from orchestration.matrix.bugs import catalogue, find

pytestmark = pytest.mark.sim


def test_a_catalogue_bug_is_found_shrunk_and_confirmed_with_its_control(tmp_path: Path) -> None:
    (entry,) = find(catalogue(), "nakack2-last-message-lost")
    pool = make_pool(1)
    try:
        r = rediscover_real(entry, pool, RealSpec(budget=120, shrink_runs=12, confirm_runs=3), tmp_path)
    finally:
        pool.close()
    assert r.found is not None and r.shrunk is not None, f"not found in {r.tried} schedules"
    assert r.found.result.violated == ("delivered_within",)
    assert r.faults_after is not None and r.faults_after <= len(r.found.faults)
    assert r.confirm is not None and r.confirm["runs"] == 3 and r.confirm["reproduced"] == 3
    assert (r.control_passed, r.control_ran) == (3, 3) and r.ok
    minimal = (tmp_path / "rediscover-nakack2-last-message-lost" / "minimal.toml").read_text()
    assert "resend_last_seqno = false" in minimal, "the minimal scenario is the flawed variant"


def test_a_candidate_whose_control_fails_too_is_not_the_bug() -> None:
    (entry,) = find(catalogue(), "nakack2-last-message-lost")

    class Pool:
        backend = "sim"

        def map(self, raws: list[TomlTable]) -> list[CaseResult]:
            return [CaseResult(("delivered_within",)) for _ in raws]  # the flawed and the fixed variant both fail

    judged = _Judged(entry, Pool(), ("delivered_within",))  # type: ignore[arg-type]
    assert judged([{}])[0].violated == (CONTROL_FAILED,)
    assert judged.control_passes({}) is False and judged.cluster_runs == 3


def test_a_schedule_whose_control_fails_as_found_is_shrunk_to_one_whose_control_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real timing: the fixed variant fails every schedule with a fault (the flawed one fails them all)."""
    import orchestration.explore.pool as pool_module

    def run_job(raw: TomlTable, *args: object, **kwargs: object) -> CaseResult:
        props = raw["cluster"].get("properties", {})  # type: ignore[union-attr]
        flawed = props.get("nakack2", {}).get("resend_last_seqno") is False
        faults = len(raw.get("faults", []))  # type: ignore[arg-type]
        return CaseResult(("delivered_within",) if flawed or faults else ())

    monkeypatch.setattr(pool_module, "run_job", run_job)
    (entry,) = find(catalogue(), "nakack2-last-message-lost")
    pool = make_pool(1)
    try:
        r = rediscover_real(entry, pool, RealSpec(budget=60, shrink_runs=40, confirm_runs=2), tmp_path)
    finally:
        pool.close()
    assert r.found is not None and r.shrunk is not None and r.shared == 1, "the first schedule's control fails"
    assert r.found.index == 0 and r.faults_after == 0, r.shrunk.trail
    assert (r.control_passed, r.control_ran) == (3, 3) and r.ok


def test_the_variants_a_real_search_runs() -> None:
    by_name = {e.path.stem: e for e in catalogue()}
    assert variant_pair(by_name["unicast2-last-message"]) == ("flawed", "fixed")
    assert variant_pair(by_name["jgroups-nakack-last-message"]) == ("flawed", None), "no fix: no control"
    assert variant_pair(by_name["jgroups-unicast2-last-message"]) == ("flawed", "fixed")
    real_only = next(e for e in catalogue() if not e.bug.model_variants)
    assert variant_pair(real_only) == ("real-flawed", "real-fixed")
