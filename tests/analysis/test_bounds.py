"""delivered_within, control_per_heal and the `leave` fault (docs/analysis.md).

Hand-written histories (exact times, every event placed on purpose) in one matrix folder, checked by one Spark job
(module fixture) and by the plain-Python reference checker: each check fires exactly where it should, and the two
checkers agree on the violations, their details and the statistics. A property test without Spark compares the
per-group pass with the reference on randomly delayed synthetic runs.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from rich.console import Console

from analysis.command import configured_bounds, print_verdict
from analysis.config import InputError, read_checks
from analysis.ingest import ingest
from analysis.membership import fault_intervals, read_faults
from analysis.pipeline import Analysis, analyze, run_infos
from analysis.reference import RefResult, check_path
from analysis.results import collect
from analysis.schema import discover_runs
from analysis.spark_job import read_group
from analysis.stats import DeliveredWithin
from analysis.streams import OUT_SCHEMA, check_sender
from analysis.synth import write_run
from orchestration.toml_text import toml_document
from tests.analysis.helpers import violation_keys
from tests.analysis.test_oracle import damage

T0 = 1_000_000_000  # ns: the runs' first event
MS = 1_000_000


def at(ms: float) -> int:
    """A time `ms` milliseconds after the run's first event, in ns."""
    return T0 + round(ms * MS)


@dataclass
class History:
    """A run built event by event: every member joins one view at 0 ms and writes `stop` at `end_ms` unless it
    ended (kill or leave without a later restart) or `stops` says otherwise."""

    members: tuple[str, ...] = ("A", "B", "C")
    checks: dict = field(default_factory=dict)
    end_ms: float = 10_000
    events: dict[str, list[dict]] = field(default_factory=dict)
    faults: list[dict] = field(default_factory=list)
    stops: dict[str, bool] = field(default_factory=dict)
    n: int = 0
    seq: dict[tuple, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for m in self.members:
            self.event(m, 0, "view", view_id="A|1", members=list(self.members), merge=False)

    def event(self, member: str, ms: float, event: str, **kw: object) -> None:
        self.events.setdefault(member, []).append({"t": at(ms), "member": member, "event": event, **kw})

    def _msg(self, sender: str) -> str:
        self.n += 1
        return f"{sender}.{self.n}"

    def unicast(self, s: str, d: str, sent_ms: float, delivered_ms: float | None, *more_ms: float) -> str:
        """A unicast on connection 1; delivered at `delivered_ms` (None: never), and again at each of `more_ms`."""
        seq = self.seq[(s, d)] = self.seq.get((s, d), 0) + 1
        mid = self._msg(s)
        fields = {"kind": "unicast", "sender": s, "dest": d, "conn_id": 1, "seqno": seq, "msg_id": mid, "size": 10}
        self.event(s, sent_ms, "send", **fields)
        for t in [x for x in (delivered_ms, *more_ms) if x is not None]:
            self.event(d, t, "deliver", **fields)
        return mid

    def multicast(self, s: str, sent_ms: float, delivered: dict[str, float]) -> str:
        seq = self.seq[(s, None)] = self.seq.get((s, None), 0) + 1
        mid = self._msg(s)
        fields = {"kind": "multicast", "sender": s, "dest": None, "conn_id": None, "seqno": seq, "msg_id": mid}
        self.event(s, sent_ms, "send", **fields)
        for r, t in delivered.items():
            self.event(r, t, "deliver", **fields)
        return mid

    def fault(self, ms: float, kind: str, **kw: object) -> None:
        self.faults.append({"t": at(ms), "event": "fault", "kind": kind, **kw})

    def control(self, member: str, kind: str, *ms: float) -> None:
        for t in ms:
            self.event(member, t, kind)

    def write(self, run: Path) -> Path:
        ended = {}
        for f in self.faults:
            if f["kind"] in ("kill", "leave"):
                ended[f["member"]] = True
            elif f["kind"] == "restart":
                ended[f["member"]] = False
        (run / "history").mkdir(parents=True)
        for m in self.members:
            evs = sorted(self.events.get(m, []), key=lambda e: e["t"])  # stable: same-time events keep their order
            if self.stops.get(m, not ended.get(m, False)):
                evs.append({"t": at(self.end_ms), "member": m, "event": "stop"})
            (run / "history" / f"{m}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evs))
        start = {"event": "start", "t": T0, "seed": 1, "backend": "sim"}
        (run / "faults.jsonl").write_text("".join(json.dumps(f) + "\n" for f in [start, *self.faults]))
        (run / "scenario.toml").write_text(toml_document({"name": "bounds", "checks": self.checks}))
        return run


# ---- the runs ---------------------------------------------------------------------------------------------------
# Each builder returns the history and the violations it must produce, as (check, sender, receiver, msg_id or
# event kind, detail); every other check must hold.

Expected = list[tuple[str, str | None, str | None, str | None, str]]


def no_faults() -> tuple[History, Expected]:
    """No fault: every owed delivery is timed from its send, control events are counted over the whole run."""
    h = History(checks={"delivered_within": "1s", "control_per_heal": {"sync": 10, "xmit": 500}})
    h.unicast("A", "B", 100, 150)
    late = h.unicast("A", "B", 200, 1_700)  # 1.5 s after its send
    h.unicast("A", "B", 300, 1_710)  # FIFO-consistent, 1.41 s
    h.unicast("B", "A", 400, 1_400)  # exactly the bound: on time
    mc = h.multicast("C", 500, {"A": 520, "B": 2_000, "C": 501})  # B 1.5 s late
    h.control("B", "sync", *range(1000, 1012))  # 12 sync events, bound 10
    h.control("A", "sync", *range(1000, 1010))  # exactly 10: fine
    h.control("C", "xmit", *range(1000, 1100))
    return h, [
        ("delivered_within", "A", "B", late, "B delivered it 1.500 s after it was sent at 0.200 s (bound 1 s)"),
        ("delivered_within", "A", "B", "A.3", "B delivered it 1.410 s after it was sent at 0.300 s (bound 1 s)"),
        ("delivered_within", "C", "B", mc, "B delivered it 1.500 s after it was sent at 0.500 s (bound 1 s)"),
        (
            "control_per_heal",
            "B",
            None,
            "sync",
            "B wrote 12 sync events during the run (no fault ended) (bound 10 per heal)",
        ),
    ]


def partition_for() -> tuple[History, Expected]:
    """A partition with `for` (heal at 3 s): deliveries held by it are timed from the heal; a message sent after the
    heal from its send; a late delivery before the heal from its send; control events counted on both sides."""
    h = History(checks={"delivered_within": "1s", "control_per_heal": {"sync": 3}})
    h.fault(1_000, "partition", **{"from": ["A"], "to": ["B"], "for": "2s"})
    h.unicast("A", "B", 500, 2_000)  # late before any heal: 1.5 s after its send
    h.unicast("A", "B", 1_500, 3_500)  # 0.5 s after the heal: on time
    held = h.unicast("A", "B", 1_600, 4_500)  # 1.5 s after the heal
    after = h.unicast("A", "B", 3_200, 4_500.5)  # sent after the heal: 1.3005 s after its send
    h.unicast("B", "A", 3_000, 4_000)  # sent at the heal, exactly the bound: on time
    h.control("B", "sync", 100, 200, 300, 2_999)  # 4 before the heal
    h.control("C", "sync", 3_000, 3_100, 3_200)  # 3 from the heal on (one exactly at it): fine
    h.control("A", "sync", 2_999, 3_000, 3_001, 3_002, 9_000)  # 1 before, 4 after
    return h, [
        ("delivered_within", "A", "B", "A.1", "B delivered it 1.500 s after it was sent at 0.500 s (bound 1 s)"),
        ("delivered_within", "A", "B", held, "B delivered it 1.500 s after the heal at 3.000 s (bound 1 s)"),
        ("delivered_within", "A", "B", after, "B delivered it 1.300 s after it was sent at 3.200 s (bound 1 s)"),
        (
            "control_per_heal",
            "A",
            None,
            "sync",
            "A wrote 4 sync events between the heal at 3.000 s and the end (bound 3 per heal)",
        ),
        (
            "control_per_heal",
            "B",
            None,
            "sync",
            "B wrote 4 sync events before the first heal at 3.000 s (bound 3 per heal)",
        ),
    ]


def heal_record() -> tuple[History, Expected]:
    """Faults without `for` end at the next `heal` record; two heals make three intervals; a kill is instantaneous
    (its own time is a heal)."""
    h = History(members=("A", "B", "C", "D"), checks={"delivered_within": "500ms", "control_per_heal": {"xmit": 2}})
    h.fault(1_000, "split", groups=[["A", "B"], ["C", "D"]])
    h.fault(4_000, "heal")
    h.fault(6_000, "loss", **{"from": ["A"], "to": ["B"], "probability": 0.5})
    h.fault(7_000, "heal")
    for m in h.members:  # everyone installs the merged view right after the split heals
        h.event(m, 4_100, "view", view_id="A|3", members=list(h.members), merge=True)
    h.unicast("A", "C", 1_500, 4_400)  # 0.4 s after the first heal
    split = h.unicast("A", "C", 1_600, 4_600)  # 0.6 s after it
    h.unicast("A", "B", 6_100, 7_500)  # exactly 0.5 s after the second heal
    lossy = h.unicast("A", "B", 6_200, 7_600)  # 0.6 s after it
    h.control("D", "xmit", 500, 600, 700)  # 3 before the first heal
    h.control("C", "xmit", 4_000, 4_100, 6_999)  # 3 between the heals
    h.control("B", "xmit", 7_000, 8_000)  # 2 after the last: fine
    return h, [
        ("delivered_within", "A", "C", split, "C delivered it 0.600 s after the heal at 4.000 s (bound 0.5 s)"),
        ("delivered_within", "A", "B", lossy, "B delivered it 0.600 s after the heal at 7.000 s (bound 0.5 s)"),
        (
            "control_per_heal",
            "C",
            None,
            "xmit",
            "C wrote 3 xmit events between the heal at 4.000 s and the heal at 7.000 s (bound 2 per heal)",
        ),
        (
            "control_per_heal",
            "D",
            None,
            "xmit",
            "D wrote 3 xmit events before the first heal at 4.000 s (bound 2 per heal)",
        ),
    ]


def killed() -> tuple[History, Expected]:
    """C is killed at 2 s: nothing to or from it is owed (late or never delivered, no violation); the kill is a heal
    for the others' deliveries; the killed member's control events still count."""
    h = History(checks={"delivered_within": "1s", "control_per_heal": {"sync": 1}, "views_converge": False})
    h.fault(2_000, "kill", member="C")
    h.unicast("A", "C", 500, 1_900)  # to the killed member, late: not owed
    h.unicast("A", "C", 600, None)  # never delivered: not owed
    h.unicast("C", "A", 700, 1_800)  # from it, late: not owed
    h.unicast("A", "B", 1_000, 2_900)  # 0.9 s after the kill: on time
    late = h.unicast("A", "B", 1_100, 3_100)  # 1.1 s after the kill
    h.multicast("A", 1_200, {"A": 1_201, "B": 1_300, "C": 1_900})  # C's copy late, not owed
    h.control("C", "sync", 100, 200)
    return h, [
        ("delivered_within", "A", "B", late, "B delivered it 1.100 s after the heal at 2.000 s (bound 1 s)"),
        (
            "control_per_heal",
            "C",
            None,
            "sync",
            "C wrote 2 sync events before the first heal at 2.000 s (bound 1 per heal)",
        ),
    ]


def never_delivered() -> tuple[History, Expected]:
    """A message never delivered is complete's violation, not delivered_within's; a duplicate is timed by its first
    delivery; a phantom is no_phantoms' only."""
    h = History(checks={"delivered_within": "1s"})
    lost = h.unicast("A", "B", 100, None)  # lost tail
    h.unicast("B", "A", 100, 200, 5_000)  # on time, then delivered again 4.9 s later
    h.event("C", 300, "deliver", kind="unicast", sender="A", dest="C", conn_id=9, seqno=1, msg_id="ghost")
    return h, [
        ("exactly_once", "B", "A", "B.2", "delivered 2 times to A"),
        ("complete", "A", "B", lost, "never delivered to B, alive at the end"),
        ("no_phantoms", "A", "C", "ghost", "C delivered it but A never sent it"),
    ]


def left() -> tuple[History, Expected]:
    """C leaves at 2 s (and writes a last `stop`): it is not alive at the end, nothing to or from it is owed
    (counted as `left`), the others' views converge without it; a leave is instantaneous (a heal)."""
    h = History(checks={"delivered_within": "1s", "views_converge": "2s"})
    h.fault(2_000, "leave", member="C")
    h.stops["C"] = True
    for m in ("A", "B"):
        h.event(m, 2_100, "view", view_id="A|2", members=["A", "B"], merge=False)
    h.unicast("A", "C", 1_900, None)  # never delivered to the member that left
    h.unicast("C", "A", 1_950, None)  # its last message, never delivered
    h.unicast("A", "C", 2_500, None)  # sent after it left
    h.multicast("A", 2_200, {"A": 2_201, "B": 2_300})
    h.unicast("B", "A", 1_500, 2_900)  # 0.9 s after the leave: on time
    return h, []


def left_and_back() -> tuple[History, Expected]:
    """B leaves and is restarted (a new incarnation that rejoins): alive at the end, owed what was sent to it since."""
    h = History(checks={"delivered_within": "1s"})
    h.fault(1_000, "leave", member="B")
    h.fault(2_000, "restart", member="B")
    for m in h.members:
        h.event(m, 2_100, "view", view_id="A|3", members=list(h.members), merge=False)
    h.unicast("A", "B", 500, None)  # to the incarnation that left: not owed
    h.seq[("A", "B")] = 0  # the new incarnation gets a new connection (same id here, new sender numbering)
    lost = h.unicast("A", "B", 2_500, None)  # to the new one: owed
    return h, [("complete", "A", "B", lost, "never delivered to B, alive at the end")]


def leave_without_stop() -> tuple[History, Expected]:
    """A leave whose member wrote no `stop` (it ended before writing one) reads the same."""
    h, expected = left()
    h.stops["C"] = False
    return h, expected


def off() -> tuple[History, Expected]:
    """Without the bounds in [checks], late deliveries and many control events are no violations."""
    h = History(checks={"fifo": True})
    h.unicast("A", "B", 100, 5_000)
    h.control("A", "sync", *range(100, 200))
    return h, []


RUNS = {
    f.__name__: f
    for f in (no_faults, partition_for, heal_record, killed, never_delivered, left, left_and_back, leave_without_stop)
}


NEW = ("delivered_within", "control_per_heal")  # the checks whose details both checkers word alike


def _expected_keys(expected: Expected) -> list[tuple]:
    return sorted(((c, s, r, w, d if c in NEW else None) for c, s, r, w, d in expected), key=repr)


def _keys(violations: list) -> list[tuple]:
    """(check, sender, receiver, msg_id or, for control_per_heal, the event kind, detail of the new checks)."""
    out = []
    for v in violations:
        what = v.kind if v.check == "control_per_heal" else v.msg_id
        out.append((v.check, v.sender, v.receiver, what, v.detail if v.check in NEW else None))
    return sorted(out, key=repr)


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Expected], dict[str, RefResult]]:
    root = tmp_path_factory.mktemp("bounds")
    expected = {}
    for name, build in {**RUNS, "off": off}.items():
        h, expected[name] = build()
        h.write(root / name)
    return root, expected, check_path(root)


@pytest.fixture(scope="module")
def spark_checked(checked: tuple, spark_target: str) -> Analysis:
    return analyze(checked[0])


# ---- the reference checker: exactly the expected violations ------------------------------------------------------


@pytest.mark.parametrize("name", [*RUNS, "off"])
def test_reference_finds_exactly_the_expected_violations(checked: tuple, name: str) -> None:
    _, expected, ref = checked
    assert _keys(ref[name].violations) == _expected_keys(expected[name])


def test_control_violation_fields(checked: tuple) -> None:
    """sender = the member, receiver/conn/seqno/msg_id null, kind = the event kind, t = the interval's start."""
    ref = checked[2]["partition_for"]
    after = next(v for v in ref.violations if v.check == "control_per_heal" and v.sender == "A")
    assert (after.receiver, after.conn_id, after.seqno, after.msg_id, after.kind) == (None, None, None, None, "sync")
    assert after.t == at(3_000)
    before = next(v for v in ref.violations if v.check == "control_per_heal" and v.sender == "B")
    assert before.t == ref.info.t_min


def test_delivered_within_violation_fields(checked: tuple) -> None:
    """The message's conn_id, seqno, msg_id and kind, and the time of the late delivery."""
    ref = checked[2]["no_faults"]
    v = next(v for v in ref.violations if v.check == "delivered_within" and v.kind == "multicast")
    assert (v.sender, v.receiver, v.conn_id, v.seqno, v.t) == ("C", "B", None, 1, at(2_000))
    u = next(v for v in ref.violations if v.check == "delivered_within" and v.msg_id == "A.2")
    assert (u.conn_id, u.seqno, u.kind, u.t) == ("1", 2, "unicast", at(1_700))


def test_counts_per_interval(checked: tuple) -> None:
    ref = checked[2]
    assert ref["partition_for"].control[("A", "sync")] == [1, 4]
    assert ref["heal_record"].control[("C", "xmit")] == [0, 3, 0]
    assert ref["no_faults"].control[("C", "xmit")] == [100]
    assert ("B", "xmit") not in ref["no_faults"].control  # never written: counts 0, no error


def test_leave_ends_the_member(checked: tuple) -> None:
    for name in ("left", "leave_without_stop"):
        ref = checked[2][name]
        assert ref.info.alive == {"A": True, "B": True, "C": False}
        assert ref.info.left == {"C"}
        # A->C before and after the leave, C->A (A's multicast after its view without C is not addressed to C)
        assert ref.counters["not_required_left"] == 3
        assert ref.counters["not_required_to_crashed"] == ref.counters["not_required_from_crashed"] == 0
    back = checked[2]["left_and_back"].info
    assert back.alive["B"] and back.left == frozenset()


def test_leave_fault_is_instantaneous_and_labelled() -> None:
    (f,) = fault_intervals([{"t": 5, "event": "fault", "kind": "leave", "member": "C"}])
    assert (f.end, f.label) == (5, "leave C")


def test_bad_bounds_are_input_errors(tmp_path: Path) -> None:
    f = tmp_path / "scenario.toml"
    for bad in ('delivered_within = "soon"', "control_per_heal = { sync = -1 }", "control_per_heal = true"):
        f.write_text(f"[checks]\n{bad}\n")
        with pytest.raises(InputError, match="checks\\."):
            read_checks(f)
    f.write_text("[checks]\ndelivered_within = true\ncontrol_per_heal = { xmit = 5, sync = 1 }\n")
    conf = read_checks(f)
    assert (conf.delivery_bound, conf.control_bounds) == (10.0, (("sync", 1), ("xmit", 5)))
    f.write_text("[checks]\ndelivered_within = 0.25\ncontrol_per_heal = false\n")  # as `chaosbed run` writes it
    conf = read_checks(f)
    assert (conf.delivery_bound, conf.control_bounds) == (0.25, ())


# ---- Spark: the same violations and statistics -------------------------------------------------------------------

pytest_spark = pytest.mark.spark


@pytest_spark
@pytest.mark.parametrize("name", [*RUNS, "off"])
def test_spark_agrees_with_the_reference(checked: tuple, spark_checked: Analysis, name: str) -> None:
    _, expected, ref = checked
    got = spark_checked.results[name]
    assert _keys(got.violations) == _keys(ref[name].violations) == _expected_keys(expected[name])
    assert sorted(v.t for v in got.violations if v.check in NEW) == sorted(
        v.t for v in ref[name].violations if v.check in NEW
    )
    assert got.recovery_max == ref[name].recovery_max
    assert got.control == ref[name].control
    stats = spark_checked.stats[name]
    for reason in ("to_crashed", "from_crashed", "left", "excluded"):
        assert getattr(stats.not_required, reason).messages == ref[name].counters[f"not_required_{reason}"], reason
    assert stats.violations == {
        c: n for c in {v.check for v in ref[name].violations} if (n := sum(v.check == c for v in ref[name].violations))
    }


@pytest_spark
def test_spark_stats_of_the_bounds(spark_checked: Analysis) -> None:
    s = spark_checked.stats["partition_for"]
    assert s.checks["delivered_within"] == 1.0 and s.checks["control_per_heal"] == {"sync": 3}
    assert s.delivered_within == DeliveredWithin(bound_s=1.0, checked=5, late=3, max_ms=1500.0)
    assert s.control_per_heal is not None and s.control_per_heal.heals_s == [3.0]
    assert s.control_per_heal.counts["A"] == {"sync": [1, 4]}
    assert s.members["B"].count("sync") == 4
    off = spark_checked.stats["off"]
    assert off.delivered_within is None and off.control_per_heal is None
    assert not off.configures("delivered_within") and "sync" not in off.members["A"].counts
    assert spark_checked.stats["left"].members["C"].alive is False
    # verdict.json's JSON of the same: the bounds' sections only where configured
    assert s.to_json()["delivered_within"] == {"bound_s": 1.0, "checked": 5, "late": 3, "max_ms": 1500.0}
    assert "delivered_within" not in off.to_json() and "control_per_heal" not in off.to_json()


@pytest_spark
def test_verdict_order_puts_the_bounds_last(spark_checked: Analysis) -> None:
    checks = [v.check for v in sorted(spark_checked.results["never_delivered"].violations, key=lambda v: v.sort_key())]
    assert checks == ["exactly_once", "complete", "no_phantoms"]
    order = [v.check for v in sorted(spark_checked.results["killed"].violations, key=lambda v: v.sort_key())]
    assert order == ["delivered_within", "control_per_heal"]


@pytest_spark
def test_verdict_table_shows_the_bounds_only_when_configured(spark_checked: Analysis) -> None:
    def printed(analysis: Analysis) -> str:
        console = Console(record=True, width=200, highlight=False)
        print_verdict(console, analysis)
        return console.export_text()

    everything = printed(spark_checked)
    assert configured_bounds(spark_checked) == ["delivered_within", "control_per_heal"]
    assert "within" in everything and "control" in everything
    off_row = next(line for line in everything.splitlines() if "│ off " in line and "OK" in line)
    assert off_row.count("off") >= 3  # the run's name, and both bounds not configured
    names = ["off"]
    only_off = Analysis(
        spark_checked.root,
        [r for r in spark_checked.runs if r.name in names],
        {n: spark_checked.results[n] for n in names},
        {n: spark_checked.stats[n] for n in names},
        True,
    )
    plain = printed(only_off)
    assert "within" not in plain and "control" not in plain and "delivered_within" not in plain


@pytest_spark
def test_report_renders_the_bounds(spark_checked: Analysis) -> None:
    from analysis.report import render_matrix, render_run

    name = "heal_record"
    html = render_run(name, spark_checked.results[name], spark_checked.stats[name])
    assert "delivered_within" in html and "control_per_heal" in html
    assert "0.5 s" in html and "xmit ≤ 2 per heal" in html
    assert "Control events per recovery interval" in html and "from heal 7.000 s" in html
    assert "C wrote 3 xmit events between the heal at 4.000 s and the heal at 7.000 s" in html
    left = render_run("left", spark_checked.results["left"], spark_checked.stats["left"])
    assert "leave C" in left and "from or to a member that left the group" in left
    matrix = render_matrix(spark_checked)
    assert "<th>delivered_within</th>" in matrix and "<th>control_per_heal</th>" in matrix


@pytest_spark
def test_dataframe_entry_point_and_spark_reader_agree(checked: tuple, spark_checked: Analysis, spark: object) -> None:
    """stream_results_from_events (any DataFrame of events, one shuffle; control events keyed by their member) and
    the Spark JSON reader (cluster masters) give the same bounds as the cached groups."""
    from analysis.cache import CACHE_DIR
    from analysis.spark_job import stream_results_from_events

    root = checked[0]
    events = spark.read.option("recursiveFileLookup", "true").parquet(str(root / CACHE_DIR / "groups"))
    infos = {name: res.info for name, res in spark_checked.results.items()}
    from_events = collect(stream_results_from_events(events, infos).toArrow(), infos)
    on_spark = analyze(root, reader="spark")
    for name, want in spark_checked.results.items():
        for got in (from_events[name], on_spark.results[name]):
            assert _keys(got.violations) == _keys(want.violations), name
            assert (got.control, got.recovery_max) == (want.control, want.recovery_max), name


# ---- property: the per-group pass and the reference agree on delayed synthetic runs --------------------------------


def local_results(root: Path) -> dict:
    """What check_events computes on Spark, in this process: every group file (with the control events the runs
    count) through check_sender, folded by collect."""
    import pyarrow as pa

    runs = discover_runs(root)
    ing = ingest(runs, root)
    faults = {r.name: read_faults(r.faults_file) for r in runs}
    infos, _ = run_infos(runs, ing, faults, {r.name: read_checks(r.scenario_file) for r in runs})
    tables = [
        check_sender(read_group(str(ing.cache / g.path), infos[g.run].checks.control_kinds), infos[g.run], g.key)
        for g in ing.groups
    ]
    return collect(pa.concat_tables([OUT_SCHEMA.empty_table(), *tables]), infos)


def delay(history: Path, rng: random.Random, share: float, max_ms: float) -> None:
    """Moves a share of the delivery lines later by up to `max_ms` (the line keeps its place in the file)."""
    for f in sorted(history.glob("*.jsonl")):
        out = []
        for line in f.read_text().splitlines():
            if '"event":"deliver"' in line and line.endswith("}") and rng.random() < share:
                e = json.loads(line)
                e["t"] += int(rng.uniform(0, max_ms) * MS)
                line = json.dumps(e)
            out.append(line)
        f.write_text("\n".join(out) + "\n")


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # shrinking a run takes minutes; the example is shown
)
@given(
    scenario=st.sampled_from(["clean", "crash", "restart", "partition"]),
    seed=st.integers(0, 10_000),
    share=st.sampled_from([0.0, 0.05, 0.3]),
    drop=st.sampled_from([0.0, 0.05]),
    bound_ms=st.sampled_from([0.3, 1.0, 5.0]),
    xmit=st.integers(0, 2),
)
def test_pass_and_reference_agree_on_bounds(
    tmp_path_factory, scenario: str, seed: int, share: float, drop: float, bound_ms: float, xmit: int
) -> None:
    root = tmp_path_factory.mktemp("bounds-oracle")
    checks = {"delivered_within": f"{bound_ms}ms", "control_per_heal": {"xmit": xmit, "ack": 1, "deliver": 300}}
    inject = [] if scenario == "clean" else [scenario]
    write_run(root / "r", members=4, rounds=120, inject=inject, seed=seed, checks=checks)
    rng = random.Random(seed)
    delay(root / "r" / "history", rng, share, 2.0)
    damage(root / "r" / "history", rng, drop, 0.0, 0.0, 0)
    ref = check_path(root)["r"]
    got = local_results(root)["r"]
    assert violation_keys(got.violations) == violation_keys(ref.violations)
    assert sorted(v.detail for v in got.violations if v.check in NEW) == sorted(
        v.detail for v in ref.violations if v.check in NEW
    )
    assert got.control == ref.control and got.recovery_max == ref.recovery_max
    assert got.counters["within_late"] == ref.counters["within_late"]
    if share == 0 and bound_ms >= 5.0:  # synthetic latencies stay below a few ms: nothing late
        assert not [v for v in ref.violations if v.check == "delivered_within"]
    if share == drop == 0 and scenario == "clean":  # nothing but the bounds can fire
        assert {v.check for v in ref.violations} <= {"delivered_within", "control_per_heal"}
