"""Unicasts owed by address: a send's `dest_address` (the receiver's incarnation it went to) decides whether it is
owed to a restarted receiver; without one, the time of the restart record does (docs/analysis.md, `complete`).

The hand-made runs reproduce what a real cluster writes around a restart: C is killed at 1 s and restarted at 3 s,
and A keeps addressing the dead incarnation "C" for a while after the restart record. Every case is checked by the
plain-Python reference checker and by Spark (one analysis of one matrix folder, shared by the module), with both
ingest readers (pyarrow locally, Spark's JSON source for cluster masters).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from analysis.ingest import ingest
from analysis.membership import addressed_incarnation
from analysis.reference import check_path
from analysis.schema import discover_runs
from analysis.synth import write_run
from node.addresses import parse_address
from tests.analysis.helpers import violation_keys, write_lines
from tests.analysis.test_oracle import local_results

S = 1_000_000_000  # ns
KILL, RESTART = 1 * S, 3 * S


def _send(t: int, seqno: int, conn: int, address: str | None = None, dest: str = "C") -> str:
    e = {"t": t, "member": "A", "event": "send", "kind": "unicast", "sender": "A", "dest": dest}
    if address is not None:
        e["dest_address"] = address
    e |= {"conn_id": conn, "seqno": seqno, "msg_id": f"A>{dest}#{seqno}", "size": 100}
    return json.dumps(e, separators=(",", ":"))


def _deliver(t: int, seqno: int, conn: int, dest: str = "C") -> str:
    e = {"t": t, "member": dest, "event": "deliver", "kind": "unicast", "sender": "A", "dest": dest}
    e |= {"conn_id": conn, "seqno": seqno, "msg_id": f"A>{dest}#{seqno}", "size": 100}
    return json.dumps(e, separators=(",", ":"))


def _stop(member: str, t: int = 10 * S) -> str:
    return json.dumps({"t": t, "member": member, "event": "stop"})


def write_restart_run(run: Path, sends: list[str], c_delivers: list[str]) -> None:
    """A, B, C; C is killed at 1 s and restarted at 3 s (alive at the end, final incarnation "C/2"); A sends
    `sends`, C delivers `c_delivers` (its lines before the kill and after the restart, in time order)."""
    write_lines(run / "history" / "A.jsonl", [*sends, _stop("A")])
    write_lines(run / "history" / "B.jsonl", [_stop("B")])
    write_lines(run / "history" / "C.jsonl", [*c_delivers, _stop("C")])
    faults = [
        {"t": KILL, "event": "fault", "kind": "kill", "member": "C", "seed": 1},
        {"t": RESTART, "event": "fault", "kind": "restart", "member": "C", "seed": 1},
    ]
    write_lines(run / "faults.jsonl", [json.dumps(f) for f in faults])


def _after(ms: int) -> int:
    return RESTART + ms * 1_000_000


# run name -> (A's sends, C's deliveries, the expected violations, not_required to_crashed)
CASES: dict[str, tuple[list[str], list[str], list[tuple], int]] = {
    # (1) sent after C's restart record, addressed to the dead "C", never delivered: not owed (to_crashed)
    "to-old-incarnation": (
        [_send(_after(50), 601, 1, "C")],
        [],
        [],
        1,
    ),
    # the measured case: A streams to "C" across the restart, then learns "C/2" and opens a new connection
    "stream-across-restart": (
        [
            _send(KILL - 20_000_000, 599, 1, "C"),
            _send(KILL - 10_000_000, 600, 1, "C"),
            *(_send(KILL + k * 5_000_000, 600 + k, 1, "C") for k in range(1, 400)),  # lost: C is down
            *(_send(_after(k * 5), 999 + k, 1, "C") for k in range(1, 44)),  # after the restart, still to "C"
            _send(_after(250), 1, 2, "C/2"),
            _send(_after(255), 2, 2, "C/2"),
        ],
        [
            _deliver(KILL - 19_000_000, 599, 1),
            _deliver(KILL - 9_000_000, 600, 1),
            _deliver(_after(251), 1, 2),
            _deliver(_after(256), 2, 2),
        ],
        [],
        2 + 399 + 43,  # all to the first incarnation: delivered before the kill, lost while down, and after
    ),
    # (2) addressed to C's final incarnation "C/2" and never delivered: owed, a `complete` violation
    "to-final-incarnation": (
        [_send(_after(250), 1, 2, "C/2"), _send(_after(260), 7, 5, "B", dest="B")],
        [],
        [("complete", "A", "C", "2", 1, "A>C#1"), ("complete", "A", "B", "5", 7, "A>B#7")],
        0,
    ),
    # (3) without dest_address the time rule holds: owed iff sent once C's final incarnation had started
    "no-address": (
        [_send(2 * S, 601, 1), _send(_after(50), 602, 1)],
        [],
        [("complete", "A", "C", "1", 602, "A>C#602")],
        1,
    ),
    # a dest_address that is not an address of `dest` is ignored: the time rule decides
    "unusable-address": (
        [_send(_after(50), 601, 1, "B"), _send(_after(60), 602, 1, "C/x"), _send(2 * S, 603, 1, "C/2/1")],
        [],
        [("complete", "A", "C", "1", 601, "A>C#601"), ("complete", "A", "C", "1", 602, "A>C#602")],
        1,
    ),
}


def write_cases(root: Path) -> None:
    for name, (sends, delivers, _, _) in CASES.items():
        write_restart_run(root / name, sends, delivers)
    # a synthetic restart run whose senders keep addressing the old incarnation after the restart record, and the
    # same history with every dest_address removed (then the time rule owes all those messages to C/2)
    truth = write_run(root / "synth-addressed", members=4, rounds=40, inject=["restart"], seed=3, addresses=True)
    assert truth.stale_sends > 0
    shutil.copytree(root / "synth-addressed", root / "synth-stripped")
    for f in (root / "synth-stripped" / "history").glob("*.jsonl"):
        f.write_text(re.sub(r',"dest_address":(null|"[^"]*")', "", f.read_text()))


def _synth_expected(root: Path) -> dict[str, list[tuple]]:
    """The stripped run: one `complete` per message sent to the old incarnation after the restart record."""
    restart = next(json.loads(x)["t"] for x in (root / "synth-stripped" / "faults.jsonl").read_text().splitlines()
                   if json.loads(x)["kind"] == "restart")  # fmt: skip
    stale = []
    for f in (root / "synth-addressed" / "history").glob("*.jsonl"):
        for line in f.read_text().splitlines():
            e = json.loads(line)
            if e["event"] == "send" and e.get("dest_address") == "D" and e["t"] >= restart:
                stale.append(("complete", e["sender"], "D", str(e["conn_id"]), e["seqno"], e["msg_id"]))
    assert stale
    return {"synth-addressed": [], "synth-stripped": sorted(stale, key=repr)}


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("addresses")
    write_cases(root)
    return root


def _check(checker: str, root: Path, analyses: dict) -> tuple[dict[str, list], dict[str, int]]:
    """Violation keys and not_required(to_crashed) per run, from one checker (Spark ones: from `analyses`)."""
    if checker == "reference":
        res = check_path(root)
        return (
            {n: violation_keys(r.violations) for n, r in res.items()},
            {n: r.counters["not_required_to_crashed"] for n, r in res.items()},
        )
    if checker == "sender-pass":  # what the Spark tasks run, in this process
        res = local_results(root)
        return {n: violation_keys(r.violations) for n, r in res.items()}, {}
    analysis = analyses[checker]
    return (
        {n: violation_keys(r.violations) for n, r in analysis.results.items()},
        {n: s.not_required.to_crashed.messages for n, s in analysis.stats.items()},
    )


CHECKERS = [
    "reference",
    "sender-pass",
    pytest.param("spark", marks=pytest.mark.spark),
    pytest.param("spark-json", marks=pytest.mark.spark),
]


@pytest.fixture(scope="module")
def analyses() -> dict:
    """The Spark analyses of the cases folder, made once per reader by the first test that needs one."""
    return {}


def _results(checker: str, cases: Path, analyses: dict, request: pytest.FixtureRequest) -> tuple[dict, dict]:
    """Spark runs only in tests marked `spark` (the shared session fixture starts it); its JSON-source reader
    writes a cache of its own, so the two analyses do not reuse each other's."""
    if checker.startswith("spark") and checker not in analyses:
        request.getfixturevalue("spark")
        from analysis.pipeline import analyze

        analyses[checker] = analyze(cases, reader="spark" if checker == "spark-json" else "arrow")
    return _check(checker, cases, analyses)


@pytest.mark.parametrize("checker", CHECKERS)
@pytest.mark.parametrize("case", list(CASES))
def test_owed_by_address_else_by_time(
    checker: str, case: str, cases: Path, analyses: dict, request: pytest.FixtureRequest
) -> None:
    violations, to_crashed = _results(checker, cases, analyses, request)
    _, _, expected, not_owed = CASES[case]
    assert violations[case] == sorted(expected, key=repr)
    if to_crashed:
        assert to_crashed[case] == not_owed


@pytest.mark.parametrize("checker", CHECKERS)
def test_synthetic_restart_with_stale_addresses(
    checker: str, cases: Path, analyses: dict, request: pytest.FixtureRequest
) -> None:
    """Messages to the old incarnation after the restart record: clean with addresses, `complete` without."""
    violations, _ = _results(checker, cases, analyses, request)
    for name, expected in _synth_expected(cases).items():
        assert violations[name] == expected, name


def test_address_parsing() -> None:
    assert parse_address("C") == ("C", 1)
    assert parse_address("C/2") == ("C", 2)
    for bad in (None, "", "/2", "C/x", "C/0", "C/-1", "C/2/1", 3):
        assert parse_address(bad) is None, bad
    assert addressed_incarnation("C", "C/3") == 3
    assert addressed_incarnation("C", "B/3") is None
    assert addressed_incarnation("C", None) is None


def test_ingest_reads_dest_address_and_rebuilds_an_older_cache(tmp_path: Path) -> None:
    """The cache holds dest_address; a cache written before the column existed (schema version 1) is not reused."""
    sends = [_send(_after(50), 601, 1, "C"), _send(_after(60), 602, 1), _send(_after(70), 1, 2, "C/2")]
    write_restart_run(tmp_path / "r", sends, [])
    runs = discover_runs(tmp_path)
    first = ingest(runs, tmp_path)
    (group,) = [g for g in first.groups if g.key == "A"]
    assert pq.read_table(first.cache / group.path)["dest_address"].to_pylist()[:3] == ["C", None, "C/2"]
    # make it look like a cache from before dest_address: the old version and no such column
    summary = first.cache / "summary.json"
    doc = json.loads(summary.read_text())
    doc["fingerprint"]["version"] = 1
    summary.write_text(json.dumps(doc))
    for part in (first.cache / group.path).glob("*.parquet"):
        pq.write_table(pq.read_table(part).drop_columns(["dest_address"]), part)
    again = ingest(runs, tmp_path)
    assert again.from_cache is False
    (group,) = [g for g in again.groups if g.key == "A"]
    assert pq.read_table(again.cache / group.path)["dest_address"].to_pylist()[:3] == ["C", None, "C/2"]
    assert ingest(runs, tmp_path).from_cache is True
