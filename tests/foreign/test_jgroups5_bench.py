"""bench/bench_jgroups5.py on equal terms, small (root, a JDK and the 5.5.6 jar): both sides write a history line per
message at every receiver and deliver every message in every round; a restarted member's start times come from its
new incarnation's history in the order they happen; the peak RSS comes from both members' `stats`; a partition run
on JGroups 5.5.6 and on chaosbed with the matched timings splits, merges and delivers the split's unicasts. A bad
--sizes is one line, no traceback. bench/profile_member.py reads py-spy's raw output into self and inclusive shares
(no root needed for that part)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TypeVar

import pytest

from bench import bench_jgroups5 as b5
from tests.foreign.jgroups_clusters import NETNS_MISSING, skip_unless

REAL = (
    pytest.mark.netns,
    pytest.mark.jgroups,
    pytest.mark.slow,
    pytest.mark.skipif(bool(NETNS_MISSING), reason=str(NETNS_MISSING)),
    skip_unless(b5.UDP),
    skip_unless(b5.NAKACK4),
)
T = TypeVar("T")


def real(test: T) -> T:
    """The marks of a test on real members (the bad-input test runs anywhere)."""
    for mark in REAL:
        test = mark(test)
    return test


def _check(sides: tuple[b5.Side, b5.Side], repeats: int) -> None:
    for side in sides:
        # a deliver line per message (and at most a few other events: a connection's, a view)
        assert all(1.0 <= x <= 1.01 for x in side.lines_per_message), side.lines_per_message
        assert len(side.rates) == repeats and min(side.rates) > 0, side.rates


@pytest.mark.parametrize(
    ("system", "ours", "kinds"),
    [(b5.UDP, "unicast3+nakack2", (False, True)), (b5.NAKACK4, "unicast3+mcast", (True,))],
    ids=["udp", "nakack4"],
)
@real
def test_rounds_starts_and_rss(system: str, ours: str, kinds: tuple[bool, ...]) -> None:
    with contextlib.ExitStack() as stack:
        pair = b5.start_pair(system, ours, stack)
        for multicast in kinds:
            _check(b5.compare(pair, multicast, 3000, 100 if multicast else 1000, 2), 2)
        assert pair.idle_rss_kib["jgroups"] > 30 * 1024 and pair.idle_rss_kib["chaosbed"] > 10 * 1024, pair
        assert b5.peak_rss(pair.jgroups) >= pair.idle_rss_kib["jgroups"]  # a peak never shrinks
        if system == b5.UDP:
            starts = b5.start_rounds(pair, 1)
            for side, (t,) in starts.items():
                assert 0 < t.start_line <= t.ready < 60 and t.start_line <= t.joined < 60, (side, t)


@pytest.mark.parametrize("side", list(b5.PARTITION_SIDES)[:2])
@real
def test_a_partition_run_on_each_side(side: str, tmp_path: Path) -> None:
    outcome = b5.partition.one_run(tmp_path / "run", False, b5.PARTITION_SIDES[side], stream_s=10)
    assert outcome.split_ab is not None and outcome.split_c is not None, outcome
    assert outcome.merged is not None and outcome.stall_unicast is not None, outcome
    assert all(sorted(v.split()[-1]) == ["A", "B", "C"] for v in outcome.final_views.values()), outcome.final_views


@pytest.mark.parametrize("argv", [["--sizes", "100,x"], ["--sizes", ""], ["--messages", "0"]])
def test_bad_arguments_are_one_line(argv: list[str]) -> None:
    with pytest.raises(SystemExit, match="bench_jgroups5: ") as e:
        b5.main(argv)
    assert "\n" not in str(e.value)


def test_the_profile_summary_counts_self_and_inclusive_shares(tmp_path: Path) -> None:
    """bench/profile_member.py's reading of py-spy's raw output (`frame;frame;... count` per stack)."""
    from bench import profile_member

    raw = tmp_path / "A.txt"
    loop = "run (runners.py:118);BaseEventLoop._run_once (base_events.py:1922)"
    raw.write_text(
        f"{loop};EpollSelector.select (selectors.py:468) 25\n"
        f"{loop};Member._read_udp (runtime.py:191);decode_message (wire_codec.py:284) 50\n"
        f"{loop};Member._read_udp (runtime.py:191) 25\n"
        "not a stack line\n"
    )
    lines = profile_member.summary(raw, top=3)
    assert lines[0] == "  100 samples; waiting in the selector 25%"
    assert "     50.0%  decode_message (wire_codec.py)" in lines  # self
    assert "     75.0%  Member._read_udp (runtime.py)" in lines  # inclusive, below the loop (in every stack)
    assert not any("BaseEventLoop" in line for line in lines[lines.index("  inclusive (below the event loop):") :])


def test_profile_member_bad_arguments_are_one_line() -> None:
    from bench import profile_member

    with pytest.raises(SystemExit, match="profile_member: need"):
        profile_member.main(["--messages", "0"])
