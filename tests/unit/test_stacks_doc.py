"""`chaosbed stacks` lists every protocol's declared properties (name, type, default, description) from the one
place they are declared, and every property it lists can be set on a built stack."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from node.protocols.base import PropertySpec
from node.stack import PROTOCOLS, STACKS, build_stack
from orchestration.cli.main import main


def test_stacks_prints_every_declared_property_with_its_default() -> None:
    out = CliRunner().invoke(main, ["stacks"])
    assert out.exit_code == 0, out.output
    for proto, cls in PROTOCOLS.items():
        assert f"\n{proto} ({cls.PROTOCOL}):\n" in out.output
        block = out.output.split(f"\n{proto} ({cls.PROTOCOL}):\n", 1)[1].split("\n\n", 1)[0]
        names = re.findall(r"^  (\w+) ", block, flags=re.M)
        assert names == [p.name for p in cls.PROPS.declared()], (proto, names)
        for p in cls.PROPS.declared():
            assert p.description.split()[0] in block, (proto, p.name)
    assert "xmit_interval" in out.output and "0.5s" in out.output  # unicast3's, a duration shown with its unit


def other_value(spec: PropertySpec) -> tuple[object, object]:
    """A value other than the property's default, as a user writes it, and what the protocol must then hold."""
    if spec.type == "bool":
        return (not spec.default), (not spec.default)
    if spec.type == "int":
        return spec.default + 1, spec.default + 1
    assert spec.type == "float", spec
    value = round(float(spec.default) * 1.5 + 0.1, 3)
    return (f"{value * 1000:g}ms" if spec.unit == "s" else value), value


def test_every_listed_property_is_settable_by_its_name() -> None:
    stack = next(s for s in STACKS if {"unicast3", "nakack2", "gms", "fd", "merge"} <= set(STACKS[s]))
    for proto in STACKS[stack]:
        for spec in PROTOCOLS[proto].PROPS.declared():
            given, held = other_value(spec)
            built = build_stack("A", stack, {proto: {spec.name: given}})  # raises on an unknown name or a bad value
            assert getattr(built.by_name[proto].props, spec.name) == pytest.approx(held), (proto, spec.name, given)
