"""CheckedRun: analysis.pipeline.Analysis of the one run folder a history_check made, with its figures at hand.

Imported on first use only (check_history's deferred import): the plugin loads in every pytest session, Spark and
Arrow only where a test checks."""

from __future__ import annotations

from pathlib import Path

from analysis.pipeline import Analysis
from analysis.stats import RunStats
from analysis.verdict import Violation


class CheckedRun(Analysis):
    @property
    def path(self) -> Path:
        return self.runs[0].path

    @property
    def run_stats(self) -> RunStats:
        """The run's `stats` of verdict.json: deliveries, duplicate_deliveries, latency_ms, members, ..."""
        return self.stats[self.runs[0].name]

    @property
    def violations(self) -> list[Violation]:
        return self.results[self.runs[0].name].violations
