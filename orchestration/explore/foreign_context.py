"""The context of a foreign system's scenario (a registered system or an inline `[cluster.member]`): what it offers a
schedule, read from the system and its wire profile, never from chaosbed's STACKS.

- protocols: the protocols the system's wire profile can name in a discard rule (chaos/profiles/: jgroups-2.12's
  UNICAST2, NAKACK, GMS, ...), none for `wire = "none"`, so discards are drawn only where a rule can read a message;
- membership: the system installs views (System.views);
- detection: a foreign member's failure detection is its own business; FOREIGN_DETECT_S is what the search assumes
  (JGroups' test stacks suspect within ~2-3 s), so kills are drawn only where the views' bound leaves that time.
Schedules always run on real members (`real`): over tcp the kernel repairs what a fault drops, so every network fault
but a discard is drawn there.
"""

from __future__ import annotations

from analysis.config import DEFAULT_VIEWS_BOUND
from chaos.profiles import profile
from orchestration.explore.context import (
    CONVERGE_MARGIN,
    END_SLACK,
    Context,
    bound,
    context_of,
    last_send,
    seqno_hints,
    workload_span,
)
from orchestration.scenario import Scenario

FOREIGN_DETECT_S = 3.0


def wire_headers(wire: str) -> dict[str, list[tuple[str, list[str]]]]:
    """Protocol -> its headers (name, matchable field names) as the wire profile lists them; {} for "none"."""
    if wire == "none":
        return {}
    out: dict[str, list[tuple[str, list[str]]]] = {}
    for entry in profile(wire).rule_names():  # "UNICAST2.DATA(seqno, conn_id, first)"
        head, _, rest = entry.partition("(")
        proto, _, name = head.partition(".")
        fields = [f.strip() for f in rest.rstrip(")").split(",") if f.strip()]
        out.setdefault(proto, []).append((name, fields))
    return out


def context_for(sc: Scenario, *, real: bool = False) -> Context:
    """The context of any scenario: chaosbed's own member (context_of) or a foreign system (always real)."""
    return context_of(sc, real=real) if sc.system.native else foreign_context(sc)


def foreign_context(sc: Scenario) -> Context:
    """The Context of a foreign system's scenario."""
    system = sc.system
    transport = system.transport or sc.transport
    protocols = tuple(sorted(wire_headers(system.wire))) if transport == "udp" else ()
    if system.views and "GMS" not in protocols:
        protocols = (*protocols, "GMS")  # membership is the system's, whether or not its wire names GMS
    start, end = workload_span(sc)
    views = bound(sc.checks.get("views_converge", DEFAULT_VIEWS_BOUND)) if system.views else None
    horizon = end + END_SLACK
    horizon = min(horizon, sc.timeout - (views or 0.0) - CONVERGE_MARGIN)
    horizon = max(horizon, start + 0.2)
    unicast = frozenset(
        (s, d) for w in sc.workloads if w.kind == "unicast" for s in w.senders for d in w.dests if s != d
    )
    return Context(
        members=tuple(sc.members),
        stack=system.stack or system.name,
        transport=transport,
        protocols=protocols,
        start=start,
        end=end,
        horizon=horizon,
        unicast_links=unicast,
        senders=frozenset(s for w in sc.workloads for s in w.senders),
        workload_starts=tuple((w.start, frozenset(w.senders)) for w in sc.workloads),
        seqnos=seqno_hints(sc),
        delivery_bound=bound(sc.checks.get("delivered_within")),
        views_bound=views,
        detect=FOREIGN_DETECT_S if system.views else 0.0,
        sends_until=last_send(sc),
        wire=system.wire if transport == "udp" else "none",
        native=False,
        real=True,
    )
