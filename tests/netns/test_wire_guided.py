"""The wire tap and the wire-guided search on netns, for chaosbed's own member and the real JGroups 5 jar:

- a tapped run's wire.jsonl counts what the members sent, by message type, as their histories say they sent it
  (A's UNICAST2.DATA to B: each message A sent, retransmissions and the one the discard rule dropped at B included),
  and the coverage finds where each of A's bursts ended (its tails);
- on JGroups 5 it shows the protocol at work across a split and its heal (MERGE3, GMS merge messages), and the
  coverage places them against the split;
- `chaosbed explore --backend netns --guide wire` records a corpus and mutates it; no tap outlives its run;
- a run's pressure (how near it came to a bounded check's limit) is what its histories show: the flawed
  unicast2-last-message's wait for the second burst, and next to nothing with the fix."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from orchestration.explore.coverage import coverage_of
from orchestration.runner import run
from orchestration.scenario import load
from tests.clusters import chaos_tests, clusters_under
from tests.netns.test_explore_real import explore

pytestmark = [*chaos_tests(nfqueue=True), pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
BUG = REPO / "scenarios" / "bugs" / "unicast2-last-message.toml"
SPLIT = REPO / "scenarios" / "jgroups5-split-heal.toml"


def wire_counts(out: Path) -> dict[tuple[str, str, str], int]:
    counts: dict[tuple[str, str, str], int] = {}
    lines = [json.loads(x) for x in (out / "wire.jsonl").read_text().splitlines()]
    assert lines[-1]["event"] == "end" and lines[-1]["kernel_drops"] == 0, lines[-1]
    for d in lines[:-1]:
        counts[(d["src"], d["dst"], d["key"])] = counts.get((d["src"], d["dst"], d["key"]), 0) + d["n"]
    return counts


def taps_running(folder: Path) -> list[int]:
    """Pids of wire taps writing into `folder` (read from /proc; nothing is signalled)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"chaos.wiretap" in cmd and any(str(folder).encode() in c for c in cmd):
            out.append(int(pid))
    return out


def test_a_tapped_run_counts_what_the_members_sent(tmp_path: Path) -> None:
    out = tmp_path / "run"
    run(load(BUG, ["cluster.properties.unicast2.resend_last_seqno=false"]), "netns", out, tap=True)
    history = [json.loads(x) for x in (out / "history" / "A.jsonl").read_text().splitlines()]
    sent = sum(1 for e in history if e["event"] == "send" and e.get("dest") == "B")
    xmits = sum(1 for e in history if e["event"] == "xmit")
    assert sent == 100
    counts = wire_counts(out)
    data = counts[("A", "B", "UNICAST2.DATA")]
    assert sent <= data <= sent + xmits + 5, (data, sent, xmits)  # + a few resends of the highest seqno
    assert counts.get(("B", "A", "UNICAST2.XMIT_REQ"), 0) >= 1, "B asked for #50 once #51 showed the gap"
    assert not any(k[0] == "B" and k[2] == "UNICAST2.DATA" for k in counts), "B sent no data"
    # each of A's two bursts ends in a tail, at its last send's 100 ms bin, on the schedule's clock
    start = json.loads((out / "faults.jsonl").read_text().splitlines()[0])["t"]
    sends = [e["t"] for e in history if e["event"] == "send" and e.get("dest") == "B"]
    ends = [(a - start) / 1e9 for a, b in zip(sends, [*sends[1:], None], strict=True) if b is None or b - a > 1e9]
    tails = [t[3] for t in coverage_of(out).tails if t[:3] == ("A", "B", "UNICAST2.DATA")]
    assert len(ends) == 2 and len(tails) == 2, (ends, tails)
    assert all(-0.15 < e - t < 0.25 for e, t in zip(ends, tails, strict=True)), (ends, tails)
    assert taps_running(tmp_path) == []


def test_the_tap_shows_a_jgroups5_split_and_merge(tmp_path: Path) -> None:
    out = tmp_path / "run"
    run(load(SPLIT), "netns", out, tap=True)
    counts = wire_counts(out)
    keys = {k for _, _, k in counts}
    assert {"MERGE3.INFO", "GMS.MERGE_REQ", "GMS.MERGE_RSP", "GMS.INSTALL_MERGE_VIEW", "NAKACK2.MSG"} <= keys, keys
    cov = coverage_of(out)
    # failure detection takes seconds: the shrink comes during the 3 s split or just after it, the merge later
    assert {f for f in cov.features if f.startswith("view shrink split-")}, cov.features
    assert {f for f in cov.features if f.startswith("view merge split-")}, cov.features
    assert any(f.startswith("wire split during cut ") for f in cov.features)
    assert taps_running(tmp_path) == []


def test_a_guided_search_keeps_a_corpus_and_mutates_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "x"
    code, text = explore(tmp_path, monkeypatch, BUG, "--set", "cluster.properties.unicast2.resend_last_seqno=true",
                         "--backend", "netns", "--guide", "wire", "--schedules", "6", "-j", "2", "--shrink-runs", "0",
                         "--confirm-runs", "1", "--no-check", "--out", out)  # fmt: skip
    assert code in (0, 1), text
    doc = json.loads((out / "explore.json").read_text())
    assert doc["guide"] == "wire" and "--guide wire" in doc["command"]
    guided = doc["guided"]
    assert guided["features"] > 0 and 1 <= guided["corpus"] <= 6
    assert sum(guided["drawn"].values()) == 6 and guided["drawn"]["random"] >= 1
    assert sum(guided["kept_from"].values()) == guided["corpus"]
    assert "guided by the wire:" in text
    assert all("origin" in f for f in doc["failures"])
    assert clusters_under(tmp_path) == [] and taps_running(tmp_path) == []


@pytest.mark.parametrize("resend_last", [False, True])
def test_a_near_miss_is_measured_from_the_histories(tmp_path: Path, resend_last: bool) -> None:
    """The bug's file with a bound it cannot miss (10 s): without the fix the dropped last message of A's first burst
    waits for the second burst, 5 s in, and the run passes at about half the bound; with it, it comes at once."""
    from orchestration.explore.case import load_base
    from orchestration.explore.real_case import Keep, run_real_case

    sets = [f"cluster.properties.unicast2.resend_last_seqno={str(resend_last).lower()}", "checks.delivered_within=10s"]
    raw = load_base(BUG, sets, keep_faults=True)
    res = run_real_case(raw, tmp_path / "run", "netns", Keep())
    assert res.error is None and not res.failed, (res.error, res.details)
    if resend_last:
        assert res.pressure < 0.1, res.pressure  # resent within an xmit_interval (200 ms): under 1 s of 10
    else:
        assert 0.3 < res.pressure < 0.5, res.pressure  # 4.5 s (5 s less the burst's 0.5 s) of 10
    assert clusters_under(tmp_path) == []
