"""`chaosbed fault ...`: network faults on a running cluster (`chaosbed up --backend netns`).

Every applied fault and every heal is appended to the cluster's faults.jsonl (next to its histories), so
`chaosbed check` judges a hand-driven session like a scenario run. `--for` starts a small detached timer process
that removes the fault when the time is up (its pid is kept with the faults, and `chaosbed down` stops it).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.markup import escape
from rich.table import Table

from chaos.nemesis import KINDS as NEMESES
from node.fault_kinds import DISCARD_ACTIONS
from orchestration.cli.options import CommandError, F, attach, cluster_option, console, duration_arg, fraction_arg
from orchestration.cli.output import describe

if TYPE_CHECKING:
    from chaos.netns_engine import NetnsFaultEngine
    from orchestration.cluster import Cluster
    from orchestration.fault_log import FaultLog

_FOR = click.option("--for", "for_", default=None, help="remove the fault again after this long, e.g. 5s")


def _members(value: str | None) -> list[str] | None:
    return [m.strip() for m in value.split(",") if m.strip()] if value else None


def _from_to(required: bool) -> Callable[[F], F]:
    def wrap(f: F) -> F:
        what = "" if required else " (default: every member)"
        f = click.option("--to", "to", required=required, help=f"receiving members, e.g. B or B,C{what}")(f)
        return click.option("--from", "from_", required=required, help=f"sending members, e.g. A or A,C{what}")(f)

    return wrap


def _chaos(label: str | None) -> tuple[Cluster, NetnsFaultEngine]:
    """The running cluster and its netns fault engine (`chaosbed fault` works on clusters of namespaces)."""
    from chaos.netns_engine import NetnsFaultEngine
    from orchestration.cluster import ClusterError

    cluster = attach(label)
    try:
        chaos = cluster.chaos
    except ClusterError as e:
        raise CommandError(str(e)) from None
    if not isinstance(chaos, NetnsFaultEngine):
        raise CommandError(f"the {cluster.backend_name} backend's faults are not in network namespaces")
    return cluster, chaos


def _apply(label: str | None, kind: str, args: Mapping[str, object], for_: str | None) -> None:
    from chaos.faults import ChaosError

    cluster, chaos = _chaos(label)
    refused = _refused(cluster, kind)
    if refused:
        raise CommandError(refused)
    duration = duration_arg(for_) if for_ else None
    try:
        record = chaos.add(kind, {k: v for k, v in args.items() if v is not None})
    except ChaosError as e:
        raise CommandError(str(e)) from None
    _log(cluster).fault(record, t=time.monotonic_ns(), duration=duration)
    console.print(f"{record.id}: {describe(record.fault)}")
    if duration is not None:
        timer = subprocess.Popen(
            _timer_argv(record.id, cluster.label, duration),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        chaos.add_timer(record.id, timer.pid)
        console.print(f"{record.id} heals in {for_} (timer pid {timer.pid})")


def _refused(cluster: Cluster, kind: str) -> str | None:
    """Why the cluster's system refuses this fault (a discard without a wire profile or over TCP), as a scenario
    file would."""
    from orchestration.systems import system_of
    from orchestration.systems.definition import fault_refusal

    return fault_refusal(system_of(cluster.spec.system), kind, cluster.spec.transport)


def _timer_argv(fault_id: str, label: str, duration: float) -> list[str]:
    """`chaosbed fault heal ID --after DURATION`, run detached (the label in its command line marks it as ours)."""
    heal = ["fault", "heal", fault_id, "--cluster", label, "--after", f"{duration}", "--quiet"]
    return [sys.executable, "-m", "orchestration", *heal]


def _log(cluster: Cluster) -> FaultLog:
    """The cluster's faults.jsonl, next to its histories."""
    from orchestration.fault_log import FILE, FaultLog

    Path(cluster.workdir).mkdir(parents=True, exist_ok=True)
    return FaultLog(Path(cluster.workdir) / FILE)


@click.group()
def fault() -> None:
    """Network faults on a running netns cluster: partition, split, loss, delay, discard, heal, list."""


@fault.command()
@_from_to(required=True)
@click.option("--one-way", is_flag=True, help="only --to stops hearing --from (default: both ways)")
@_FOR
@cluster_option
def partition(from_: str, to: str, one_way: bool, for_: str | None, label: str | None) -> None:
    """Members in --to stop hearing members in --from (and the reverse unless --one-way)."""
    _apply(label, "partition", {"from": _members(from_), "to": _members(to), "one_way": one_way}, for_)


@fault.command()
@click.argument("groups", nargs=-1, required=True)
@_FOR
@cluster_option
def split(groups: tuple[str, ...], for_: str | None, label: str | None) -> None:
    """Partition the cluster into GROUPS: `split A,B C,D`."""
    _apply(label, "split", {"groups": [_members(g) for g in groups]}, for_)


@fault.command()
@click.argument("probability")
@_from_to(required=False)
@_FOR
@cluster_option
def loss(probability: str, from_: str | None, to: str | None, for_: str | None, label: str | None) -> None:
    """Drop PROBABILITY (20% or 0.2) of the packets on each link."""
    args = {"from": _members(from_), "to": _members(to), "probability": fraction_arg(probability)}
    _apply(label, "loss", args, for_)


@fault.command()
@click.argument("delay")
@click.option("--jitter", default=None, help="uniform extra delay, e.g. 10ms")
@_from_to(required=False)
@_FOR
@cluster_option
def delay(
    delay: str, jitter: str | None, from_: str | None, to: str | None, for_: str | None, label: str | None
) -> None:
    """Add DELAY (like 50ms) to each packet on each link (netem, or NFQUEUE held verdicts without netem)."""
    args = {"from": _members(from_), "to": _members(to), "delay": duration_arg(delay)}
    if jitter:
        args["jitter"] = duration_arg(jitter)
    _apply(label, "delay", args, for_)


@fault.command()
@click.argument("probability")
@_from_to(required=False)
@_FOR
@cluster_option
def reorder(probability: str, from_: str | None, to: str | None, for_: str | None, label: str | None) -> None:
    """Hold back PROBABILITY of the packets on each link so later ones overtake them."""
    args = {"from": _members(from_), "to": _members(to), "probability": fraction_arg(probability)}
    _apply(label, "reorder", args, for_)


@fault.command()
@click.argument("probability")
@_from_to(required=False)
@_FOR
@cluster_option
def duplicate(probability: str, from_: str | None, to: str | None, for_: str | None, label: str | None) -> None:
    """Deliver PROBABILITY of the packets on each link twice."""
    args = {"from": _members(from_), "to": _members(to), "probability": fraction_arg(probability)}
    _apply(label, "duplicate", args, for_)


@fault.command()
@click.argument("match", required=False)
@click.option("--list", "list_rules", is_flag=True, help="list the headers and fields a rule can name, then exit")
@click.option("--system", default=None, help="with --list: a system's names (default: the running cluster's)")
@_from_to(required=False)
@click.option("--count", type=click.IntRange(1), default=None, help="act on the first N matching messages per link")
@click.option("--probability", default=None, help="act on this share of the matching messages, e.g. 50%")
@click.option("--action", type=click.Choice(DISCARD_ACTIONS), default="drop")
@click.option("--delay", "delay_", default=None, help="for --action delay, e.g. 50ms")
@_FOR
@cluster_option
def discard(
    match: str | None,
    list_rules: bool,
    system: str | None,
    from_: str | None,
    to: str | None,
    count: int | None,
    probability: str | None,
    action: str,
    delay_: str | None,
    for_: str | None,
    label: str | None,
) -> None:
    """A protocol-aware rule on messages: `discard 'UNICAST3.ACK(seqno=50)' --from B --to A --count 1`; on a JGroups
    cluster in JGroups' names: `discard 'UNICAST2.DATA(seqno=6)'` (2.12), `discard 'NAKACK4.ACK()'` (5.x).
    `discard --list`: the names of the cluster's system."""
    if list_rules:
        _list_rules(system, label)
        return
    if not match:
        raise click.UsageError("give MATCH, e.g. 'UNICAST3.ACK(seqno=50)' (`chaosbed fault discard --list` lists them)")
    args: dict[str, object] = {"from": _members(from_), "to": _members(to), "match": match, "action": action}
    args["count"] = count
    if probability is not None:
        args["probability"] = fraction_arg(probability)
    if delay_ is not None:
        args["delay"] = duration_arg(delay_)
    _apply(label, "discard", args, for_)


def _list_rules(system_name: str | None, label: str | None) -> None:
    """The headers and fields a discard rule can name on a system (--system) or the running cluster's."""
    from chaos.profiles import profile
    from orchestration.systems import SYSTEMS, named, system_of

    if system_name is not None:
        chosen = named(system_name)
        if chosen is None:
            raise CommandError(f"unknown system {system_name!r}; named systems: {', '.join(SYSTEMS)}")
    else:
        chosen = system_of(attach(label).spec.system)
    if chosen.wire == "none":
        raise CommandError(f"system {chosen.name!r} has no wire profile: no discard rules")
    if chosen.transport == "tcp":
        from orchestration.systems.definition import TCP_DISCARD

        raise CommandError(f"system {chosen.name!r} runs over tcp: no discard rules ({TCP_DISCARD})")
    console.print(
        f"discard rules on system {chosen.name} (wire profile {chosen.wire}): PROTOCOL.TYPE(field=value, ...)"
    )
    for name in profile(chosen.wire).rule_names():
        console.print(f"  {name}", markup=False)


@fault.command()
@click.argument("ids", nargs=-1)
@click.option("--after", type=float, default=0.0, hidden=True, help="wait this many seconds first (for --for)")
@click.option("--quiet", is_flag=True, hidden=True)
@cluster_option
def heal(ids: tuple[str, ...], after: float, quiet: bool, label: str | None) -> None:
    """Remove the faults IDS (see `fault list`), or every network fault."""
    from chaos.faults import ChaosError

    if after > 0:
        time.sleep(after)  # the timer of a `--for`: this process exists to wait
    cluster, chaos = _chaos(label)
    try:
        gone = chaos.remove(list(ids)) if ids else chaos.heal()
    except ChaosError as e:
        raise CommandError(str(e)) from None
    _log(cluster).heal(list(ids) if ids else None, t=time.monotonic_ns(), seed=0)
    if not quiet:
        healed = ", ".join(f"{f.id} {describe(f.fault)}" for f in gone)
        console.print(f"healed: {healed or 'nothing to heal'}")


@fault.command(name="list")
@cluster_option
def list_(label: str | None) -> None:
    """The network faults in force, with what the NFQUEUE handler did for each."""
    _, chaos = _chaos(label)
    faults = chaos.faults()
    if not faults:
        console.print("no network faults in force")
        return
    table = Table("id", "fault", "since", "handled")
    for f in faults:
        handled = ", ".join(f"{k} {v}" for k, v in (f.handled or {}).items() if v) or "-"
        table.add_row(f.id, describe(f.fault), f"{time.time() - f.since:.1f}s ago", handled)
    console.print(table)
    for member, counts in chaos.kernel_counters().items():
        acted = ", ".join(f"{k} {v}" for k, v in counts.items() if v)
        if acted:
            console.print(f"kernel rules at {member}: {acted} packets")
    for bypass in chaos.queue_bypass().values():
        if (warning := bypass.warning()) is not None:
            console.print(f"[bold red]WARNING[/bold red]: {escape(warning)}", soft_wrap=True)


@click.command()
@click.argument("kind", type=click.Choice(["list", *NEMESES]))
@click.option("--members", "-n", default="3", show_default=True, help="a number, or names like A,B,C")
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--start", default="1s", show_default=True)
@click.option("--interval", default="4s", show_default=True)
@click.option("--for", "for_", default="2s", show_default=True, help="how long each round's faults last")
@click.option("--rounds", type=click.IntRange(1), default=3, show_default=True)
def nemesis(kind: str, members: str, seed: int, start: str, interval: str, for_: str, rounds: int) -> None:
    """Print a seeded fault schedule (KIND, or `list` for the kinds) and the [[nemesis]] table that runs it."""
    from chaos.nemesis import NemesisError, describe, schedule

    if kind == "list":
        for name, what in NEMESES.items():
            console.print(f"{name:16} {what}")
        return
    names = [chr(ord("A") + i) for i in range(int(members))] if members.isdigit() else _members(members) or []
    try:
        faults = schedule(kind, names, seed=seed, start=start, interval=interval, duration=for_, rounds=rounds)
    except NemesisError as e:
        raise CommandError(str(e)) from None
    for line in describe(faults):
        console.print(line)
    console.print(
        f'\nin a scenario file:\n[[nemesis]]\nkind = "{kind}"\nstart = "{start}"\ninterval = "{interval}"\n'
        f'for = "{for_}"\nrounds = {rounds}\nseed = {seed}',
        markup=False,
    )
