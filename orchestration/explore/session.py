"""One exploration from start to end: the base scenario and its generator, the search, the shrinking of what
failed, each failure's folder (minimal.toml and its run, checked the normal way), the confirmations on real
members, explore.json and index.html.

Which failures are shrunk: with stop_at_first the first one; otherwise the first failure of each distinct set of
violated checks (later failures with the same checks are listed with it, by seed: `same_checks`), so that a buggy
stack that fails one schedule in ten does not spend the rest of the day shrinking the same bug.

Ctrl-C ends the search (or the shrinking under way) and keeps what was found: each failure gets its folder, shrunk
as far as it got, with its run folder but without the normal check (it is slow; `chaosbed check DIR` does it), and
explore.json and index.html are written.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from orchestration.explore.case import load_base, scenario_of
from orchestration.explore.confirm import check_backend, confirm, confirm_line
from orchestration.explore.context import context_of, short_window
from orchestration.explore.finish import Failure, write_failure
from orchestration.explore.generator import Generator, Shape
from orchestration.explore.pool import InlinePool, ProcessPool, make_pool
from orchestration.explore.progress import Reporter
from orchestration.explore.report import write_index
from orchestration.explore.result import explore_doc, write_explore_json
from orchestration.explore.search import Found, SearchResult, SearchSpec, search
from orchestration.explore.shrink import MAX_RUNS, Shrunk, shrink
from orchestration.explore.tables import TomlTable, faults_of


@dataclass
class ExploreSpec:
    file: Path
    out: Path
    search: SearchSpec
    sets: tuple[str, ...] = ()
    keep_faults: bool = False
    jobs: int = 1
    kinds: list[str] | None = None
    shape: Shape | None = None
    confirm: str | None = None
    confirm_runs: int = 5
    check: bool = True  # the normal check (analysis pipeline) of each failure's run folder
    spark: str | None = None
    shrink_runs: int = MAX_RUNS
    command: str = ""
    backend: str = "sim"  # netns, docker: schedules run on real members (real_session.py)
    shrink_k: int = 5  # real members: the most runs a shrink candidate gets (real_shrink.py)
    guide: str = "random"  # real members: "wire" also mutates the schedules that reached something new (guide.py)
    warm: int = 0  # real members: > 0, warm clusters started afresh every `warm` schedules (warm.py)


@dataclass
class Explored:
    result: SearchResult
    failures: list[Failure] = field(default_factory=list)
    interrupted: bool = False


def command_line(spec: ExploreSpec) -> str:
    """The explore command that finds the same failures (without --out and -j, which change nothing found)."""
    s = spec.search
    parts = ["chaosbed", "explore", str(spec.file), "--seed", str(s.seed)]
    if spec.backend != "sim":
        parts += ["--backend", spec.backend]
    if s.schedules is not None:
        parts += ["--schedules", str(s.schedules)]
    if s.budget is not None:
        parts += ["--budget", f"{s.budget:g}s"]
    if s.stop_at_first:
        parts.append("--stop-at-first")
    if spec.keep_faults:
        parts.append("--keep-faults")
    if spec.kinds:
        parts += ["--nemesis", ",".join(spec.kinds)]
    if s.want:
        parts += ["--violates", ",".join(s.want)]
    if spec.backend != "sim":
        parts += ["--guide", spec.guide]
    if spec.warm:
        parts += ["--warm", str(spec.warm)]
    for item in spec.sets:
        parts += ["--set", item]
    return shlex.join(parts)


def prepare(spec: ExploreSpec) -> tuple[TomlTable, Generator]:
    """The base scenario and its generator; ScenarioError / GeneratorError for bad input (exit 2)."""
    base = load_base(spec.file, spec.sets, keep_faults=spec.keep_faults)
    generator = Generator(context_of(scenario_of(base)), spec.kinds, spec.shape)
    if spec.confirm:
        check_backend(spec.confirm)
    return base, generator


def to_shrink(result: SearchResult, stop_at_first: bool) -> list[tuple[Found, list[int]]]:
    """The failures to shrink, each with the seeds of later ones that violated the same checks."""
    if stop_at_first:
        return [(result.failures[0], [])] if result.failures else []
    groups: dict[tuple[str, ...], tuple[Found, list[int]]] = {}
    for f in result.failures:
        if f.result.violated in groups:
            groups[f.result.violated][1].append(f.seed)
        else:
            groups[f.result.violated] = (f, [])
    return list(groups.values())


def window_warning(generator: Generator, base: TomlTable, reporter: Reporter) -> None:
    """Says so when the scenario's timeout leaves faults a window shorter than its workload (context.short_window);
    a window the user set (--window) is theirs."""
    if generator.shape.window is None:
        note = short_window(generator.ctx, scenario_of(base).timeout)
        if note is not None:
            reporter.say(f"warning: {note}")


def explore(spec: ExploreSpec, reporter: Reporter) -> Explored:
    base, generator = prepare(spec)
    window_warning(generator, base, reporter)
    spec.out.mkdir(parents=True, exist_ok=True)
    command = spec.command or command_line(spec)
    pool = make_pool(spec.jobs)
    explored = Explored(SearchResult(0))
    try:
        explored.result = search(base, generator, spec.search, pool, reporter.search)
        explored.interrupted = explored.result.interrupted
        reporter.say(_found_line(explored.result))
        for number, (found, same) in enumerate(to_shrink(explored.result, spec.search.stop_at_first), 1):
            shrunk = _shrink(found, pool, spec, reporter, number, explored)
            failure = _finish(spec, number, found, shrunk, command, reporter, explored)
            failure.same_checks = same
            explored.failures.append(failure)
    finally:
        pool.close(now=explored.interrupted)
    doc = explore_doc(
        explored.result, explored.failures, spec.out, command=command, seed=spec.search.seed, base=str(spec.file)
    )
    doc["interrupted"] = explored.interrupted
    write_explore_json(spec.out, doc)
    write_index(spec.out, doc)
    return explored


def _found_line(r: SearchResult) -> str:
    rate = r.tried / r.seconds if r.seconds else 0.0
    line = f"searched {r.tried:,} schedules in {r.seconds:.1f} s ({rate:.1f}/s): {len(r.failures)} failure(s)"
    if r.errors:
        line += f", {r.errors} schedule(s) could not run (first: {r.error_samples[0]})"
    return line + (" (interrupted)" if r.interrupted else "")


def _shrink(
    found: Found, pool: InlinePool | ProcessPool, spec: ExploreSpec, reporter: Reporter, number: int, ex: Explored
) -> Shrunk:
    checks = ", ".join(found.result.violated)
    if ex.interrupted:
        return Shrunk(found.raw, found.result.violated, complete=False)
    faults = len(found.faults)

    def step(s: Shrunk) -> None:
        now = len(faults_of(s.raw))
        reporter.status(f"shrinking failure {number} ({checks}): {faults} -> {now} faults, {s.runs} runs")

    step(Shrunk(found.raw, found.result.violated))
    shrunk = shrink(
        found.raw, found.result.violated, pool.map, batch=pool.capacity, max_runs=spec.shrink_runs, on_step=step
    )
    if not shrunk.complete and shrunk.runs < spec.shrink_runs:
        ex.interrupted = True
    after = len(faults_of(shrunk.raw))
    reporter.say(
        f"failure {number}: {checks} (seed {found.seed}); shrunk {faults} -> {after} faults in {shrunk.runs} runs"
    )
    return shrunk


def _finish(
    spec: ExploreSpec, number: int, found: Found, shrunk: Shrunk, command: str, reporter: Reporter, ex: Explored
) -> Failure:
    check = spec.check and not ex.interrupted
    reporter.status(f"failure {number}: running minimal.toml" + (" and checking it" if check else ""))
    try:
        failure = write_failure(spec.out, number, found, shrunk, command, check=check, spark=spec.spark)
    except KeyboardInterrupt:  # the first Ctrl-C (later ones are ignored): the folder without the normal check
        ex.interrupted = True
        failure = write_failure(spec.out, number, found, shrunk, command, check=False)
    if failure.check_error:
        reporter.say(f"failure {number}: {failure.check_error}")
    elif failure.checked is not None and failure.checked != found.result.violated:
        reporter.say(
            f"failure {number}: the normal check says {', '.join(failure.checked) or 'passed'}, the search's "
            f"checker said {', '.join(found.result.violated)}: the two checkers disagree (a checker bug)"
        )
    if spec.confirm and not ex.interrupted:
        try:
            failure.confirm = confirm(
                failure.minimal,
                found.result.violated,
                spec.confirm,
                spec.confirm_runs,
                lambda k, got: reporter.status(f"failure {number}: confirming on {spec.confirm}, run {k}"),
            )
            reporter.say(f"failure {number}: {confirm_line(failure.confirm)}")
        except KeyboardInterrupt:
            ex.interrupted = True
    return failure
