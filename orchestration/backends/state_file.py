"""Reading a real cluster's state file (STATE_ROOT/<label>/state.json) back, for `chaosbed status`, `send`, `fault`,
`kill`, `down` and every other command that acts on a running cluster from another process.

The file is written by Cluster._write_state (orchestration/cluster.py). One written by another version of chaosbed,
cut short or edited by hand is not trusted field by field: `read_state` checks every field this version needs and
raises StateFileError, a ClusterError that names the file, what is wrong and what to do, and keeps what could be read
(`raw`), so that `down` can still remove what the cluster left (orchestration/backends/reap.py).
"""

from __future__ import annotations

import json
from dataclasses import MISSING, dataclass, fields
from pathlib import Path

from orchestration.cluster import STATE_FORMAT, STATE_ROOT, ClusterError, ClusterSpec, MemberInfo


class StateFileError(ClusterError):
    """A state file this chaosbed cannot use: `raw` is its JSON object where it parsed (else None)."""

    def __init__(self, label: str, path: Path, problem: str, raw: dict[str, object] | None) -> None:
        super().__init__(
            f"cluster {label}: its state file {path} {problem}; remove what it left with "
            f"`chaosbed down --cluster {label}` (or `chaosbed down --all`)"
        )
        self.label = label
        self.path = path
        self.problem = problem
        self.raw = raw


@dataclass(frozen=True)
class ClusterState:
    """What a state file holds, checked."""

    label: str
    backend: str
    spec: ClusterSpec
    token: str
    workdir: Path
    members: dict[str, MemberInfo]
    network: dict[str, object]


def state_path(label: str) -> Path:
    return STATE_ROOT / label / "state.json"


def read_raw(label: str) -> dict[str, object] | None:
    """The state file's JSON object, or None when it is missing, unreadable or not a JSON object."""
    try:
        raw = json.loads(state_path(label).read_text())
    except (OSError, ValueError):
        return None
    return raw if isinstance(raw, dict) else None


def read_state(label: str) -> ClusterState:
    """The state of cluster `label`: ClusterError if there is no such cluster, StateFileError if its file cannot be
    used."""
    path = state_path(label)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ClusterError(f"no cluster {label} (no {path})") from None
    except OSError as e:
        raise StateFileError(label, path, f"cannot be read ({e.strerror})", None) from None
    try:
        raw = json.loads(text)
    except ValueError:
        raise StateFileError(label, path, "is not JSON (cut short?)", None) from None
    if not isinstance(raw, dict):
        raise StateFileError(label, path, "is not a JSON object", None)
    version = raw.get("format", 1)
    if not isinstance(version, int) or version > STATE_FORMAT:
        raise StateFileError(label, path, f"has format {version!r}, newer than this chaosbed's {STATE_FORMAT}", raw)
    try:
        return _checked(label, raw)
    except (KeyError, TypeError, ValueError) as e:
        what = f"has no {e.args[0]!r}" if isinstance(e, KeyError) else f"has {e}"
        raise StateFileError(label, path, f"{what} (written by another chaosbed version?)", raw) from None


def _checked(label: str, raw: dict[str, object]) -> ClusterState:
    """The state's fields, each of the type this version writes (KeyError naming a missing one, TypeError or
    ValueError naming a bad one)."""
    spec = _table(raw["spec"], "spec")
    _only(spec, ClusterSpec, "spec")
    members = _table(raw["members"], "members")
    member_infos = {}
    for name, m in members.items():
        table = _table(m, f"members.{name}")
        _only(table, MemberInfo, f"members.{name}")
        member_infos[name] = MemberInfo(**table)  # type: ignore[arg-type]
        if not isinstance(member_infos[name].port, int) or not isinstance(member_infos[name].ip, str):
            raise TypeError(f"a bad address for member {name}")
    names = spec.get("members")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise TypeError("spec.members that is not a list of names")
    return ClusterState(
        label=label,
        backend=_string(raw, "backend"),
        spec=ClusterSpec(**spec),  # type: ignore[arg-type]
        token=_string(raw, "token"),
        workdir=Path(_string(raw, "workdir")),
        members=member_infos,
        network=_table(raw.get("network", {}), "network"),
    )


def _table(value: object, key: str) -> dict[str, object]:
    if not isinstance(value, dict):
        raise TypeError(f"{key} that is not a table")
    return value


def _string(raw: dict[str, object], key: str) -> str:
    value = raw[key]
    if not isinstance(value, str):
        raise TypeError(f"{key} that is not a string")
    return value


def _only(table: dict[str, object], cls: type, key: str) -> None:
    """The table's keys are fields of the dataclass, and its required fields are there."""
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(table) - known)
    if unknown:
        raise ValueError(f"{key}.{unknown[0]}, a field this chaosbed does not know")
    required = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]
    for name in required:
        if name not in table:
            raise KeyError(f"{key}.{name}")
