"""`chaosbed run`: executes a scenario on a backend and leaves a run folder (docs/scenario-format.md) for the checker.

One runner for every backend (sim, process, netns): the same Cluster API, the same scheduler. The run folder gets
`scenario.toml` (as run, seed filled in), `history/<member>.jsonl`, `faults.jsonl` (the start of the schedule's clock,
every fault applied and removed with its planned `at` and its `t`, and the seed) and `outcome.json` (the runner's
own violations, which the checker reads with the histories; late member actions; warnings). The run ends when
every workload is sent and the cluster is quiet (nothing unacked, no gaps) and, up to the last heal plus the
views_converge bound, its members' views agree (schedule.wait_quiet); or at the scenario's timeout, which is then
reported as a `timeout` violation if the messages had not settled.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from chaos.faults import FaultRecord, JsonObject
from node.atomic import write_atomic
from orchestration.host.os_errors import os_problem
from orchestration.scenario import NETWORK_FAULTS, Scenario, ScenarioError
from orchestration.schedule import ScheduleResult, run_schedule
from orchestration.toml_text import toml_document

if TYPE_CHECKING:
    from chaos.fault_table import QueueBypass
    from orchestration.backends.netns_tap import WireTap
    from orchestration.cluster import Cluster

SHIELDED = (signal.SIGINT, signal.SIGTERM)
OUTCOME_FILE = "outcome.json"  # the runner's own result in a run folder (analysis.schema reads it)


class Violation(TypedDict):
    """A violation as verdict.json and outcome.json list it (docs/scenario-format.md): here, the runner's own
    `timeout`."""

    check: str
    sender: str | None
    receiver: str | None
    conn_id: int | None
    seqno: int | None
    msg_id: str | None
    detail: str


class OutcomeDoc(TypedDict, total=False):
    """outcome.json in a run folder (write_outcome); a matrix cell that could not run writes only `error`."""

    violations: list[Violation]
    timed_out: bool
    late: list[JsonObject]
    warnings: list[str]
    handled: list[JsonObject]
    usage: dict[str, MemberUsage]
    unknown_shapes: dict[str, int]
    system: dict[str, str]
    error: str


class MemberUsage(TypedDict):
    """A real member's resource use at the end of a run, as its `stats` reply says (ru_maxrss, CPU seconds)."""

    max_rss_kib: int
    cpu_s: float


@dataclass
class RunOutcome:
    out: Path
    timed_out: bool
    extra_violations: list[Violation] = field(default_factory=list)
    late: list[JsonObject] = field(default_factory=list)  # member actions that started late (schedule.LATE_MS)
    handled: list[FaultRecord] = field(default_factory=list)  # network faults with what their rules acted on
    warnings: list[str] = field(default_factory=list)  # what did not happen as planned (schedule.py, bypass_warnings)
    usage: dict[str, MemberUsage] = field(default_factory=dict)  # real members alive at the end
    system: dict[str, str] = field(default_factory=dict)  # what the members ran: name, stack, release (if any)
    # per receiving member, datagrams of the wire its handler could not read (a shape the profile does not know)
    unknown_shapes: dict[str, int] = field(default_factory=dict)


def scenario_toml(sc: Scenario, comments: Iterable[str] = ()) -> str:
    """The scenario as run: the parsed file with the seed filled in, after `comments` as `# ` lines."""
    return toml_document({**sc.raw, "seed": sc.seed}, comments)


def prepare(sc: Scenario, out: Path) -> None:
    (out / "history").mkdir(parents=True, exist_ok=True)
    (out / "scenario.toml").write_text(scenario_toml(sc))


def backend_problem(sc: Scenario, backend: str) -> str | None:
    """Why this scenario cannot run on this backend (None if it can)."""
    from orchestration.systems.clusters import backend_problem as system_problem

    if (why := system_problem(sc.system, backend)) is not None:
        return why
    network = sorted({f.kind for f in sc.faults} & NETWORK_FAULTS)
    if network and backend == "process":
        where = (
            "--backend netns (as root), or --backend sim" if sc.system.native else "--backend netns or docker (as root)"
        )
        return (
            f"faults: {', '.join(network)} need a network of the cluster's own: run with {where}; the {backend} "
            "backend's members share the host's loopback"
        )
    return None


def run(
    sc: Scenario,
    backend: str,
    out: Path,
    *,
    on_event: Callable[[JsonObject], None] | None = None,
    tap: bool = False,
) -> RunOutcome:
    """Runs the scenario on any backend: start the cluster, wait for the group (membership stacks), run the
    schedule (orchestration/schedule.py), stop the members gracefully, take the cluster down. `tap`: a netns
    cluster's datagrams are counted by message type while the schedule runs (`wire.jsonl`, chaos/wiretap.py)."""
    from chaos.faults import ChaosError
    from orchestration.cluster import ClusterError
    from orchestration.systems.clusters import forms_group, new_cluster, spec_of

    problem = backend_problem(sc, backend)
    if problem:
        raise ScenarioError(problem)
    prepare(sc, out)
    spec = spec_of(sc.system, sc.members, backend, stack=sc.stack, transport=sc.transport, properties=sc.properties,
                   seed=sc.seed)  # fmt: skip
    cluster = new_cluster(spec, workdir=out)
    wire_tap: WireTap | None = None
    try:
        cluster.start()
        if tap:
            wire_tap = start_wire_tap(cluster, sc, out)
        if forms_group(cluster):  # the schedule starts once the group has formed
            cluster.wait_for_view(timeout=min(30.0, sc.timeout))
        result = run_schedule(cluster, sc, out / "faults.jsonl", on_event=on_event)
        if wire_tap is not None:
            wire_tap.stop()
        usage = member_usage(cluster) if backend != "sim" and sc.system.control else {}
        outcome = schedule_outcome(cluster, sc, out, result, usage)
        cluster.stop_members()
        write_outcome(outcome)
        return outcome
    except (ChaosError, ClusterError, OSError) as e:  # OSError: a member's control endpoint went away, a full disk
        found = os_problem(e) if isinstance(e, OSError) else None
        raise ScenarioError(str(e) if str(e).startswith("faults:") else f"{backend}: {found or e}") from None
    finally:
        with deferred_interrupts():
            if wire_tap is not None:
                wire_tap.stop()
            cluster.down()


def schedule_outcome(
    cluster: Cluster, sc: Scenario, out: Path, result: ScheduleResult, usage: dict[str, MemberUsage]
) -> RunOutcome:
    """What the runner observed of a schedule it ran on the cluster (outcome.json's content): its own `timeout`,
    late member actions, warnings, what the discard rules acted on. Read before the members stop."""
    handled = [f for f in cluster.chaos.faults() if f.handled] if result.planned else []
    bypass = cluster.chaos.queue_bypass() if result.planned else {}
    warnings = result.warnings + bypass_warnings(bypass)
    unknown = {m: b.unknown_shapes for m, b in bypass.items() if b.unknown_shapes}
    # a member without control runs its own workload: the timeout is the end of its run, not a violation
    ended = result.settled or not sc.system.control
    extra = [] if ended else [timeout_violation(_TIMEOUT_DETAIL.format(timeout=sc.timeout))]
    ran = {"name": sc.system.name, "stack": sc.stack}
    if sc.system.release:
        ran["release"] = sc.system.release
    return RunOutcome(out, not result.settled, extra, result.late, handled, warnings, usage, ran, unknown)


def start_wire_tap(cluster: Cluster, sc: Scenario, out: Path) -> WireTap | None:
    """The run's wire tap, where one can watch this cluster (a netns cluster of a system with a wire profile)."""
    from chaos.wiretap import WIRE_FILE
    from orchestration.backends.netns_tap import TapError, start_tap, tap_possible

    if not tap_possible(cluster, sc.system.wire):
        return None
    try:
        return start_tap(cluster, sc.system.wire, out / WIRE_FILE, max_seconds=sc.timeout + 120)  # type: ignore[arg-type]
    except TapError as e:
        raise ScenarioError(f"netns: {e}") from None


def member_usage(cluster: Cluster) -> dict[str, MemberUsage]:
    """Each live member's peak RSS and CPU time (its `stats` reply); a member that does not answer is left out."""
    usage: dict[str, MemberUsage] = {}
    for name in cluster.running():
        try:
            reply = cluster.control(name, "stats", timeout=5.0)
        except (OSError, RuntimeError):  # ClusterError is a RuntimeError
            continue
        if isinstance(reply.get("max_rss_kib"), int):
            usage[name] = {"max_rss_kib": reply["max_rss_kib"], "cpu_s": float(reply.get("cpu_s", 0.0))}
    return usage


def warning_lines(late: list[JsonObject], warnings: list[str]) -> list[str]:
    """What a run did not do as planned, one sentence each: `chaosbed run` prints them loudly, `matrix` per cell."""
    actions = [
        f"{e['kind']} {e.get('member', '')} planned at {e['at']} started {e['lag_ms']:g} ms late (the machine was too "
        "busy)"
        for e in late
    ]
    return actions + list(warnings)


def bypass_warnings(bypass: Mapping[str, QueueBypass]) -> list[str]:
    """A fault happens as planned or the run says it did not: packets that escaped the protocol-aware rules because
    a member's NFQUEUE handler fell behind or could not read them (NetnsFaultEngine.queue_bypass; the simulator
    judges every message)."""
    return [w for b in bypass.values() if (w := b.warning())]


def write_outcome(outcome: RunOutcome) -> None:
    """outcome.json in the run folder: the runner's own violations (read by the checker with the histories, so
    `chaosbed check` of the folder reports them too), late member actions, warnings, what discard rules acted on."""
    doc: OutcomeDoc = {
        "violations": outcome.extra_violations,
        "timed_out": outcome.timed_out,
        "late": outcome.late,
        "warnings": outcome.warnings,
        "handled": [f.to_json() for f in outcome.handled],
    }
    if outcome.system:
        doc["system"] = outcome.system
    if outcome.usage:
        doc["usage"] = outcome.usage
    if outcome.unknown_shapes:
        doc["unknown_shapes"] = outcome.unknown_shapes
    write_atomic(outcome.out / OUTCOME_FILE, json.dumps(doc, indent=1, default=str) + "\n")


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[None]:
    """SIGINT and SIGTERM wait until the block is done: taking a cluster down must not be cut short by a second
    Ctrl-C (a matrix cell gets one from the terminal and one from the matrix), or namespaces and rules stay behind.
    A signal that arrived meanwhile is raised afterwards. Only in the main thread (signals are handled there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, frame: got.append(signum)) for sig in SHIELDED}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if got:
            raise KeyboardInterrupt


def first_interrupt_only(signals: tuple[int, ...] = (signal.SIGINT,)) -> Callable[[], None]:
    """From now on the first of `signals` raises KeyboardInterrupt and later ones are ignored, so the clean-up that
    the first one starts is never cut short (an impatient second Ctrl-C, or the terminal's signal and the matrix's
    arriving apart under load: deferred_interrupts alone leaves a window between the raise and its block). Returns
    the function that restores the previous handlers. Only in the main thread (signals are handled there)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    seen: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        if not seen:
            seen.append(signum)
            raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, on_signal) for sig in signals}

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore


_TIMEOUT_DETAIL = "the run did not finish (all sent and quiet) within the scenario's timeout of {timeout:g}s"


def timeout_violation(detail: str) -> Violation:
    """The runner's own `timeout` violation (outcome.json): the cluster never became quiet; `detail` says within
    what."""
    return {
        "check": "timeout",
        "sender": None,
        "receiver": None,
        "conn_id": None,
        "seqno": None,
        "msg_id": None,
        "detail": detail,
    }
