"""`python3 -m foreign.chaosbed CONFIG.json [--stack S] [--set PROTO.PROP=VALUE ...]`: see the package docstring."""

from __future__ import annotations

import asyncio
import json
import os
import sys

from foreign.chaosbed import member_config
from node.__main__ import amain

USAGE = "usage: python3 -m foreign.chaosbed CONFIG.json [--stack STACK] [--set PROTO.PROP=VALUE ...]"


def parse_args(argv: list[str]) -> tuple[str, str, dict[str, dict[str, str]]]:
    """(config path, stack, properties); ValueError with the usage. By hand: argparse's import would cost every
    start a few ms, and the foreign path is measured against the native one (bench/bench_foreign.py)."""
    config: str | None = None
    stack = "unicast3+nakack2"
    properties: dict[str, dict[str, str]] = {}
    rest = list(argv)
    while rest:
        arg = rest.pop(0)
        if arg in ("--stack", "--set"):
            if not rest:
                raise ValueError(f"{arg} needs a value; {USAGE}")
            value = rest.pop(0)
            if arg == "--stack":
                stack = value
                continue
            key, eq, prop_value = value.partition("=")
            proto, dot, prop = key.partition(".")
            if not (eq and dot and proto and prop):
                raise ValueError(f"--set {value}: write PROTO.PROP=VALUE; {USAGE}")
            properties.setdefault(proto, {})[prop] = prop_value
        elif config is None and not arg.startswith("-"):
            config = arg
        else:
            raise ValueError(f"unexpected argument {arg!r}; {USAGE}")
    if config is None:
        raise ValueError(USAGE)
    return config, stack, properties


def main(argv: list[str]) -> int:
    try:
        config, stack, properties = parse_args(argv)
    except ValueError as e:
        print(f"foreign.chaosbed: {e}", file=sys.stderr)
        return 2
    try:
        with open(config) as f:
            doc = json.load(f)
        cfg = member_config(doc, stack, properties, os.environ.get("CHAOSBED_TOKEN", ""))
        cfg.validate()
    except (OSError, ValueError, TypeError, KeyError) as e:
        print(f"foreign.chaosbed: bad config {config}: {type(e).__name__} {e}", file=sys.stderr)
        return 2
    try:
        asyncio.run(amain(cfg))
    except OSError as e:
        print(f"foreign.chaosbed {cfg.name}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
