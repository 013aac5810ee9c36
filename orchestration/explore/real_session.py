"""One exploration on real members (`chaosbed explore FILE --backend netns|docker`), for any system: the generator's
schedules (over the system's context: foreign_context.py), each run on a fresh cluster through the normal runner and
checked with the reference checker (real_case.py), `-j N` clusters side by side (pool.py), each failure's run folder
kept under `schedules/`; the first failure of each set of violated checks shrunk by rates (real_shrink.py); its
minimal.toml run once more into `run/` (checked the normal way unless --no-check) and confirmed on `confirm_runs`
fresh clusters (`confirm-<backend>-<k>/`): its rate, "confirmed" at >= 75%, flaky below (then earlier forms of its
shrink are confirmed in turn, `reliable-back-<n>/`, the first confirmed kept as reliable.toml). For chaosbed's own
member the minimal scenario also runs in the simulator: a failure the simulator passes is labelled a parity gap.

Ctrl-C ends the search or the shrinking, keeps what was found and writes explore.json and index.html; the workers
take their clusters down (pool.py)."""

from __future__ import annotations

from pathlib import Path

from chaos.wire_keys import reader_for
from orchestration.explore.case import load_base, run_case, scenario_of
from orchestration.explore.confirm import ConfirmDoc, ReliableDoc, check_backend, confirm_doc, confirm_line
from orchestration.explore.finish import MINIMAL, Failure, folder_name, normal_check
from orchestration.explore.foreign_context import context_for
from orchestration.explore.generator import Generator
from orchestration.explore.guide import Guide
from orchestration.explore.minimal import Provenance, write_minimal
from orchestration.explore.pool import InlinePool, ProcessPool, make_pool
from orchestration.explore.progress import Reporter
from orchestration.explore.real_case import Keep, run_real_case
from orchestration.explore.real_shrink import RateShrunk, shrink_real
from orchestration.explore.reliable import find_reliable, reliable_line, worth_trying
from orchestration.explore.report import write_index
from orchestration.explore.result import explore_doc, write_explore_json
from orchestration.explore.search import Found, SearchResult, schedule_folder, search
from orchestration.explore.session import Explored, ExploreSpec, command_line, to_shrink, window_warning
from orchestration.explore.shrink import Shrunk
from orchestration.explore.tables import TomlTable, faults_of
from orchestration.scenario import read_raw

SCHEDULES = "schedules"


def prepare_real(spec: ExploreSpec) -> tuple[TomlTable, Generator]:
    """The base scenario and its generator over real members; ScenarioError / GeneratorError for bad input."""
    check_backend(spec.backend)
    base = load_base(spec.file, spec.sets, keep_faults=spec.keep_faults)
    generator = Generator(context_for(scenario_of(base), real=True), spec.kinds, spec.shape)
    return base, generator


def explore_real(spec: ExploreSpec, reporter: Reporter) -> Explored:
    base, generator = prepare_real(spec)
    window_warning(generator, base, reporter)
    spec.out.mkdir(parents=True, exist_ok=True)
    command = spec.command or command_line(spec)
    pool = make_pool(spec.jobs, spec.backend)
    explored = Explored(SearchResult(0))
    guide = _guide(spec, base, generator, reporter)
    try:
        explored.result = search(base, generator, spec.search, pool, reporter.search, keep_root=spec.out / SCHEDULES,
                                 guide=guide, warm=spec.warm)  # fmt: skip
        explored.interrupted = explored.result.interrupted
        r = explored.result
        reporter.say(
            f"searched {r.tried:,} schedules on {spec.backend} in {r.seconds:.1f} s "
            f"({3600 * r.tried / r.seconds if r.seconds else 0:.0f}/hour): {len(r.failures)} failure(s)"
            + (f", {r.errors} could not run (first: {r.error_samples[0]})" if r.errors else "")
        )
        if r.guided is not None:
            g = r.guided
            reporter.say(f"guided by the wire: {g['features']:,} features reached, {g['corpus']} schedules in the "
                         f"corpus ({g['near_misses']} of them near misses, the nearest at {g['best_pressure']:.2f} "
                         f"of a bound); drawn {', '.join(f'{k} {v}' for k, v in g['drawn'].items())}")  # fmt: skip
        if r.warm is not None:
            reporter.say(warm_line(r.warm, spec.warm))
        for number, (found, same) in enumerate(to_shrink(r, spec.search.stop_at_first), 1):
            shrunk = _shrink(found, pool, spec, reporter, number, explored)
            failure = _finish(spec, number, found, shrunk, command, pool, reporter, explored)
            failure.same_checks = same
            explored.failures.append(failure)
    finally:
        pool.close(now=explored.interrupted)
    doc = explore_doc(
        explored.result, explored.failures, spec.out, command=command, seed=spec.search.seed, base=str(spec.file)
    )
    doc["interrupted"] = explored.interrupted
    doc["backend"], doc["jobs"] = spec.backend, spec.jobs
    doc["guide"] = "wire" if guide is not None else "random"
    if explored.result.guided is not None:
        doc["guided"] = explored.result.guided
    if explored.result.warm is not None:
        doc["warm"] = {"every": spec.warm, "schedules": explored.result.warm}
    for entry, f in zip(doc["failures"], explored.failures, strict=True):
        if isinstance(f.shrunk, RateShrunk):
            entry["shrink"]["rates"] = [list(x) for x in f.shrunk.rates]
        found_run = spec.out / SCHEDULES / schedule_folder(f.found.index, f.found.seed)
        if found_run.is_dir():
            entry["found_run"] = found_run.relative_to(spec.out).as_posix()
        if guide is not None:
            entry["origin"] = f.found.origin
    write_explore_json(spec.out, doc)
    write_index(spec.out, doc)
    return explored


def warm_line(counts: dict[str, int], every: int) -> str:
    """What the warm clusters did, in one sentence."""
    ran = ", ".join(f"{WARM_WORDS.get(k, k)} {v}" for k, v in sorted(counts.items()))
    return f"warm clusters (afresh every {every}): {ran}"


WARM_WORDS = {
    "warm": "run warm",
    "fresh": "run fresh",
    "fresh-seqno": "run fresh (a discard aimed at a seqno)",
    "warm-confirmed": "failed warm and fresh",
    "warm-unconfirmed": "failed warm only (not counted)",
    "warm-leaked": "rerun fresh after a leak",
    "warm-error": "rerun fresh after a warm error",
}


def _guide(spec: ExploreSpec, base: TomlTable, generator: Generator, reporter: Reporter) -> Guide | None:
    """The wire guide, where the search asks for it and a tap can watch the cluster (netns, a system whose wire
    chaosbed reads); otherwise None, said once."""
    if spec.guide != "wire":
        return None
    sc = scenario_of(base)
    if spec.backend != "netns" or reader_for(sc.system.wire) is None:
        why = f"the {spec.backend} backend has no wire tap" if spec.backend != "netns" else (
            f"system {sc.system.name!r} has no wire profile chaosbed reads")  # fmt: skip
        reporter.say(f"guide: random ({why}; the wire tap watches netns clusters)")
        return None
    return Guide(generator)


def _shrink(
    found: Found, pool: InlinePool | ProcessPool, spec: ExploreSpec, reporter: Reporter, number: int, ex: Explored
) -> Shrunk:
    checks = ", ".join(found.result.violated)
    if ex.interrupted or spec.shrink_runs == 0:
        return RateShrunk(found.raw, found.result.violated, complete=spec.shrink_runs == 0 and not ex.interrupted)
    before = len(found.faults)

    def step(s: Shrunk) -> None:
        reporter.status(f"shrinking failure {number} ({checks}): {before} -> {len(faults_of(s.raw))} faults, "
                        f"{s.runs} runs")  # fmt: skip

    shrunk = shrink_real(
        found.raw,
        found.result.violated,
        pool.map,
        batch=pool.capacity,
        max_runs=spec.shrink_runs,
        max_k=spec.shrink_k,
        on_step=step,
    )
    if not shrunk.complete and shrunk.runs < spec.shrink_runs:
        ex.interrupted = True
    reporter.say(
        f"failure {number}: {checks} (seed {found.seed}); shrunk {before} -> {len(faults_of(shrunk.raw))} faults "
        f"in {shrunk.runs} runs"
    )
    return shrunk


def _finish(
    spec: ExploreSpec,
    number: int,
    found: Found,
    shrunk: Shrunk,
    command: str,
    pool: InlinePool | ProcessPool,
    reporter: Reporter,
    ex: Explored,
) -> Failure:
    """The failure's folder: minimal.toml, its run on real members (`run/`, checked the normal way), its
    confirmation and, for chaosbed's own member, the simulator's verdict on it."""
    folder = spec.out / folder_name(number, found)
    folder.mkdir(parents=True, exist_ok=True)
    prov = Provenance(command, found.index, found.seed, found.result.violated, tuple(found.faults))
    write_minimal(folder / MINIMAL, shrunk.raw, prov, shrunk.trail, shrunk.runs, shrunk.complete, spec.backend)
    failure = Failure(number, found, shrunk, folder, backend=spec.backend)
    if ex.interrupted:
        return failure
    try:
        reporter.status(f"failure {number}: running minimal.toml on {spec.backend}")
        res = run_real_case(read_raw(failure.minimal), folder, spec.backend, Keep(str(failure.run), always=True))
        failure.details = res.details
        if res.error is not None:
            failure.check_error = f"the minimal scenario did not run: {res.error}"
        elif spec.check:
            failure.checked, failure.check_error = normal_check(failure.run, spec.spark)
        reporter.status(f"failure {number}: confirming on {spec.confirm_runs} fresh clusters")
        failure.confirm = confirm_real(failure.minimal, found.result.violated, spec.backend, spec.confirm_runs, pool)
        if scenario_of(found.raw).system.native:
            sim = run_case(read_raw(failure.minimal), folder / "sim-check")
            failure.confirm["parity_gap"] = sim.error is None and sim.violated != found.result.violated
        reporter.say(f"failure {number}: {confirm_line(failure.confirm)}")
        if isinstance(shrunk, RateShrunk) and worth_trying(failure.confirm, shrunk.path):
            reporter.status(f"failure {number}: flaky; confirming earlier forms of its shrink")
            failure.confirm["reliable"] = _reliable(spec, found, shrunk, prov, folder, pool)
            reporter.say(f"failure {number}: {reliable_line(failure.confirm['reliable'], len(shrunk.trail))}")
    except KeyboardInterrupt:
        ex.interrupted = True
    return failure


def _reliable(
    spec: ExploreSpec,
    found: Found,
    shrunk: RateShrunk,
    prov: Provenance,
    folder: Path,
    pool: InlinePool | ProcessPool,
) -> ReliableDoc:
    """Confirms earlier forms of a flaky minimal scenario (reliable.py); the first confirmed is reliable.toml."""

    def write(form: Path, raw: TomlTable, trail: list[str]) -> str:
        return write_minimal(form, raw, prov, trail, shrunk.runs, shrunk.complete, spec.backend)

    def confirm(form: Path) -> ConfirmDoc:
        return confirm_real(form, found.result.violated, spec.backend, spec.confirm_runs, pool)

    return find_reliable(folder, shrunk.path, shrunk.trail, write, confirm)[1]


def confirm_real(
    minimal: Path, violated: tuple[str, ...], backend: str, runs: int, pool: InlinePool | ProcessPool
) -> ConfirmDoc:
    """minimal.toml on `runs` fresh clusters side by side (pool), each run kept in `confirm-<backend>-<k>/`."""
    raw = read_raw(minimal)
    keeps = [Keep(str(minimal.parent / f"confirm-{backend}-{k}"), always=True) for k in range(1, runs + 1)]
    results = pool.map([raw] * runs, keeps)
    per_run = [list(r.violated) if r.error is None else None for r in results]
    errors = [r.error for r in results if r.error is not None]
    return confirm_doc(backend, per_run, violated, errors, parity=False)
