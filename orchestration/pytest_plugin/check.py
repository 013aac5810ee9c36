"""`history_check`: ends a test's run, lays its folder out as a run folder and checks it with the analysis pipeline;
a violation fails the test with one line per violation and the command that replays it."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from orchestration.cluster import Cluster
from orchestration.fault_log import FILE as FAULTS_FILE
from orchestration.pytest_plugin.marker import scenario_raw

if TYPE_CHECKING:
    from analysis.verdict import Violation
    from orchestration.pytest_plugin.checked_run import CheckedRun
    from orchestration.scenario import TomlTable

SHOWN = 30  # violations in a failure message; verdict.json in the run folder has them all


def replay_command(config: pytest.Config, nodeid: str, backend: str | None = None) -> str:
    """The command that runs this one test again (`{backend}` is filled in by check_history)."""
    cmd = f"pytest {shlex.quote(nodeid)} --chaosbed-backend={backend or '{backend}'}"
    root = config.rootpath
    return cmd if Path.cwd() == root else f"cd {shlex.quote(str(root))} && {cmd}"


def checks_table(
    *,
    fifo: bool,
    exactly_once: bool,
    complete: bool,
    no_phantoms: bool,
    views_converge: str | float | bool | None,
    delivered_within: str | float | bool | None,
    control_per_heal: dict[str, int] | None,
) -> TomlTable:
    """history_check's arguments as a scenario's [checks] table (None switches a check off)."""
    table: TomlTable = {
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
) -> CheckedRun:
    """Ends the cluster's run and checks its histories: waits (at most `quiet_within`) until every workload is sent,
    every message delivered, nothing missing and no sender retransmitting (orchestration.schedule.wait_quiet; a
    cluster that does not get quiet is a `timeout` violation, as in `chaosbed run`), stops the members (each history
    ends with `stop`), writes scenario.toml with the [checks], outcome.json and verdict.json into the cluster's
    folder and runs the analysis pipeline on it. Fails the test with one line per violation; returns the analysis
    when every check held."""
    from analysis.config import InputError, parse_duration
    from analysis.pipeline import SparkUnavailable, analyze
    from analysis.verdict import write_verdict
    from orchestration.pytest_plugin.checked_run import CheckedRun
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
                    "the cluster did not become quiet (every workload sent and delivered, nothing missing, no "
                    f"retransmission) within history_check's quiet_within of {wait:g}s"
                )
            )
        write_outcome(RunOutcome(out, not settled, extra))
    (out / "history").mkdir(parents=True, exist_ok=True)
    (out / "scenario.toml").write_text(scenario_toml(sc))
    try:
        analysis = analyze(out)
    except (InputError, SparkUnavailable) as e:
        pytest.fail(f"chaosbed: the histories in {out} could not be checked: {e}", pytrace=False)
    result = CheckedRun(**{f.name: getattr(analysis, f.name) for f in fields(analysis)})
    write_verdict(out / "verdict.json", result.violations, result.run_stats)
    if result.violations:
        pytest.fail(failure_message(result, cluster, replay), pytrace=False)
    return result


def views_wait_after(faults_file: Path, checks: Mapping[str, object], now: int) -> int | None:
    """Until when a quiet cluster also waits for its views to agree (orchestration.schedule.wait_quiet): the last
    heal in faults.jsonl (now, without faults) plus the views_converge bound; None when that check is off or a
    fault is still in force (the checker does not check the views then)."""
    from analysis.config import DEFAULT_VIEWS_BOUND
    from analysis.membership import NEVER, fault_intervals, read_faults

    bound = checks.get("views_converge", DEFAULT_VIEWS_BOUND)
    if bound is False:
        return None
    if not isinstance(bound, (int, float)):  # orchestration.scenario.parse makes it seconds (or false)
        raise TypeError(f"checks.views_converge must be seconds or false, not {bound!r}")
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


def failure_message(result: CheckedRun, cluster: Cluster, replay: str | None) -> str:
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
