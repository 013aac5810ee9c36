"""The `chaosbed` command line."""

from __future__ import annotations

import click


@click.group()
def main() -> None:
    """chaosbed: reproduce partition-heal bugs of group-communication protocols on a laptop."""
