"""The Parquet cache of a checked folder: its layout, its part files' settings and its summary.

`ingest.py` (in the driver) and `spark_ingest.py` (on a cluster's executors) fill the same layout with the same
reader (`history_reader.py`: DuckDB or pyarrow): one folder of Parquet parts per (run, sender) group under
`<checked folder>/.chaosbed-cache/groups/` (`part-<k>.parquet` from the run's k-th history file), and `summary.json`
with each run's RunSummary and the manifest of groups, valid while the history files keep their size and mtime.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from analysis.membership import ViewEvent
from analysis.schema import SCHEMA_VERSION, RunFolder

CACHE_DIR = ".chaosbed-cache"
# The part files: a cache on local disk, so no compression, and dictionaries only for the columns with few values
# (not msg_id, t, seqno, pos): measured per 1M rows, 0.28 s to write and 0.37 s to read, against 0.63 s and 0.48 s
# with Parquet's defaults (snappy, a dictionary for every column), for 2.3x the size on disk.
DICTIONARY_COLUMNS = ["run", "member", "event", "kind", "sender", "dest", "dest_address", "conn_id", "view_id", "key"]
PARQUET_OPTIONS = {
    "compression": "none",
    "use_dictionary": DICTIONARY_COLUMNS,
    "write_statistics": ["event"],  # read_group filters on it
    "row_group_size": 1 << 20,
}


@dataclass
class BadLine:
    """A line that is not a complete event. `last` = the file's last line; prev_t/next_t = neighbours' times."""

    run: str
    file: str
    line: int | None
    text: str
    member: str
    last: bool
    prev_t: int | None = None
    next_t: int | None = None


@dataclass
class Group:
    """One cache file: the events of one sender of one run (key None: deliveries without a sender field)."""

    run: str
    key: str | None
    path: str  # the folder of its Parquet part files, relative to the cache folder
    rows: int


@dataclass
class RunSummary:
    members: dict[str, dict[str, list[int]]] = field(default_factory=dict)  # member -> event -> [n, tmin, tmax, pos]
    views: list[ViewEvent] = field(default_factory=list)
    bad_lines: list[BadLine] = field(default_factory=list)
    empty_files: list[str] = field(default_factory=list)
    events: int = 0

    def member_events(self) -> dict[str, dict[str, int]]:
        return {m: {ev: v[0] for ev, v in evs.items()} for m, evs in self.members.items()}

    def last_event(self) -> dict[str, str]:
        return {m: max(evs.items(), key=lambda kv: kv[1][3])[0] for m, evs in self.members.items() if evs}

    def t_range(self) -> tuple[int, int]:
        ts = [(v[1], v[2]) for evs in self.members.values() for v in evs.values()]
        return (min(a for a, _ in ts), max(b for _, b in ts)) if ts else (0, 0)

    def add_counts(self, member: str, event: str, n: int, tmin: int, tmax: int, pos: int) -> None:
        slot = self.members.setdefault(member, {})
        old = slot.get(event)
        slot[event] = (
            [n, tmin, tmax, pos] if not old else [old[0] + n, min(old[1], tmin), max(old[2], tmax), max(old[3], pos)]
        )

    def merge(self, other: RunSummary) -> None:
        """Adds another file's summary, as add_table of its events (and extending the lists) would have."""
        for member, evs in other.members.items():
            for event, (n, tmin, tmax, pos) in evs.items():
                self.add_counts(member, event, n, tmin, tmax, pos)
        self.views.extend(other.views)
        self.bad_lines.extend(other.bad_lines)
        self.empty_files.extend(other.empty_files)
        self.events += other.events

    def add_table(self, tbl: pa.Table) -> None:
        """Adds one history file's events (with `pos`) to the counters and the view list."""
        self.events += tbl.num_rows
        if tbl.num_rows == 0:
            return
        agg = tbl.group_by(["member", "event"]).aggregate([("t", "count"), ("t", "min"), ("t", "max"), ("pos", "max")])
        for r in agg.to_pylist():
            self.add_counts(r["member"], r["event"], r["t_count"], r["t_min"], r["t_max"], r["pos_max"])
        views = tbl.filter(pc.equal(tbl["event"], "view"))
        for r in views.select(["member", "t", "pos", "view_id", "members", "merge"]).to_pylist():
            self.views.append((r["member"], r["t"], r["pos"], r["view_id"], r["members"] or [], bool(r["merge"])))


@dataclass
class Ingested:
    cache: Path
    summaries: dict[str, RunSummary]
    groups: list[Group]
    from_cache: bool


def group_key(tbl: pa.Table) -> pa.ChunkedArray:
    """The group of each event: a delivery's sender, else the member that wrote it."""
    return pc.if_else(pc.equal(tbl["event"], "deliver"), tbl["sender"], tbl["member"])


def group_dir_name(run: str, key: str | None) -> str:
    """The folder of a group's part files (a digest: run and member names may hold any character)."""
    digest = hashlib.sha1(json.dumps([run, key]).encode()).hexdigest()[:16]
    return f"g-{digest}"


def fingerprint(runs: list[RunFolder], reader: str) -> dict[str, object]:
    files = []
    for run in runs:
        for f in run.history_files:
            st = f.stat()
            files.append([run.name, f.name, st.st_size, st.st_mtime_ns])
    # SCHEMA_VERSION changes with the cached columns (2: dest_address), so an older cache is rebuilt, not reused
    return {"version": SCHEMA_VERSION, "reader": reader, "files": files}


def cache_root(root: Path) -> Path:
    target = root / CACHE_DIR
    try:
        target.mkdir(exist_ok=True)
        probe = target / ".probe"
        probe.write_text("")
        probe.unlink()
        return target
    except OSError:  # a read-only results folder: cache in the temp dir instead
        key = hashlib.sha1(str(root.resolve()).encode()).hexdigest()[:16]
        target = Path(tempfile.gettempdir()) / f"chaosbed-cache-{key}"
        target.mkdir(exist_ok=True)
        return target


def write_summary(
    path: Path, fingerprint: dict[str, object], summaries: dict[str, RunSummary], groups: list[Group]
) -> None:
    doc = {
        "fingerprint": fingerprint,
        "runs": {k: asdict(v) for k, v in summaries.items()},
        "groups": [asdict(g) for g in groups],
    }
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc))
    tmp.replace(path)


def summary_from_doc(doc: dict[str, Any]) -> RunSummary:
    """A RunSummary from its JSON form (dataclasses.asdict of one)."""
    s = dict(doc)
    bad = [BadLine(**b) for b in s.pop("bad_lines")]
    views: list[ViewEvent] = [(m, t, pos, vid, members, merge) for m, t, pos, vid, members, merge in s.pop("views")]
    return RunSummary(**s, views=views, bad_lines=bad)


def read_summary(path: Path, fingerprint: dict[str, object]) -> tuple[dict[str, RunSummary], list[Group]] | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if doc.get("fingerprint") != fingerprint:
        return None
    out = {name: summary_from_doc(s) for name, s in doc["runs"].items()}
    groups = [Group(**g) for g in doc["groups"]]
    if not all((path.parent / g.path).is_dir() for g in groups):
        return None
    return out, groups
