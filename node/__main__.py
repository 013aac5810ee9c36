"""`python -m node CONFIG.json`: run one cluster member until SIGTERM/SIGINT or a `shutdown` command."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import Awaitable, Mapping

from node.control import ControlServer
from node.runtime import Member, MemberConfig


async def serve(
    member: Member, ready: Mapping[str, object] | None = None, alongside: Awaitable[None] | None = None
) -> None:
    """Starts the member and its control endpoint and runs them until SIGTERM/SIGINT or a `shutdown` command;
    `alongside` runs meanwhile (cancelled at the end); `ready` adds fields to the ready line."""
    cfg = member.cfg
    await member.start()
    control = ControlServer(member, cfg.ip, cfg.control_port or cfg.port + 1, cfg.token)
    await control.start()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: asyncio.ensure_future(member.stop()))
    side = asyncio.ensure_future(alongside) if alongside is not None else None
    print(json.dumps({"ready": cfg.name, "address": member.address, **(ready or {})}), flush=True)
    await member.stopped.wait()
    if side is not None:
        side.cancel()
    await control.close()


async def amain(cfg: MemberConfig) -> None:
    await serve(Member(cfg))


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m node CONFIG.json", file=sys.stderr)
        return 2
    try:
        with open(argv[0]) as f:
            raw = json.load(f)
        raw["peers"] = {k: tuple(v) for k, v in raw["peers"].items()}
        cfg = MemberConfig(**raw)
        cfg.validate()
    except (OSError, ValueError, TypeError, KeyError) as e:
        print(f"node: bad config {argv[0]}: {e}", file=sys.stderr)
        return 2
    try:
        asyncio.run(amain(cfg))
    except OSError as e:
        print(f"node {cfg.name}: {e} (is the address/port in use or not configured?)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
