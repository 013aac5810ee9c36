"""Network claims: concurrent clusters (xdist workers, matrix cells) never get the same subnet."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from orchestration.host import claims


@pytest.fixture
def claims_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "claims"
    monkeypatch.setattr(claims, "CLAIMS_DIR", folder)
    return folder


def _claim_in_another_process(folder: Path, label: str, space: int, state_dir: Path) -> subprocess.Popen[str]:
    """A process that claims an index, prints it, and stays alive (a live owner) until its stdin closes."""
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from orchestration.host import claims
        claims.CLAIMS_DIR = Path({str(folder)!r})
        try:
            print(claims.claim({label!r}, "netns", {space}, Path({str(state_dir)!r})), flush=True)
        except claims.NoFreeNetwork:
            print("full", flush=True)
        sys.stdin.read()
    """)
    return subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=Path.cwd()
    )


def test_concurrent_claims_get_distinct_indices_until_none_is_free(claims_dir: Path, tmp_path: Path) -> None:
    procs = [_claim_in_another_process(claims_dir, f"cb00000{i}", 4, tmp_path / "none") for i in range(5)]
    try:
        answers = [p.stdout.readline().strip() for p in procs]
    finally:
        for p in procs:
            p.communicate("", timeout=30)
    indices = [a for a in answers if a != "full"]
    assert sorted(indices) == ["0", "1", "2", "3"], answers
    assert answers.count("full") == 1


def test_a_claim_lapses_when_its_owner_is_gone_and_nothing_of_the_cluster_is_left(
    claims_dir: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state-of-cbaaaaaa"
    state.mkdir()
    proc = _claim_in_another_process(claims_dir, "cbaaaaaa", 1, state)
    assert proc.stdout.readline().strip() == "0"
    proc.communicate("", timeout=30)  # the owner exits; the cluster's state folder still exists
    assert claims.owned_labels() == set()
    with pytest.raises(claims.NoFreeNetwork):  # a cluster left running by `chaosbed up` keeps its network
        claims.claim("cbbbbbbb", "netns", 1, tmp_path / "other")
    state.rmdir()  # taken down: now the index is free again, and the stale claim is gone
    assert claims.claim("cbbbbbbb", "netns", 1, tmp_path / "other") == 0
    assert sorted(p.name for p in claims_dir.glob("*.json")) == ["cbbbbbbb.json"]


def test_owned_labels_names_live_owners_and_prune_removes_only_lapsed_claims(claims_dir: Path, tmp_path: Path) -> None:
    claims.claim("cbcccccc", "process", 10, tmp_path / "gone")  # owned by this (live) process
    proc = _claim_in_another_process(claims_dir, "cbdddddd", 10, tmp_path / "gone-too")
    assert proc.stdout.readline().strip().isdigit()
    assert claims.owned_labels() == {"cbcccccc", "cbdddddd"}
    proc.communicate("", timeout=30)
    assert claims.owned_labels() == {"cbcccccc"}
    assert claims.prune() == ["cbdddddd"]
    claims.release("cbcccccc")
    claims.release("cbcccccc")  # idempotent
    assert list(claims_dir.glob("*.json")) == []


def test_kinds_do_not_share_indices_and_a_damaged_claim_blocks_nothing(claims_dir: Path, tmp_path: Path) -> None:
    assert claims.claim("cb111111", "netns", 1, tmp_path) == 0
    assert claims.claim("cb222222", "process", 1, tmp_path) == 0  # another kind: another address range
    (claims_dir / "cb333333.json").write_text("{not json")
    (claims_dir / "cb444444.json").write_text(json.dumps({"label": "cb444444"}))
    assert claims.claim("cb555555", "veth", 1, tmp_path) == 0
