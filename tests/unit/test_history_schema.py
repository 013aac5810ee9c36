"""Both writers of the history format and its reader agree with the one table (node/history_format.py) and its prose
(docs/history.md): every event the members write (node/history.py, on the simulator for every stack and on real
processes) and every line the orchestrator writes to faults.jsonl has a documented kind, documented fields and the
documented types; analysis/schema.py reads exactly the documented checker columns with matching types."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from analysis.ingest import read_history_file
from analysis.schema import HISTORY_FIELDS
from node import history_format as fmt
from node.stack import STACKS
from orchestration.runner import run
from orchestration.scenario import parse

DOC = Path(__file__).resolve().parents[2] / "docs" / "history.md"


def scenario(stack: str, backend: str) -> dict[str, Any]:
    """Unicast (and multicast where the stack has it) workload with network faults (sim only), a partition healed by
    its `for` and by a heal, a kill and a restart, a closed connection and a property change."""
    workload: list[dict[str, Any]] = [{"kind": "unicast", "from": "*", "to": "*", "count": 40, "rate": 100}]
    if (stack != "unicast3" and "nakack2" in stack) or "mcast" in stack:
        workload.append({"kind": "multicast", "from": "*", "count": 40, "rate": 100})
    unicast = stack.split("+")[0]
    faults: list[dict[str, Any]] = [
        {"at": "0.25s", "kind": "kill", "member": "C"},
        {"at": "0.6s", "kind": "restart", "member": "C"},
        {"at": "0.3s", "kind": "close-connection", "member": "A", "peer": "B"},
        {"at": "0.35s", "kind": "set", "member": "B", "property": f"{unicast}.xmit_interval", "value": "100ms"},
    ]
    if backend == "sim":
        faults += [
            {"at": "0.1s", "kind": "partition", "from": ["A"], "to": ["B"], "for": "0.3s"},
            {"at": "0.15s", "kind": "split", "groups": [["A"], ["B", "C"]]},
            {"at": "0.2s", "kind": "heal"},
            {"at": "0.2s", "kind": "loss", "from": "*", "to": "*", "probability": 0.1, "for": "0.2s"},
            {
                "at": "0.2s",
                "kind": "delay",
                "from": ["B"],
                "to": ["A"],
                "delay": "20ms",
                "jitter": "5ms",
                "for": "0.2s",
            },
            {"at": "0.3s", "kind": "discard", "match": f"{unicast.upper()}.ACK()", "from": "B", "to": "A", "count": 2},
        ]
    return {
        "name": f"schema-{stack}",
        "seed": 7,
        "timeout": "60s",
        "cluster": {"members": 3, "stack": stack},
        "workload": workload,
        "faults": faults,
    }


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def problems_of_run(out: Path) -> tuple[list[str], set[str], set[str]]:
    """Every problem of every line of a run folder, and the member event kinds and fault kinds seen."""
    problems: list[str] = []
    kinds: set[str] = set()
    fault_kinds: set[str] = set()
    for path in sorted((out / "history").glob("*.jsonl")):
        records = lines(path)
        for i, record in enumerate(records):
            problems += [f"{path.name}:{i + 1}: {p}" for p in fmt.member_problems(record)]
            kinds.add(record["event"])
        table, bad = read_history_file(path, out.name, path.name)  # the checker's reader, with its schema
        problems += [f"{path.name}: the checker could not read {b}" for b in bad]
        if table.num_rows != len(records):
            problems.append(f"{path.name}: the checker read {table.num_rows} of {len(records)} events")
    for i, record in enumerate(lines(out / "faults.jsonl")):
        problems += [f"faults.jsonl:{i + 1}: {p}" for p in fmt.fault_problems(record)]
        fault_kinds.add(record.get("kind", record["event"]))
    return problems, kinds, fault_kinds


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_every_event_of_a_simulated_run_is_documented(stack: str, tmp_path: Path) -> None:
    result = run(parse(scenario(stack, "sim")), "sim", tmp_path / stack)
    problems, kinds, fault_kinds = problems_of_run(result.out)
    assert problems == []
    assert {"start", "send", "deliver", "stop"} <= kinds
    assert {"partition", "split", "heal", "loss", "delay", "discard", "kill", "restart", "set"} <= fault_kinds


@pytest.mark.timeout(120)
def test_every_event_of_a_process_run_is_documented(tmp_path: Path) -> None:
    """Real members (node/runtime.py, file-mode writer) and the process backend's faults.jsonl; a killed member's
    history may end in a cut-off line, which readers skip (docs/history.md), so only its whole lines are read."""
    result = run(parse(scenario("unicast3+gms", "process")), "process", tmp_path / "process")
    for path in (result.out / "history").glob("*.jsonl"):
        text = path.read_text()
        path.write_text("".join(line + "\n" for line in text.splitlines() if _whole(line)))
    problems, kinds, fault_kinds = problems_of_run(result.out)
    assert problems == []
    assert {"start", "send", "deliver", "view", "stop"} <= kinds
    assert {"kill", "restart", "close-connection", "set"} <= fault_kinds


def _whole(line: str) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


def test_the_validator_catches_what_a_writer_must_not_do() -> None:
    good = {"t": 1, "member": "A", "incarnation": 1, "event": "suspect", "peer": "B"}
    assert fmt.member_problems(good) == []
    assert fmt.member_problems({**good, "event": "gossip"}) == ["undocumented event kind 'gossip'"]
    assert fmt.member_problems({**good, "colour": "red"}) == ["suspect: undocumented field 'colour'"]
    assert fmt.member_problems({k: v for k, v in good.items() if k != "peer"}) == ["suspect: no field 'peer'"]
    assert fmt.member_problems({**good, "member": None}) == ["suspect: member is null"]
    assert fmt.member_problems({**good, "t": 1.5}) == ["suspect: t = 1.5 is not int"]
    fault = {"t": 5, "event": "fault", "seed": 1, "kind": "kill", "member": "A", "at": "1s"}
    assert fmt.fault_problems(fault) == []
    assert fmt.fault_problems({**fault, "kind": "meteor"}) == ["undocumented fault kind 'meteor'"]
    assert fmt.fault_problems({**fault, "victim": "A"}) == ["fault: undocumented field 'victim'"]


def test_the_checker_reads_the_documented_columns() -> None:
    """analysis/schema.py's columns are the table's CHECKER_COLUMNS, each a documented field (their types are
    proved on real events: read_history_file reads every line of the runs above)."""
    assert [name for name, _ in HISTORY_FIELDS] == list(fmt.CHECKER_COLUMNS)
    assert set(fmt.CHECKER_COLUMNS) <= set(fmt.MEMBER_FIELDS)


def test_docs_history_md_names_every_kind_and_field() -> None:
    text = DOC.read_text()
    named = set(re.findall(r"`([a-z_-]+)`", text))
    tables = {
        "member event kinds": set(fmt.MEMBER_EVENTS),
        "member fields": set(fmt.MEMBER_FIELDS),
        "faults.jsonl events": set(fmt.FAULT_EVENTS),
        "faults.jsonl fields": set(fmt.FAULT_FIELDS),
        "fault kinds": set(fmt.FAULT_KINDS),
    }
    for what, names in tables.items():
        assert names <= named, f"docs/history.md does not name these {what}: {sorted(names - named)}"
