"""`chaosbed stacks`: the protocol stacks a cluster can run, then each stack's protocols and their properties
(orchestration/cli/stacks_doc.py)."""

from __future__ import annotations

import click

from node.stack import STACKS
from orchestration.cli.stacks_doc import properties_text


@click.command()
def stacks() -> None:
    """List the protocol stacks a cluster can run."""
    for name in sorted(STACKS):
        click.echo(name)
    click.echo(properties_text(), nl=False)
