"""The history format of docs/scenario-format.md as Spark and Arrow schemas, and where the files of a run live.

Every event is one JSON object per line in `history/<member>.jsonl` (faults in `faults.jsonl`):

============  ==========  ============================================================================================
field         type        meaning
============  ==========  ============================================================================================
t             int64       ns, monotonic on the machine (comparable between members and faults of one run)
member        string      the member writing the event (for `deliver`: the receiver)
event         string      send | deliver | view | conn | xmit | ack | stop (others are counted, not checked)
kind          string      send/deliver: unicast | multicast (xmit/ack: the protocol, optional)
sender        string      send/deliver: the sending member
dest          string      send/deliver: unicast destination; null for multicast
dest_address  string      unicast send, optional: the receiver's incarnation it was addressed to ("C", "C/2" after one
                          restart, ...: node/addresses.py), which decides whether it is owed (docs/analysis.md); null
                          or absent for multicast and in histories written before the field existed
conn_id       string      unicast connection id (a JSON number or string; read as its text); null for multicast
seqno         int64       unicast: seqno in the connection; multicast: the sender's multicast seqno
msg_id        string      unique per run; deliveries are joined to sends on it
size          int64       payload bytes
view_id       string      view: the view's id (a JSON number or string)
members       list[str]   view: the members of the view
merge         bool        view: installed by a merge
peer          string      conn (and optionally xmit/ack): the other member
state         string      conn: open | close | ...
============  ==========  ============================================================================================

Unknown fields are ignored, so writers may add their own. `node/history.py` writes this format; this table is its
documentation. Rows also get `run` (the run folder relative to the checked folder) and `pos` (the line's index in
its file: the member's own order of events, which `t` may not break ties of).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from analysis.config import InputError
from node import history_format

SCHEMA_VERSION = 2  # the cache's layout: a new column makes old caches stale
_ARROW_OF = {
    "int": pa.int64(),
    "str": pa.string(),
    "id": pa.string(),
    "bool": pa.bool_(),
    "list[str]": pa.list_(pa.string()),
}
# The columns: the fields the checker reads, typed by the one table of the format (node/history_format.py).
HISTORY_FIELDS: list[tuple[str, pa.DataType]] = [
    (name, _ARROW_OF[history_format.MEMBER_FIELDS[name].type]) for name in history_format.CHECKER_COLUMNS
]
REQUIRED = ("t", "member", "event")
EVENTS_ARROW = pa.schema([("run", pa.string()), *HISTORY_FIELDS, ("pos", pa.int64())])


def history_arrow_schema() -> pa.Schema:
    """The fields of one history line (without `run` and `pos`)."""
    return pa.schema(HISTORY_FIELDS)


@dataclass(frozen=True)
class RunFolder:
    """One run: `history/<member>.jsonl`, optional `faults.jsonl` and `scenario.toml`."""

    name: str
    path: Path

    @property
    def history_files(self) -> list[Path]:
        return sorted((self.path / "history").glob("*.jsonl"))

    @property
    def faults_file(self) -> Path:
        return self.path / "faults.jsonl"

    @property
    def scenario_file(self) -> Path:
        return self.path / "scenario.toml"

    @property
    def outcome_file(self) -> Path:
        return self.path / OUTCOME_FILE


MAX_DEPTH = 6
OUTCOME_FILE = "outcome.json"  # the runner's own result: {"violations": [...], ...} (a `timeout` it observed)
RUNNER_FIELDS = ("check", "sender", "receiver", "conn_id", "seqno", "msg_id", "detail")


def runner_violations(run: RunFolder) -> list[dict[str, Any]]:
    """The violations the orchestrator observed itself (a run that never became quiet: `timeout`), from the run
    folder's outcome.json; none if the file is absent (a run not made by chaosbed, or made before wave 2)."""
    path = run.outcome_file
    if not path.is_file():
        return []
    try:
        doc = json.loads(path.read_text())
        found = doc.get("violations", [])
        if not isinstance(found, list) or not all(
            isinstance(v, dict) and isinstance(v.get("check"), str) for v in found
        ):
            raise ValueError("violations must be a list of objects with a check")
    except (ValueError, UnicodeDecodeError, AttributeError) as exc:
        raise InputError(f"{path}: not a runner outcome: {exc}") from None
    return [{k: v.get(k) for k in RUNNER_FIELDS} for v in found]


def run_system(run: RunFolder) -> dict[str, Any] | None:
    """What the run's members ran, as its outcome.json records it (`system`: name, stack, release), or None."""
    try:
        found = json.loads(run.outcome_file.read_text()).get("system")
    except (OSError, ValueError, UnicodeDecodeError, AttributeError):
        return None
    return found if isinstance(found, dict) else None


def discover_runs(root: str | Path) -> list[RunFolder]:
    """The run folders in `root`: itself if it has a `history/` folder, else every folder below (depth-bounded)
    that has one. Names are paths relative to `root` (a single run is named after its folder)."""
    root = Path(root)
    if (root / "history").is_dir():
        return [RunFolder(root.resolve().name, root)]
    runs: list[RunFolder] = []
    level = [root]
    for _ in range(MAX_DEPTH):
        nxt: list[Path] = []
        for folder in level:
            for child in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
                if (child / "history").is_dir():
                    runs.append(RunFolder(child.relative_to(root).as_posix(), child))
                else:
                    nxt.append(child)
        level = nxt
    return sorted(runs, key=lambda r: r.name)
