"""The one TOML writer (orchestration/toml_text.py): what it writes reads back with tomllib to the same table, over
the value shapes scenarios use (tables in tables, arrays of tables, inline tables in arrays, any string, numbers,
booleans); one value stays on one line and `--set` parses it back; a header of comments stays on top."""

from __future__ import annotations

import tomllib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestration.runner import scenario_toml
from orchestration.scenario import apply_overrides, parse
from orchestration.toml_text import toml_document, toml_key, toml_value

# any character a file can hold (no lone surrogates): quotes, backslashes, control characters, emoji
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
KEYS = st.one_of(st.from_regex(r"[a-z_][a-z0-9_-]{0,8}", fullmatch=True), TEXT)
SCALARS = st.one_of(
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),  # nan is no value equal to itself
    TEXT,
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=12,
)
TABLES = st.dictionaries(
    KEYS,
    VALUES | st.lists(st.dictionaries(KEYS, VALUES, max_size=4), min_size=1, max_size=3),  # [[faults]] and the like
    max_size=6,
)


@given(TABLES)
def test_a_document_reads_back_as_the_same_table(table: dict[str, object]) -> None:
    assert tomllib.loads(toml_document(table)) == table


@given(TABLES, st.lists(st.text(st.characters(exclude_categories=("Cc", "Cs")), max_size=20), max_size=5))
def test_comments_stay_on_top(table: dict[str, object], comments: list[str]) -> None:
    text = toml_document(table, comments)
    lines = text.splitlines()
    assert lines[: len(comments)] == [f"# {c}" if c else "#" for c in comments]
    assert tomllib.loads(text) == table


@given(VALUES)
def test_a_value_is_one_line_that_reads_back(value: object) -> None:
    text = toml_value(value)
    assert "\n" not in text
    assert tomllib.loads(f"v = {text}")["v"] == value


@given(VALUES)
def test_set_parses_a_value_back(value: object) -> None:
    """`--set KEY=VALUE` with the value as toml_value writes it (what a matrix cell's replay command says)."""
    assert apply_overrides({}, [f"cluster.x={toml_value(value)}"]) == {"cluster": {"x": value}}


def test_values_as_before() -> None:
    """The forms reports and replay commands showed before tomli-w wrote them stay the same."""
    assert toml_value("true") == '"true"' and toml_value(True) == "true"
    assert toml_value(0.5) == "0.5" and toml_value(10) == "10"
    assert toml_value(["A", 2]) == '["A", 2]'
    assert toml_value({"xmit": 5, "a b": "x"}) == '{ xmit = 5, "a b" = "x" }'
    assert toml_key("unicast3") == "unicast3" and toml_key("a.b") == '"a.b"' and toml_key("é") == '"é"'


def test_what_toml_cannot_hold_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        toml_value(None)
    with pytest.raises(TypeError):
        toml_document({"name": object()})


def test_a_scenario_is_written_with_its_seed_after_its_header() -> None:
    sc = parse(
        {"name": "s", "seed": 7, "cluster": {"members": 2}, "faults": [{"at": "1s", "kind": "kill", "member": "A"}]}
    )
    text = scenario_toml(sc, ["found by a test", "", "replay: chaosbed run s.toml"])
    assert text.startswith('# found by a test\n#\n# replay: chaosbed run s.toml\nname = "s"\n')
    assert tomllib.loads(text) == {**sc.raw, "seed": 7}
