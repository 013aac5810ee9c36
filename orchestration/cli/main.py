"""The `chaosbed` command line: the `main` group, with one module per command group.

cluster (up, status, send, down), run (run, check), demo (demo), fault (fault ..., nemesis), matrix (matrix,
bugs ...), bisect (bisect), spark (spark ...), sim (sim), compose (compose ...), stacks (stacks), systems (systems,
conform), members (kill, restart, pause, resume, leave), swarm (swarm ...). What they share (console, value
parsers, backend choices, --cluster/--spark/--master, attaching to a cluster) is options.py, what several print about
a run is output.py. Only this module adds the commands to `main`, so the command modules never import it;
`python -m orchestration` and `python -m orchestration.cli` are the whole command line.
"""

from __future__ import annotations

import click

from orchestration.cli.bisect import bisect
from orchestration.cli.cluster import down, send, status, up
from orchestration.cli.compose import compose
from orchestration.cli.demo import demo
from orchestration.cli.errors import guarded
from orchestration.cli.explore import explore
from orchestration.cli.fault import fault, nemesis
from orchestration.cli.matrix import bugs, matrix
from orchestration.cli.members import kill, leave, pause, restart, resume
from orchestration.cli.quick_exit import run_then_exit
from orchestration.cli.run import check, run
from orchestration.cli.sim import sim
from orchestration.cli.spark import spark
from orchestration.cli.stacks import stacks
from orchestration.cli.swarm import swarm
from orchestration.cli.systems import conform, systems


@click.group()
def main() -> None:
    """chaosbed: reproduce partition-heal bugs of group-communication protocols on a laptop."""


_COMMANDS = (up, status, send, down, run, check, demo, fault, nemesis, matrix, bugs, spark, sim, compose, stacks, swarm)
for _command in (*_COMMANDS, systems, conform, kill, restart, pause, resume, leave):
    main.add_command(_command)
main.add_command(explore)
main.add_command(bisect)


def entry() -> None:
    """The `chaosbed` executable: `main` (a machine's errors as one line and exit 2: errors.py), then an exit without
    the interpreter's teardown (quick_exit.py)."""
    run_then_exit(guarded(main))
