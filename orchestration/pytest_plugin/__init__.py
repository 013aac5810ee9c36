"""The chaosbed pytest plugin (entry point `chaosbed`): users write their own chaos tests (docs/pytest.md).

- `@pytest.mark.chaosbed(members=3, stack="unicast3+nakack2", backend=None, transport="udp", properties=None,
  seed=0)` describes the test's cluster.
- `chaos_cluster`: that cluster, started (and formed into one group on membership stacks). Every fault done through
  it (`cluster.chaos.add/remove/heal`, `kill`, `restart`, `pause`, `resume`, `leave`, the control commands `close`
  and `set`) goes to `faults.jsonl` next to its histories in the test's tmp folder. It is taken down after the
  test, also when the test fails or is interrupted, and the test fails if anything of it is left (namespaces,
  processes, state).
- `history_check(cluster, fifo=True, ...)`: waits until the cluster is quiet (the runner's `wait_quiet`), stops the
  members, lays the folder out as a run folder and checks it with `analysis.pipeline.analyze`; a violation fails the
  test with one line per violation and the command that replays the case.

Backend: the marker's `backend` wins; else `--chaosbed-backend`, else the ini option `chaosbed_backend`, else
`CHAOSBED_BACKEND`, else netns when root with the `ip` tool, else process. A backend that cannot run here skips.

Spark: the checks need Spark; the plugin sets CHAOSBED_SPARK=auto (unless the user set it, or `--chaosbed-spark`)
so every check of a session (all xdist workers) uses one warm Spark Connect service, started on first use, and the
controller stops it at the end of the session if the session started it.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

from orchestration.cluster import Cluster  # standard library only: cheap in every pytest session

if TYPE_CHECKING:
    from analysis.pipeline import Analysis
    from analysis.verdict import Violation
    from orchestration.cluster import ClusterSpec

MARKER = "chaosbed"
MARKER_HELP = (
    "chaosbed(members=3, stack='unicast3+nakack2', backend=None, transport='udp', properties=None, seed=0): the "
    "cluster of the chaos_cluster fixture (backend None: --chaosbed-backend, else netns as root, else process)"
)
MARKER_DEFAULTS: dict[str, Any] = {
    "members": 3,
    "stack": "unicast3+nakack2",
    "backend": None,
    "transport": "udp",
    "properties": None,
    "seed": 0,
}
FORM_TIMEOUT = 30.0  # seconds for a membership stack's members to form one view at the start
SHOWN = 30  # violations in a failure message; verdict.json in the run folder has them all
FAULTS_FILE = "faults.jsonl"
RUN_FOLDER = "chaosbed"  # the cluster's run folder under the test's tmp_path
_SPARK_BEFORE = pytest.StashKey[int | None]()  # the service's pid when the session began


# --- options, marker, session ----------------------------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("chaosbed", "chaosbed chaos tests")
    group.addoption(
        "--chaosbed-backend",
        default=None,
        metavar="NAME",
        help="backend for chaos_cluster tests whose marker names none: sim | process | netns | docker "
        "(default: the ini option chaosbed_backend, then CHAOSBED_BACKEND, then netns as root, else process)",
    )
    group.addoption(
        "--chaosbed-spark",
        default=None,
        metavar="WHERE",
        help="where history_check runs Spark: auto (a warm local Spark Connect service, started on first use and "
        "stopped at the end of the session if it started it) | local | sc://host:port | spark://master "
        "(default: CHAOSBED_SPARK, else auto)",
    )
    parser.addini("chaosbed_backend", "default backend of chaos_cluster tests (as --chaosbed-backend)", default="")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)
    spark = config.getoption("chaosbed_spark")
    if spark:
        os.environ["CHAOSBED_SPARK"] = spark
    else:
        os.environ.setdefault("CHAOSBED_SPARK", "auto")
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist) owns the service's lifetime
        config.stash[_SPARK_BEFORE] = _spark_pid()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stops the warm Spark service at the end of the session if this session started it: one runs now that did
    not run (with that pid) when the session began. Only the controller does this: xdist workers end before it,
    and each of them may have been the one that started the service for all."""
    config = session.config
    client = sys.modules.get("analysis.spark")  # imported only where a test checked histories
    if client is not None:
        client.stop_spark()  # this process's client (or local session) first: the server may go next
    if hasattr(config, "workerinput") or _SPARK_BEFORE not in config.stash:
        return
    service = _spark_service()
    now = _spark_pid()
    if service is None or now is None or now == config.stash[_SPARK_BEFORE]:
        return
    in_flight = getattr(service, "_live_leases", None)  # checks of other sessions holding the service right now
    if in_flight is not None and in_flight(service.service_dir()):
        return  # theirs to finish: the service's idle timeout stops it later
    service.stop()


def _spark_service() -> Any:
    """analysis.spark_service (standard library only at import), or None where chaosbed lacks it."""
    try:
        from analysis import spark_service
    except ImportError:
        return None
    return spark_service


def _spark_pid() -> int | None:
    """The pid of the running warm Spark service of this state root, or None."""
    service = _spark_service()
    info = service.status() if service is not None else None
    return info.pid if info is not None else None


# --- which cluster, on which backend ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterOptions:
    """The `chaosbed` marker's arguments with their defaults."""

    members: int | list[str]
    stack: str
    backend: str | None
    transport: str
    properties: dict[str, dict[str, Any]] | None
    seed: int


def marker_options(node: pytest.Item) -> ClusterOptions:
    """The closest `chaosbed` marker's arguments (defaults without one); unknown arguments are an error."""
    marker = node.get_closest_marker(MARKER)
    kwargs = dict(marker.kwargs) if marker else {}
    if marker and marker.args:
        _usage(f"the chaosbed marker of {node.nodeid} takes keyword arguments only: {MARKER_HELP}")
    unknown = sorted(set(kwargs) - set(MARKER_DEFAULTS))
    if unknown:
        _usage(
            f"the chaosbed marker of {node.nodeid}: unknown argument(s) {', '.join(unknown)}; "
            f"it takes {', '.join(MARKER_DEFAULTS)}"
        )
    return ClusterOptions(**(MARKER_DEFAULTS | kwargs))


def _usage(message: str) -> NoReturn:
    """A wrong marker argument or backend name: the test errors with the message (the session goes on)."""
    pytest.fail(message, pytrace=False)


def choose_backend(config: pytest.Config, marked: str | None) -> str:
    """The marker's backend, else --chaosbed-backend, else the ini option, else CHAOSBED_BACKEND, else netns when it
    can run here, else process."""
    chosen = (
        marked
        or config.getoption("chaosbed_backend", None)
        or config.getini("chaosbed_backend")
        or os.environ.get("CHAOSBED_BACKEND")
    )
    if chosen:
        return str(chosen)
    return "netns" if netns_problem() is None else "process"


def netns_problem() -> str | None:
    """Why the netns backend cannot run here (None if it can)."""
    from orchestration.backends.netns import check_netns_available
    from orchestration.cluster import ClusterError

    try:
        check_netns_available()
    except ClusterError as e:
        return str(e)
    return None


def backend_problem(backend: str) -> str | None:
    """Why `backend` cannot run here, as a skip reason; an error for a name no version of chaosbed knows."""
    from orchestration.backends import BACKENDS

    if backend not in BACKENDS:
        _usage(f"unknown chaosbed backend {backend!r}: {' | '.join(BACKENDS)}")
    if backend == "netns":
        problem = netns_problem()
        return f"netns: {problem}" if problem else None
    if backend == "docker":
        problem = docker_problem()
        return f"docker: {problem}" if problem else None
    return None


def docker_problem() -> str | None:
    """Why the docker backend cannot run here: it needs root (faults go into the containers' namespaces) and an
    engine that runs, or one this session can start (root with Debian's docker.io: the session then stops it)."""
    from orchestration.host import docker_engine

    if os.geteuid() != 0:
        return "the docker backend needs root (it applies faults inside the containers' network namespaces)"
    return docker_engine.unavailable_reason()


@pytest.fixture(scope="session")
def chaosbed_docker_engine() -> Iterator[Any]:
    """The Docker engine of this session's docker clusters: the running one, or one started for the session and
    stopped when the last session (xdist worker) using it ends."""
    from orchestration.host import docker_engine

    with docker_engine.engine() as client:
        yield client


def scenario_raw(spec: ClusterSpec, name: str, checks: dict[str, Any] | None = None) -> dict[str, Any]:
    """The cluster (and checks) as a scenario file's table: validated by orchestration.scenario.parse and written
    as the run folder's scenario.toml by the runner's writer, so a test's folder reads like a `chaosbed run`."""
    cluster: dict[str, Any] = {"members": list(spec.members), "stack": spec.stack, "transport": spec.transport}
    if spec.properties:
        cluster["properties"] = spec.properties
    raw: dict[str, Any] = {"name": name, "seed": spec.seed, "cluster": cluster}
    if checks is not None:
        raw["checks"] = checks
    return raw


def cluster_spec(options: ClusterOptions, backend: str, name: str) -> ClusterSpec:
    """The ClusterSpec of the marker's arguments, validated as a scenario's [cluster] table is."""
    from orchestration.cluster import ClusterSpec
    from orchestration.scenario import ScenarioError, parse

    members = options.members
    raw = scenario_raw(
        ClusterSpec([], options.stack, options.transport, dict(options.properties or {}), backend, options.seed),
        name,
    )
    raw["cluster"]["members"] = members
    try:
        sc = parse(raw)
    except ScenarioError as e:
        _usage(f"the chaosbed marker of {name}: {e}")
    return ClusterSpec(sc.members, sc.stack, sc.transport, sc.properties, backend, seed=sc.seed)


# --- a cluster that records its faults -------------------------------------------------------------------------------


class RecordingChaos:
    """A cluster's fault table that appends each fault and heal to the cluster's faults.jsonl (the records of
    `chaosbed fault`: chaos.engine.fault_event / heal_event, `t` on the cluster's clock)."""

    def __init__(self, inner: Any, cluster: Any) -> None:
        self._inner = inner
        self._cluster = cluster

    def add(self, kind: str, args: dict[str, Any], *, seed: int | None = None) -> dict[str, Any]:
        from chaos.engine import fault_event

        t = self._cluster.clock.now_ns()  # from before: the fault may act while it is being installed
        record = self._inner.add(kind, args, seed=self._cluster.spec.seed if seed is None else seed)
        self._cluster.record_fault({**fault_event(record), "t": t})
        return record

    def remove(self, ids: list[str]) -> list[dict[str, Any]]:
        from chaos.engine import heal_event

        gone = self._inner.remove(ids)
        seed, t = self._cluster.spec.seed, self._cluster.clock.now_ns()
        self._cluster.record_fault({**heal_event(list(ids), seed), "t": t})
        return gone

    def heal(self) -> list[dict[str, Any]]:
        from chaos.engine import heal_event

        gone = self._inner.heal()  # `t` from after: the faults ended by then
        self._cluster.record_fault({**heal_event(None, self._cluster.spec.seed), "t": self._cluster.clock.now_ns()})
        return gone

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class RecordingCluster(Cluster):
    """Mixed in before a backend's class (recording_class): member faults and the fault table's changes go to
    faults.jsonl, so the checker knows who was killed, restarted or left and when the network healed."""

    @property
    def faults_file(self) -> Path:
        return Path(self.workdir) / FAULTS_FILE

    def record_fault(self, event: dict[str, Any]) -> None:
        from chaos.engine import append_log

        append_log(self.faults_file, event)

    def record_start(self) -> None:
        """The `start` line (SCENARIO.md "Fault timing"): the clock, seed and backend of the test's run."""
        self.faults_file.unlink(missing_ok=True)
        self.record_fault(
            {"event": "start", "t": self.clock.now_ns(), "seed": self.spec.seed, "backend": self.backend_name}
        )

    def _member_fault(self, kind: str, name: str, action: Callable[[], None]) -> None:
        t = self.clock.now_ns()  # when it started, as the scheduler logs member actions
        action()
        self.record_fault({"t": t, "event": "fault", "seed": self.spec.seed, "kind": kind, "member": name})

    def kill(self, name: str) -> None:
        self._member_fault("kill", name, lambda: super(RecordingCluster, self).kill(name))

    def restart(self, name: str, timeout: float = 30.0) -> None:
        self._member_fault("restart", name, lambda: super(RecordingCluster, self).restart(name, timeout))

    def pause(self, name: str) -> None:
        self._member_fault("pause", name, lambda: super(RecordingCluster, self).pause(name))

    def resume(self, name: str) -> None:
        self._member_fault("resume", name, lambda: super(RecordingCluster, self).resume(name))

    def leave(self, name: str) -> None:
        self._member_fault("leave", name, lambda: super(RecordingCluster, self).leave(name))

    def control(self, name: str, cmd: str, *, timeout: float = 10.0, **args: Any) -> dict[str, Any]:
        """Closing a connection and setting a property are member faults of scenario files: recorded as such."""
        t = self.clock.now_ns()
        reply = super().control(name, cmd, timeout=timeout, **args)
        fault: dict[str, Any] | None = None
        if cmd == "close":
            fault = {"kind": "close-connection", "member": name, "peer": args.get("peer")}
        elif cmd == "set":
            prop = f"{args.get('protocol')}.{args.get('property')}"
            fault = {"kind": "set", "member": name, "property": prop, "value": args.get("value")}
        if fault is not None:
            self.record_fault({"t": t, "event": "fault", "seed": self.spec.seed, **fault})
        return reply

    @property
    def chaos(self) -> RecordingChaos:
        return RecordingChaos(super().chaos, self)


@functools.cache
def recording_class(cls: type) -> type:
    """The backend's Cluster class with RecordingCluster mixed in (still an instance of the backend's class)."""
    return type(f"Recording{cls.__name__}", (RecordingCluster, cls), {"__doc__": cls.__doc__})


# --- teardown ----------------------------------------------------------------------------------------------------


def leftovers(cluster: Cluster) -> list[str]:
    """What of a taken-down cluster is still there: namespaces of its label, processes naming its label (members,
    fault handlers, timers), its state folder."""
    found = []
    if shutil.which("ip") is not None:
        from orchestration.backends.netns import list_namespaces

        spaces = [ns for ns in list_namespaces() if ns.startswith(f"{cluster.label}-")]
        if spaces:
            found.append(f"namespaces {', '.join(spaces)}")
    procs = processes_naming(cluster.label)
    if procs:
        found.append("processes " + "; ".join(f"{pid} ({cmd[:100]})" for pid, cmd in procs))
    if cluster.state_dir.exists():
        found.append(f"state {cluster.state_dir}")
    return found


def processes_naming(label: str) -> list[tuple[int, str]]:
    """(pid, command line) of every process but this one whose command line contains `label`."""
    found = []
    needle = label.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if needle in cmdline:
            found.append((int(entry.name), cmdline.replace(b"\0", b" ").decode(errors="replace").strip()))
    return found


def take_down(cluster: Cluster) -> None:
    """Takes the cluster down (a second Ctrl-C waits until that is done) and fails if anything is left."""
    from orchestration.runner import deferred_interrupts

    with deferred_interrupts():
        cluster.down()
    left = leftovers(cluster)
    if left:
        pytest.fail(f"chaosbed: cluster {cluster.label} left behind: " + "; ".join(left), pytrace=False)


# --- fixtures ------------------------------------------------------------------------------------------------------


@pytest.fixture
def chaos_cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    """A started cluster as the `chaosbed` marker describes it (see the module's docstring)."""
    from node.stack import has_membership
    from orchestration.backends import backend_class
    from orchestration.cluster import ClusterError

    options = marker_options(request.node)
    backend = choose_backend(request.config, options.backend)
    problem = backend_problem(backend)
    if problem:
        pytest.skip(problem)
    spec = cluster_spec(options, backend, request.node.nodeid)
    if backend == "docker":
        request.getfixturevalue("chaosbed_docker_engine")
    cluster = recording_class(backend_class(backend))(spec, workdir=tmp_path / RUN_FOLDER)
    try:
        try:
            cluster.start()
            if has_membership(spec.stack):
                cluster.wait_for_view(timeout=FORM_TIMEOUT)
        except ClusterError as e:
            pytest.fail(f"chaosbed: the {backend} cluster did not start: {e}", pytrace=False)
        cluster.record_start()
        yield cluster
    finally:
        take_down(cluster)


@pytest.fixture
def history_check(request: pytest.FixtureRequest) -> Callable[..., Analysis]:
    """`history_check(cluster, fifo=True, exactly_once=True, complete=True, no_phantoms=True, views_converge="10s",
    delivered_within=None, control_per_heal=None, quiet_within="30s")`: see check_history."""
    return functools.partial(check_history, replay=replay_command(request.config, request.node.nodeid))


def replay_command(config: pytest.Config, nodeid: str, backend: str | None = None) -> str:
    """The command that runs this one test again (`{backend}` is filled in by check_history)."""
    cmd = f"pytest {shlex.quote(nodeid)} --chaosbed-backend={backend or '{backend}'}"
    root = config.rootpath
    return cmd if Path.cwd() == root else f"cd {shlex.quote(str(root))} && {cmd}"


# --- the check -------------------------------------------------------------------------------------------------------


@functools.cache
def checked_run_class() -> type[Analysis]:
    """CheckedRun: analysis.pipeline.Analysis of the one run folder a history_check made, with its figures at hand
    (made on first use: the plugin loads in every pytest session, Spark and Arrow only where a test checks)."""
    from analysis.pipeline import Analysis

    class CheckedRun(Analysis):
        @property
        def path(self) -> Path:
            return self.runs[0].path

        @property
        def run_stats(self) -> dict[str, Any]:
            """The run's `stats` of verdict.json: deliveries, duplicate_deliveries, latency_ms, members, ..."""
            return self.stats[self.runs[0].name]

        @property
        def violations(self) -> list[Violation]:
            return self.results[self.runs[0].name].violations

    return CheckedRun


def checks_table(
    *,
    fifo: bool,
    exactly_once: bool,
    complete: bool,
    no_phantoms: bool,
    views_converge: str | float | bool | None,
    delivered_within: str | float | bool | None,
    control_per_heal: dict[str, int] | None,
) -> dict[str, Any]:
    """history_check's arguments as a scenario's [checks] table (None switches a check off)."""
    table: dict[str, Any] = {
        "fifo": fifo,
        "exactly_once": exactly_once,
        "complete": complete,
        "no_phantoms": no_phantoms,
        "views_converge": False if views_converge is None else views_converge,
    }
    if delivered_within not in (None, False):
        table["delivered_within"] = delivered_within
    if control_per_heal:
        table["control_per_heal"] = dict(control_per_heal)
    return table


def check_history(
    cluster: Cluster,
    *,
    fifo: bool = True,
    exactly_once: bool = True,
    complete: bool = True,
    no_phantoms: bool = True,
    views_converge: str | float | bool | None = "10s",
    delivered_within: str | float | bool | None = None,
    control_per_heal: dict[str, int] | None = None,
    quiet_within: str | float = "30s",
    replay: str | None = None,
) -> Analysis:
    """Ends the cluster's run and checks its histories: waits (at most `quiet_within`) until every workload is sent
    and nothing is unacknowledged or missing (orchestration.schedule.wait_quiet; a cluster that does not get quiet
    is a `timeout` violation, as in `chaosbed run`), stops the members (each history ends with `stop`), writes
    scenario.toml with the [checks], outcome.json and verdict.json into the cluster's folder and runs the analysis
    pipeline on it. Fails the test with one line per violation; returns the analysis when every check held."""
    from analysis.config import InputError, parse_duration
    from analysis.pipeline import SparkUnavailable, analyze
    from analysis.verdict import write_verdict
    from orchestration.runner import RunOutcome, scenario_toml, timeout_violation, write_outcome
    from orchestration.scenario import ScenarioError, parse
    from orchestration.schedule import wait_quiet

    checks = checks_table(
        fifo=fifo,
        exactly_once=exactly_once,
        complete=complete,
        no_phantoms=no_phantoms,
        views_converge=views_converge,
        delivered_within=delivered_within,
        control_per_heal=control_per_heal,
    )
    out = Path(cluster.workdir)
    try:
        sc = parse(scenario_raw(cluster.spec, _run_name(out), checks))
    except ScenarioError as e:
        raise ValueError(f"history_check: {e}") from None
    wait = parse_duration(quiet_within, "history_check: quiet_within")
    extra = []
    if cluster.running():
        now = cluster.clock.now_ns()
        settled = wait_quiet(cluster, now + round(wait * 1e9), views_wait_after(out / FAULTS_FILE, sc.checks, now))
        cluster.stop_members()
        if not settled:
            extra.append(
                timeout_violation(
                    "the cluster did not become quiet (every workload sent, nothing unacknowledged or missing) "
                    f"within history_check's quiet_within of {wait:g}s"
                )
            )
        write_outcome(RunOutcome(out, not settled, extra))
    (out / "history").mkdir(parents=True, exist_ok=True)
    (out / "scenario.toml").write_text(scenario_toml(sc))
    try:
        analysis = analyze(out)
    except (InputError, SparkUnavailable) as e:
        pytest.fail(f"chaosbed: the histories in {out} could not be checked: {e}", pytrace=False)
    result: Any = checked_run_class()(**{f.name: getattr(analysis, f.name) for f in fields(analysis)})
    write_verdict(out / "verdict.json", result.violations, result.run_stats)
    if result.violations:
        pytest.fail(failure_message(result, cluster, replay), pytrace=False)
    return result


def views_wait_after(faults_file: Path, checks: dict[str, Any], now: int) -> int | None:
    """Until when a quiet cluster also waits for its views to agree (orchestration.schedule.wait_quiet): the last
    heal in faults.jsonl (now, without faults) plus the views_converge bound; None when that check is off or a
    fault is still in force (the checker does not check the views then)."""
    from analysis.config import DEFAULT_VIEWS_BOUND
    from analysis.membership import NEVER, fault_intervals, read_faults

    bound = checks.get("views_converge", DEFAULT_VIEWS_BOUND)
    if bound is False:
        return None
    faults = fault_intervals(read_faults(faults_file)[0])
    heal = max((f.end for f in faults), default=now)
    return None if heal == NEVER else heal + round(float(bound) * 1e9)


def _run_name(out: Path) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", out.parent.name) or "test"


def violation_line(v: Violation) -> str:
    """One violation: check, sender, receiver, seqno (and connection, message), then the checker's sentence."""
    where = f"sender={v.sender or '-'} receiver={v.receiver or '-'} seqno={'-' if v.seqno is None else v.seqno}"
    extra = " ".join(f"{k}={x}" for k, x in (("kind", v.kind), ("conn_id", v.conn_id), ("msg_id", v.msg_id)) if x)
    return f"  {v.check}: {where}" + (f" {extra}" if extra else "") + f": {v.detail}"


def failure_message(result: Any, cluster: Cluster, replay: str | None) -> str:
    spec = cluster.spec
    shown = result.violations[:SHOWN]
    lines = [
        f"chaosbed: {len(result.violations)} violation(s) in the histories of {len(spec.members)} members "
        f"({spec.stack}, {spec.transport}) on {cluster.backend_name}:",
        *map(violation_line, shown),
    ]
    if len(result.violations) > len(shown):
        lines.append(f"  ... and {len(result.violations) - len(shown)} more: see verdict.json")
    lines.append(f"run folder: {result.path} (verdict.json; `chaosbed check {result.path}` draws report.html)")
    if replay:
        lines.append(f"replay: {replay.replace('{backend}', cluster.backend_name)}")
    return "\n".join(lines)
