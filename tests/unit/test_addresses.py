"""Member addresses (node/addresses.py): what make_address writes, name_of, incarnation_of and parse_address read
back; what is no address is refused (make_address) or read as none (parse_address, for histories)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from node.addresses import incarnation_of, make_address, name_of, parse_address

NAMES = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="/"), min_size=1, max_size=10)


@given(NAMES, st.integers(1, 10**6))
def test_an_address_reads_back_as_its_member_and_incarnation(name: str, incarnation: int) -> None:
    address = make_address(name, incarnation)
    assert name_of(address) == name and incarnation_of(address) == incarnation
    assert parse_address(address) == (name, incarnation)


def test_the_first_incarnation_is_the_name() -> None:
    assert make_address("B") == make_address("B", 1) == "B"
    assert make_address("B", 2) == "B/2"


@pytest.mark.parametrize("name", ["", "B/2", "/"])
def test_a_name_that_cannot_make_an_address_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="non-empty and has no '/'"):
        make_address(name)


def test_what_is_no_address_parses_as_none() -> None:
    for bad in (None, "", "/2", "C/x", "C/0", "C/-1", "C/2/1", 3, ["C"]):
        assert parse_address(bad) is None, bad
