"""`python -m orchestration.cli ...` is `chaosbed ...`."""

from orchestration.cli.main import entry

entry()
