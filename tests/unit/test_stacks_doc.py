"""`chaosbed stacks` lists every protocol's declared properties (name, type, default, description) from the one
place they are declared, and every property it lists can be set on a built stack."""

from __future__ import annotations

import re

from click.testing import CliRunner

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


def test_every_listed_property_is_settable_by_its_name() -> None:
    stack = next(s for s in STACKS if {"unicast3", "nakack2", "gms", "fd", "merge"} <= set(STACKS[s]))
    for proto in STACKS[stack]:
        for p in PROTOCOLS[proto].PROPS.declared():
            build_stack("A", stack, {proto: {p.name: p.default}})  # raises on an unknown name or a bad value
