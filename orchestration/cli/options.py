"""What the command groups of `chaosbed` share: the console, value parsers (probabilities, durations, --set),
the backend choices, the --cluster/--spark/--master options, and finding the running cluster. It imports no
command module, so every cli_*.py can import it."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import click
from rich.console import Console

from node.units import parse_duration
from orchestration.backends import BACKENDS

if TYPE_CHECKING:
    from orchestration.cluster import Cluster, Properties

F = TypeVar("F", bound=Callable[..., object])  # a command function that a click decorator wraps

# Not on a terminal (logs, CI, pipes): wide enough that tables are not truncated.
console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)

# run, matrix and bugs run take every backend; `up` the backends of clusters that outlive the command (the
# simulator lives in one process), in the order its --help has always listed them.
BACKEND = click.Choice(list(BACKENDS))
CLUSTER_BACKEND = click.Choice(["netns", "process", "docker"])
DEFAULT_BACKEND_HELP = "default: netns as root with namespaces, else process"


class CommandError(click.ClickException):
    """A command that could not do what was asked: one line (what went wrong, what to do) and exit 2, the commands'
    "could not run" (docs/scenario-format.md's exit codes). A traceback is only ever a bug in chaosbed."""

    exit_code = 2


def fraction_arg(value: str) -> float:
    """A probability written 0.2 or 20%."""
    v = value.strip()
    f = float(v[:-1]) / 100 if v.endswith("%") else float(v)
    if not 0 <= f <= 1:
        raise click.BadParameter(f"{value} is not a probability (use 0.2 or 20%)")
    return f


def duration_arg(value: str) -> float:
    """A non-negative duration (node/units.py) in seconds; a bad one is a click.BadParameter."""
    return parse_duration(value, non_negative=True, error=click.BadParameter)


def parse_set(values: list[str] | tuple[str, ...]) -> Properties:
    """--set unicast3.xmit_interval=200ms -> {"unicast3": {"xmit_interval": "200ms"}}"""
    props: Properties = {}
    for item in values:
        key, eq, value = item.partition("=")
        proto, dot, name = key.partition(".")
        if not eq or not dot or not proto or not name:
            raise ValueError(f"--set {item!r}: write PROTOCOL.PROPERTY=VALUE, e.g. unicast3.xmit_interval=200ms")
        props.setdefault(proto, {})[name] = value
    return props


def protocol_set_option(fn: F) -> F:
    """`--set PROTO.PROP=VALUE` (repeatable) of `up` and `sim`, read with parse_set."""
    return click.option("--set", "sets", multiple=True, metavar="PROTO.PROP=VALUE", help="a protocol property")(fn)


def cluster_option(fn: F) -> F:
    """`--cluster LABEL` of the commands that act on a running cluster (see `attach`)."""
    help_ = "the cluster's label (default: the only one running)"
    return click.option("--cluster", "label", default=None, help=help_)(fn)


SPARK_HELP = (
    "where the checks run: auto (the warm Spark service of this machine, started if needed; it stops after 5 idle "
    "minutes), local (in this process: no service, a JVM start per check), sc://HOST:PORT (a Spark Connect server) "
    "or a master URL; default: $CHAOSBED_SPARK, else auto (in this process where the service cannot start)"
)


def spark_option(fn: F) -> F:
    """The `--spark TARGET` option (check, run, matrix, bugs run); spark_target combines it with --master."""
    return click.option("--spark", "spark", default=None, metavar="TARGET", help=SPARK_HELP)(fn)


def master_option(fn: F) -> F:
    """The older `--master URL` of run, matrix and bugs run (check words its help on its own)."""
    return click.option("--master", default=None, help="Spark master URL for the checks (same as --spark URL)")(fn)


def spark_target(spark: str | None, master: str | None) -> str | None:
    """The one Spark target of --spark and --master (the older option, still a master URL); both is an error."""
    if spark is not None and master is not None:
        raise click.UsageError(
            f"--spark {spark} and --master {master}: give one (--master URL is the same as --spark URL)"
        )
    target = spark if spark is not None else master
    if target is not None:
        from analysis.spark import check_target

        try:
            check_target(target)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--spark") from None
    return target


def default_backend() -> str:
    """netns as root with namespaces, else process (docs/scenario-format.md's default)."""
    from orchestration.backends.netns import check_netns_available
    from orchestration.cluster import ClusterError

    try:
        check_netns_available()
    except ClusterError:
        return "process"
    return "netns"


def cluster_label(label: str | None) -> str:
    """`label`, or the label of the only cluster running; a click error says why there is none."""
    from orchestration.cluster import list_clusters

    if label is not None:
        return label
    labels = list_clusters()
    if not labels:
        raise CommandError("no cluster is running (start one with `chaosbed up`)")
    if len(labels) > 1:
        raise CommandError(f"several clusters are running ({', '.join(labels)}): name one with --cluster")
    return labels[0]


def attach(label: str | None) -> Cluster:
    """The running cluster named `label`, or the only one running; a click error says why there is none."""
    from orchestration.backends import attach as attach_label
    from orchestration.cluster import ClusterError

    try:
        return attach_label(cluster_label(label))
    except ClusterError as e:
        raise CommandError(str(e)) from None
