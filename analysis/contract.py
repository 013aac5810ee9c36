"""The histories of a foreign system against the history contract (node/history_contract.py, docs/contracts/).

A run folder whose scenario.toml names a foreign system (`[cluster] system`, not "chaosbed") is read line by line
once more: each line that breaks the contract becomes a `history` violation naming the member, the line and the field
(its detail: `member B, line 17, field msg_id: deliver has no field 'msg_id'`), and the rest of the run is checked
as usual; an unknown event kind is a note (counted, not checked). A line that is no JSON object at all is a violation
too, unless it is a cut-off line the checker skips (a file's last line, or the end of a killed incarnation).
Exit 2 stays for a run that cannot be checked at all (no history file, no readable event).
"""

from __future__ import annotations

import json
import tomllib
from collections import defaultdict
from pathlib import Path

from analysis.schema import RunFolder
from analysis.stats import SkippedLine
from analysis.verdict import Violation
from node.history_contract import ERROR, VERSION, Problem, file_problems

CHECK = "history"
MAX_PER_FILE = 1000  # violations listed per history file; the rest are summed up in one more


def foreign_system(run: RunFolder) -> str | None:
    """The foreign system a run's scenario.toml names (None: chaosbed's own, or no scenario file)."""
    try:
        doc = tomllib.loads(run.scenario_file.read_text())
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return None
    cluster = doc.get("cluster")
    system = cluster.get("system") if isinstance(cluster, dict) else None
    return system if isinstance(system, str) and system != "chaosbed" else None


def contract_findings(run: RunFolder, skipped: list[SkippedLine]) -> tuple[list[Violation], list[str]]:
    """The run's `history` violations and its notes (unknown event kinds). `skipped`: the lines the checker skipped
    as cut off (pipeline.classify_bad_lines), which are not violations."""
    cut = {(s.file, s.line) for s in skipped}
    violations: list[Violation] = []
    notes: list[str] = []
    for path in run.history_files:
        rel = path.relative_to(run.path).as_posix()
        problems = _file(path, rel, cut)
        errors = [p for p in problems if p.severity == ERROR]
        violations += [_violation(run, path.stem, rel, p) for p in errors[:MAX_PER_FILE]]
        if len(errors) > MAX_PER_FILE:
            rest = len(errors) - MAX_PER_FILE
            violations.append(
                _violation(run, path.stem, rel, Problem(errors[MAX_PER_FILE].line, None, f"and {rest} more lines"))
            )
        notes += _notes(path.stem, [p for p in problems if p.severity != ERROR])
    return violations, notes


def _file(path: Path, rel: str, cut: set[tuple[str, int | None]]) -> list[Problem]:
    lines = path.read_bytes().split(b"\n")
    while lines and not lines[-1].strip():
        lines.pop()
    records, problems = [], []
    for i, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            rec, why = None, f"not JSON ({e.__class__.__name__}: {str(e)[:80]})"
        else:
            why = f"a JSON {type(rec).__name__}, not an object"
        if isinstance(rec, dict):
            records.append((i, rec))
        elif (rel, i) not in cut and i != len(lines):
            problems.append(Problem(i, None, f"{why}: {raw[:60].decode('utf-8', 'replace')!r}"))
    return sorted(problems + file_problems(records, path.stem), key=lambda p: p.line)


def _violation(run: RunFolder, member: str, rel: str, p: Problem) -> Violation:
    field = f", field {p.field}" if p.field else ""
    return Violation(
        CHECK, None, None, None, None, None,
        f"member {member}, line {p.line}{field}: {p.reason} ({rel}; history contract v{VERSION})",
        run=run.name,
    )  # fmt: skip


def _notes(member: str, problems: list[Problem]) -> list[str]:
    by_reason: dict[str, list[int]] = defaultdict(list)
    for p in problems:
        by_reason[p.reason].append(p.line)
    out = []
    for reason, lines in by_reason.items():
        shown = ", ".join(map(str, lines[:5])) + (f" (+{len(lines) - 5} more)" if len(lines) > 5 else "")
        out.append(f"member {member}, line{'s' if len(lines) > 1 else ''} {shown}: {reason}")
    return out
