"""`chaosbed systems` (what members can run: the registry, orchestration/systems/) and `chaosbed conform SYSTEM` or
`chaosbed conform -- COMMAND ...` (the contracts' checklist against a system, orchestration/systems/conform.py)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.markup import escape
from rich.table import Column, Table

from orchestration.cli.options import console, duration_arg

if TYPE_CHECKING:
    from orchestration.scenario import TomlTable
    from orchestration.systems import System
    from orchestration.systems.conform import Item

CONFORM_BACKENDS = click.Choice(["process", "netns", "docker"])


@click.command()
def systems() -> None:
    """List the systems a cluster's members can run: chaosbed's own and the named foreign ones."""
    from orchestration.systems import SYSTEMS, WIRE_PROFILES
    from orchestration.systems.definition import SystemProblem
    from orchestration.systems.user import user_systems

    try:
        own = user_systems()
    except SystemProblem as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(2)
    every = [*SYSTEMS.values(), *own]
    table = Table("backends", "control", "wire profile", "release", "stacks", "leave", "about")
    table.columns.insert(0, Column("system", no_wrap=True, min_width=max(len(s.name) for s in every)))
    for s in every:
        about = s.description + (f" (docker image {s.image})" if s.image and not s.native else "")
        cells = (s.name, ", ".join(s.backends), "yes" if s.control else "no", s.wire, _release(s), _stacks(s),
                 _LEAVES[s.leave], about)  # fmt: skip
        table.add_row(*map(escape, cells))
    console.print(table)
    _releases_here()
    console.print(
        'a scenario may also define its own: [cluster] system = "NAME" with [cluster.member] command = [...], or '
        "name it once in a systems.toml beside the scenarios (docs/foreign.md); wire profiles: "
        + "; ".join(f"{k}: {v}" for k, v in WIRE_PROFILES.items()),
        markup=False,
    )


_LEAVES = {"control": "graceful (`leave` command)", "sigterm": "SIGTERM"}


def _release(s: System) -> str:
    if s.release:
        return f"{s.release} (cluster.version: {s.releases})"
    return s.releases or "-"


def _stacks(s: System) -> str:
    stacks = ", ".join(s.stacks) if s.stacks else s.stack
    return stacks + (", or your *.xml" if s.stack_files else "")


def _releases_here() -> None:
    from foreign.jgroups.releases import MEMBER_PROGRAMS
    from orchestration.systems.jgroups5 import on_this_machine

    for program, releases, java in MEMBER_PROGRAMS:
        console.print(f"JGroups member program {program}: releases {releases}; runs on {java}", markup=False)
    here = on_this_machine()
    console.print(
        "JGroups 3.x and 5.x releases on this machine (Maven's local repository): "
        + (", ".join(here) if here else "none")
        + "; another is fetched from Maven Central on first use (cluster.version); the releases Maven Central "
        "serves: python -m foreign.jgroups.registry",
        markup=False,
    )


class _ConformCommand(click.Command):
    """Remembers whether `--` came before the arguments: then they are a command, not a system's name."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta["conform_command"] = "--" in args
        return super().parse_args(ctx, args)


@click.command(cls=_ConformCommand)
@click.argument("target", nargs=-1, required=True)
@click.option("--backend", type=CONFORM_BACKENDS, default="process", show_default=True)
@click.option("--no-control", is_flag=True, help="with -- COMMAND: the member does not answer the control contract")
@click.option("--image", default=None, help="with -- COMMAND on docker: the member's image")
@click.option("--name", default=None, help="with -- COMMAND: its name in the output (default: from the command)")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None, help="where the histories go")
@click.option("--ready", "ready", default="20s", show_default=True, help="how long a member may take to start")
def conform(
    target: tuple[str, ...],
    backend: str,
    no_control: bool,
    image: str | None,
    name: str | None,
    out: Path | None,
    ready: str,
) -> None:
    """Run the contracts' checklist against SYSTEM (a named system), or against `-- COMMAND ...` (an argv with
    placeholders such as {config}): exit 0 every item passed, 1 some failed, 2 it could not run."""
    from orchestration.systems.conform import Checklist

    ctx = click.get_current_context()
    system = _system(target, ctx.meta.get("conform_command", False), not no_control, image, name)
    problem = _backend_problem(backend)
    if problem:
        click.echo(f"error: {problem}", err=True)
        sys.exit(2)
    out = out or Path("runs") / f"conform-{system.name}-{backend}-{time.strftime('%Y%m%d-%H%M%S')}"
    if out.exists() and any(out.iterdir()):
        click.echo(f"error: --out {out}: the folder exists and is not empty", err=True)
        sys.exit(2)
    with console.status(f"conform: two members of {system.name} on {backend}"):
        items = Checklist(system, backend, out, ready=duration_arg(ready)).run()
    _print(system.name, backend, items, out)
    sys.exit(1 if any(i.ok is False for i in items) else 0)


def _system(target: tuple[str, ...], as_command: bool, control: bool, image: str | None, name: str | None) -> System:
    from orchestration.systems.definition import SystemProblem, inline
    from orchestration.systems.user import system_named

    if not as_command:
        try:
            system = system_named(target[0]) if len(target) == 1 else None
        except SystemProblem as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(2)
        if system is None:
            from orchestration.systems import SYSTEMS

            click.echo(
                f"error: unknown system {' '.join(target)!r}; named systems: {', '.join(SYSTEMS)}; or give a command "
                "after --, e.g. chaosbed conform -- python3 member.py {config}",
                err=True,
            )
            sys.exit(2)
        return system
    member: TomlTable = {"command": list(target), "control": control}
    if image:
        member["image"] = image
    try:
        return inline(name or _command_name(target), member, path="command")
    except SystemProblem as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(2)


def _command_name(argv: tuple[str, ...]) -> str:
    """A name for a command's system: its first argument that names a file (member.py), else the program's."""
    for arg in argv[1:]:
        if "{" not in arg and not arg.startswith("-") and ("/" in arg or "." in arg):
            return Path(arg).name
    return Path(argv[0]).name or "command"


def _backend_problem(backend: str) -> str | None:
    from orchestration.cluster import ClusterError

    if backend == "process":
        return None
    from orchestration.backends.netns import check_netns_available

    try:
        check_netns_available()
        if backend == "docker":
            from orchestration.host import docker_engine

            docker_engine.client()
    except ClusterError as e:
        return str(e)
    return None


def _print(name: str, backend: str, items: list[Item], out: Path) -> None:
    table = Table("item", "result", "reason", title=f"chaosbed conform {name} ({backend})", title_justify="left")
    for item in items:
        result = "[green]pass[/]" if item.ok else "[bold red]FAIL[/]" if item.ok is False else "[dim]skip[/]"
        table.add_row(item.key, result, escape(item.reason))
    console.print(table)
    passed = sum(1 for i in items if i.ok)
    failed = sum(1 for i in items if i.ok is False)
    verdict = "[green]conforms[/]" if not failed else f"[bold red]does not conform[/] ({failed} failed)"
    skipped = len(items) - passed - failed
    console.print(f"{escape(name)} {verdict}: {passed} of {len(items)} passed, {skipped} skipped; histories in {out}")
