"""`python3 -m foreign.chaosbed CONFIG.json [--stack S] [--set PROTO.PROP=VALUE ...]`: see the package docstring."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys

from foreign.chaosbed import member_config
from node.__main__ import amain


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m foreign.chaosbed")
    parser.add_argument("config")
    parser.add_argument("--stack", default="unicast3+nakack2")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="PROTO.PROP=VALUE")
    args = parser.parse_args(argv)
    properties: dict[str, dict[str, str]] = {}
    for item in args.sets:
        key, _, value = item.partition("=")
        proto, _, prop = key.partition(".")
        properties.setdefault(proto, {})[prop] = value
    try:
        with open(args.config) as f:
            doc = json.load(f)
        cfg = member_config(doc, args.stack, properties, os.environ.get("CHAOSBED_TOKEN", ""))
        cfg.validate()
    except (OSError, ValueError, TypeError, KeyError) as e:
        print(f"foreign.chaosbed: bad config {args.config}: {type(e).__name__} {e}", file=sys.stderr)
        return 2
    try:
        asyncio.run(amain(cfg))
    except OSError as e:
        print(f"foreign.chaosbed {cfg.name}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
