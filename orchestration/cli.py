"""The `chaosbed` command line: the `main` group, with one module per command group.

cli_cluster (up, status, send, down), cli_run (run, check), cli_demo (demo), cli_fault (fault ..., nemesis),
cli_matrix (matrix, bugs ...), cli_spark (spark ...), cli_sim (sim), cli_compose (compose ...), cli_stacks (stacks).
What they share (console, value parsers, backend choices, --cluster/--spark/--master, attaching to a cluster) is
cli_options, what several print about a run is cli_output. Only this module adds the commands to `main`, so
`python -m orchestration.cli` is the whole command line too.
"""

from __future__ import annotations

import click

from orchestration.cli_cluster import down, send, status, up
from orchestration.cli_compose import compose
from orchestration.cli_demo import demo
from orchestration.cli_fault import fault, nemesis
from orchestration.cli_matrix import bugs, matrix
from orchestration.cli_run import check, run
from orchestration.cli_sim import sim
from orchestration.cli_spark import spark
from orchestration.cli_stacks import stacks
from orchestration.quick_exit import run_then_exit


@click.group()
def main() -> None:
    """chaosbed: reproduce partition-heal bugs of group-communication protocols on a laptop."""


for _command in (up, status, send, down, run, check, demo, fault, nemesis, matrix, bugs, spark, sim, compose, stacks):
    main.add_command(_command)


def entry() -> None:
    """The `chaosbed` executable: `main`, then an exit without the interpreter's teardown (quick_exit.py)."""
    run_then_exit(main)


if __name__ == "__main__":
    entry()
