"""The docs hold to the code: docs/scenario-format.md's fault-kind tables list exactly the kinds and keys of
node/fault_kinds.py, and every link and every repository path that README.md and docs/ mention exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from node.fault_kinds import KINDS

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SCENARIO_FORMAT = ROOT / "docs" / "scenario-format.md"

# Pages written on other branches that README.md and docs/ already link to. Remove an entry once its page is merged.
PENDING: set[str] = set()

# A path into the repository as the docs write it: a top-level folder of the project, then path parts (a trailing
# `:12` line number, `*` glob or `<member>` placeholder ends it, so `tests/x.py:12` and `scenarios/*.toml` check
# `tests/x.py` and `scenarios/`). A path inside an absolute path or a URL does not count.
TOP_LEVEL = ("node", "chaos", "orchestration", "analysis", "foreign", "compose", "scenarios", "tests", "bench", "docs")
PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(TOP_LEVEL) + r"|\.ci)/[\w.-]*(?:/[\w.-]+)*/?)")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _rel(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _exists(target: Path) -> bool:
    return target.exists() or str(target.relative_to(ROOT)) in PENDING


def _table(text: str, header: str) -> list[list[str]]:
    """The rows of the markdown table whose header line starts with `header`, as lists of cells."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(header)), None)
    assert start is not None, f"docs/scenario-format.md has no table starting {header!r}"
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def _names(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def _keys(cell: str) -> tuple[list[str], list[str]]:
    """(required, optional) key names of a keys cell: "required: `a`, `b`; optional: `c`" or "none"."""
    parts = dict(part.strip().split(":", 1) for part in cell.split(";") if ":" in part)
    return _names(parts.get("required", "")), _names(parts.get("optional", ""))


def test_the_fault_kind_table_is_node_fault_kinds() -> None:
    rows = _table(SCENARIO_FORMAT.read_text(), "| kind | category | keys | meaning |")
    documented = {_names(kind)[0]: (category, _keys(keys)) for kind, category, keys, _ in rows}
    assert list(documented) == list(KINDS), "the table lists the kinds of node/fault_kinds.py, in its order"
    for name, spec in KINDS.items():
        category, (required, optional) = documented[name]
        assert category == spec.category.value, name
        assert required == list(spec.required), f"{name}: required keys"
        assert optional == [k for k in spec.key_names if k not in spec.required], f"{name}: optional keys"


def test_the_value_type_table_names_every_key_once() -> None:
    rows = _table(SCENARIO_FORMAT.read_text(), "| key | value |")
    documented = [name for key, _ in rows for name in _names(key)]
    keys = {k for spec in KINDS.values() for k in spec.key_names}
    assert sorted(documented) == sorted(keys)


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_links_lead_somewhere(page: Path) -> None:
    missing = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a URL or an anchor of the same page
        path = (page.parent / target.split("#", 1)[0]).resolve()
        if not path.is_relative_to(ROOT) or not _exists(path):
            missing.append(target)
    assert not missing, f"{_rel(page)} links to what the repository does not have: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_mentioned_paths_exist(page: Path) -> None:
    mentioned = {m.rstrip(".,;:") for m in PATH.findall(page.read_text())}
    missing = sorted(p for p in mentioned if not _exists(ROOT / p))
    assert not missing, f"{_rel(page)} mentions paths the repository does not have: {missing}"


def test_no_page_points_outside_the_repository() -> None:
    outside = [_rel(p) for p in PAGES if "../shared" in p.read_text() or "../../shared" in p.read_text()]
    assert not outside, f"these pages point outside the repository: {outside}"
