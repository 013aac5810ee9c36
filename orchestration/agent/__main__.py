"""`python -m orchestration.agent ...`: run a chaos agent until SIGTERM/SIGINT (see the package's docstring)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from orchestration.agent.host import Host
from orchestration.agent.server import Agent, Server

EXIT_WITH_CHECK_S = 0.5


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m orchestration.agent", description="a chaosbed chaos agent")
    parser.add_argument("--listen", required=True, help="ADDR:PORT to serve on (the host's address in the swarm)")
    parser.add_argument("--token-file", required=True, type=Path, help="a file holding the agent's token")
    parser.add_argument("--docker", default="unix:///var/run/docker.sock", help="this host's Docker engine")
    parser.add_argument("--state", required=True, type=Path, help="the agent's folder (histories, fault tables)")
    parser.add_argument("--name", required=True, help="this host's name in the swarm")
    parser.add_argument(
        "--exit-with", type=int, default=None, metavar="PID", help="end (healing everything) when this process ends"
    )
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("agent: needs root (it enters the member containers' network namespaces)", file=sys.stderr)
        return 2
    try:
        token = args.token_file.read_text().strip()
    except OSError as e:
        print(f"agent: cannot read the token file: {e}", file=sys.stderr)
        return 2
    if len(token) < 16:
        print("agent: the token must have at least 16 characters", file=sys.stderr)
        return 2
    addr, _, port = args.listen.rpartition(":")
    args.state.mkdir(parents=True, exist_ok=True)
    host = Host(args.name, args.state, args.docker)
    healed = host.recover()
    agent = Agent(host, token)
    try:
        server = Server((addr, int(port)), agent)
    except (OSError, ValueError) as e:
        print(json.dumps({"ready": False, "error": f"cannot listen on {args.listen}: {e}"}), flush=True)
        return 2

    def stop(signum: int, frame: object) -> None:
        agent.stopping.set()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    watchdog = threading.Thread(target=agent.watch_leases, daemon=True)
    watchdog.start()
    if args.exit_with is not None:
        threading.Thread(target=_exit_with, args=(args.exit_with, stop), daemon=True).start()
    print(json.dumps({"ready": True, "pid": os.getpid(), "listen": args.listen, "recovered": healed}), flush=True)
    with server:
        server.serve_forever(poll_interval=0.2)
    for c in list(host.clusters.values()):  # a stopped agent leaves no fault and no attached namespace behind
        host.release(c, remove_files=False)
    return 0


def _exit_with(pid: int, stop: Callable[[int, object], None]) -> None:
    """Stops the agent when process `pid` ends (checked by its start time too, so a reused pid does not count)."""
    from orchestration.host.leases import process_started, same_process

    started = process_started(pid)
    while same_process(pid, started):
        time.sleep(EXIT_WITH_CHECK_S)  # polling a process we cannot wait for (not our child), for the agent's life
    print(json.dumps({"exit_with": pid, "ended": True, "t": time.time()}), flush=True)
    stop(signal.SIGTERM, None)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
