"""The search of `chaosbed bisect` (docs/bisect.md), apart from how a release is run: a binary search over releases
in release order for the first whose outcome differs from the first release's, where an outcome is a failure rate
over several runs, not one verdict.

A probe of a release is N runs (an `Oracle` call); its outcome is "fail" when every run failed, "pass" when none did,
and "flaky" otherwise. A flaky probe first gets more runs (up to `extend` times N in all): a flaky release whose
further runs all go one way is still flaky (its rate is what it is: 0.3 is not "passing"). The search keeps the
invariant that the release at `lo` has the first release's outcome and the one at `hi` does not; it ends when they
are neighbours. The boundary is *sharp* when both sides are pass or fail (not flaky), else it is reported with its
rates and marked not sharp. The search assumes one change of outcome in the range (as git bisect does); the rates
of every probe are in the report, so a range with several is visible there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

Oracle = Callable[[str, int], tuple[int, int, str]]  # (version, runs) -> (failed, ran, runs_dir)
EXTEND = 3  # a flaky probe is run up to this many times N in all


@dataclass
class Probe:
    version: str
    runs: int = 0
    failed: int = 0
    runs_dirs: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.failed / self.runs if self.runs else 0.0

    @property
    def outcome(self) -> str:
        """ "fail" (every run failed), "pass" (none did) or "flaky"."""
        if self.runs and self.failed == self.runs:
            return "fail"
        return "pass" if self.failed == 0 else "flaky"

    def describe(self) -> str:
        """As the report says it: "5.4.6: 5/5 fail"."""
        return f"{self.version}: {self.failed}/{self.runs} fail" + (" (flaky)" if self.outcome == "flaky" else "")

    def as_json(self) -> dict[str, object]:
        return {
            "version": self.version,
            "runs": self.runs,
            "failed": self.failed,
            "rate": round(self.rate, 4),
            "outcome": self.outcome,
            "runs_dir": self.runs_dirs[0] if len(self.runs_dirs) == 1 else self.runs_dirs,
        }


@dataclass
class Search:
    """The state of one bisect: the candidate releases, the probes done (by version), the bracket."""

    versions: list[str]
    runs: int = 5
    extend: int = EXTEND
    probes: dict[str, Probe] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)  # versions in the order they were probed
    lo: int = 0
    hi: int = -1
    done: bool = False
    same: bool = False  # the last release has the first's outcome: no boundary in the range

    def __post_init__(self) -> None:
        if len(self.versions) < 2:
            raise ValueError("bisect needs at least two releases in the range")
        self.hi = len(self.versions) - 1

    def measure(self, version: str, oracle: Oracle, on_probe: Callable[[Probe], None] | None = None) -> Probe:
        """N runs of the release, and more while it is flaky (up to `extend` x N)."""
        p = self.probes.setdefault(version, Probe(version))
        if version not in self.order:
            self.order.append(version)
        while p.runs < self.runs or (p.outcome == "flaky" and p.runs < self.runs * self.extend):
            failed, ran, runs_dir = oracle(version, self.runs)
            p.failed += failed
            p.runs += ran
            if runs_dir not in p.runs_dirs:
                p.runs_dirs.append(runs_dir)
            if on_probe:
                on_probe(p)
            if ran == 0:  # nothing ran: the oracle reports an error by raising; never loop on nothing
                break
        return p

    def run(self, oracle: Oracle, on_probe: Callable[[Probe], None] | None = None) -> None:
        """The whole search: both ends, then halving the bracket. An exception from the oracle (Ctrl-C, a run that
        could not run) leaves the probes and the bracket as they were, for the report."""
        first = self.measure(self.versions[0], oracle, on_probe)
        last = self.measure(self.versions[-1], oracle, on_probe)
        if last.outcome == first.outcome:
            self.same = self.done = True
            return
        while self.hi - self.lo > 1:
            mid = (self.lo + self.hi) // 2
            p = self.measure(self.versions[mid], oracle, on_probe)
            if p.outcome == first.outcome:
                self.lo = mid
            else:
                self.hi = mid
        self.done = True

    @property
    def boundary(self) -> tuple[Probe, Probe] | None:
        """The last release with the first's outcome and the first without it (None: not found, or none)."""
        if not self.done or self.same:
            return None
        return self.probes[self.versions[self.lo]], self.probes[self.versions[self.hi]]

    @property
    def sharp(self) -> bool:
        b = self.boundary
        return b is not None and all(p.outcome != "flaky" for p in b)

    def summary(self) -> str:
        """One line: "5.4.6: 5/5 fail; 5.4.7: 0/5 fail: fixed in 5.4.7", or why there is none."""
        b = self.boundary
        if b is None:
            if self.same:
                p = self.probes[self.versions[0]]
                q = self.probes[self.versions[-1]]
                return f"no boundary: {p.describe()}; {q.describe()}: both ends give the same outcome"
            return "no boundary found (the search did not finish)"
        before, after = b
        if not self.sharp:
            return (
                f"{before.describe()}; {after.describe()}: the outcome changes between {before.version} and "
                f"{after.version}, but the boundary is not sharp (a release there fails only sometimes)"
            )
        verb = "fixed" if before.outcome == "fail" else "broken"
        return f"{before.describe()}; {after.describe()}: {verb} in {after.version}"
