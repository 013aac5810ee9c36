"""The raw tables explore works on, and the typed accessors that read them.

A schedule is a scenario, and explore handles scenarios as the TOML tables a scenario file is (`TomlTable`, as
tomllib reads it): the base scenario, each schedule's `[[faults]]` tables, each shrink candidate, minimal.toml. They
stay raw (not parsed into orchestration/scenario.py's dataclasses) because that is what is written back, key for
key, in the order given. The JSON documents explore reads back (a worker's results, a run's verdict.json) are
`JsonObject`s, the same shape.

Every read of a field that needs a type goes through an accessor here, written once: it raises KeyError for a
missing key (as indexing did) and TypeError naming the key for a value of the wrong type. The tables read here were
validated upstream (load_base parses the base scenario; the generator and the shrinker write only valid faults), so
neither is expected; the accessors make the type that validation established visible to the type checker.
"""

from __future__ import annotations

from collections.abc import Mapping

from chaos.faults import JsonObject
from orchestration.scenario import TomlTable

__all__ = ["JsonObject", "TomlTable"]

Members = str | list[str]  # a member field of a fault or workload: a name, "*", or a list of names


def _wrong(where: str, what: str, value: object) -> TypeError:
    return TypeError(f"{where}: {what} expected, not {value!r}")


def as_table(value: object, where: str) -> TomlTable:
    if not isinstance(value, dict):
        raise _wrong(where, "a table", value)
    return value


def as_tables(value: object, where: str) -> list[TomlTable]:
    """An array of tables (a new list holding the same tables: changing one changes it where it came from)."""
    if not isinstance(value, list):
        raise _wrong(where, "an array of tables", value)
    return [as_table(v, f"{where}[{i}]") for i, v in enumerate(value)]


def as_str(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise _wrong(where, "a string", value)
    return value


def as_strs(value: object, where: str) -> list[str]:
    if not isinstance(value, list):
        raise _wrong(where, "a list of strings", value)
    return [as_str(v, f"{where}[{i}]") for i, v in enumerate(value)]


def as_int(value: object, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise _wrong(where, "an integer", value)
    return value


def as_number(value: object, where: str) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise _wrong(where, "a number", value)
    return value


def as_members(value: object, where: str) -> Members:
    if isinstance(value, str):
        return value
    return as_strs(value, where)


def text(t: Mapping[str, object], key: str) -> str:
    """t[key], a string (KeyError when absent)."""
    return as_str(t[key], key)


def table(t: Mapping[str, object], key: str) -> TomlTable:
    """t[key], a table (KeyError when absent): the table itself, so changing it changes t."""
    return as_table(t[key], key)


def opt_table(t: Mapping[str, object], key: str) -> TomlTable:
    """t[key], a table; an empty one when absent (as `t.get(key, {})`)."""
    return as_table(t[key], key) if key in t else {}


def tables(t: Mapping[str, object], key: str) -> list[TomlTable]:
    """t[key], an array of tables; an empty one when absent (as `t.get(key, [])`)."""
    return as_tables(t[key], key) if key in t else []


def integer(t: Mapping[str, object], key: str, default: int) -> int:
    """t[key], an integer; `default` when absent."""
    return as_int(t[key], key) if key in t else default


def members(t: Mapping[str, object], key: str) -> Members:
    """t[key], a member field (KeyError when absent)."""
    return as_members(t[key], key)


def faults_of(raw: Mapping[str, object]) -> list[TomlTable]:
    """A scenario's `[[faults]]` tables ([] without any)."""
    return tables(raw, "faults")


def workloads_of(raw: Mapping[str, object]) -> list[TomlTable]:
    """A scenario's `[[workload]]` tables ([] without any)."""
    return tables(raw, "workload")


def kind(f: Mapping[str, object]) -> str:
    """A fault's (or workload's) `kind`."""
    return text(f, "kind")


def groups(f: Mapping[str, object]) -> list[Members]:
    """A split's `groups`: each a member field (a name is a group of one)."""
    value = f["groups"]
    if not isinstance(value, list):
        raise _wrong("groups", "a list of groups", value)
    return [as_members(g, f"groups[{i}]") for i, g in enumerate(value)]


def cluster_members(raw: Mapping[str, object]) -> int | list[str]:
    """`cluster.members`: a number of members (named A, B, ...) or their names."""
    value = table(raw, "cluster")["members"]
    return value if isinstance(value, int) else as_strs(value, "cluster.members")
