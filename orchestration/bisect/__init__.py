"""`chaosbed bisect`: the release where a scenario's outcome changes (docs/bisect.md)."""
