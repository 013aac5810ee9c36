"""`python -m orchestration ...` is `chaosbed ...` (used by detached helpers such as the timer of `fault --for`)."""

from orchestration.cli.main import entry

entry()
