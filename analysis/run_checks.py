"""The run-level checks, in plain Python on a run's small facts, shared by the Spark pipeline and the reference
checker: views_converge (on the view events of RunInfo) and control_per_heal (on the per-interval counts of control
events, which each checker counts its own way)."""

from __future__ import annotations

from analysis.membership import NEVER, RunInfo, View
from analysis.verdict import Violation


def views_converge(info: RunInfo) -> tuple[list[Violation], str | None]:
    """After the last fault ends, every live member's last view holds exactly the live members, is the same view
    everywhere, and was installed within the bound. Returns the violations and a note when not checked."""
    bound = info.checks.views_bound
    if bound is None:
        return [], None
    if not info.has_views:
        return [], "views_converge not checked: no view events"
    live = [m for m in info.members if info.alive.get(m)]
    if not live:
        return [], "views_converge not checked: no member alive at the end"
    heal = info.heal_time()
    if heal == NEVER:
        return [], "views_converge not checked: a partition is still in force at the end"
    expected = frozenset(live)
    out: list[Violation] = []

    def bad(member: str | None, detail: str, t: int | None) -> None:
        out.append(Violation("views_converge", None, member, None, None, None, detail, info.run, None, t))

    finals: dict[str, View | None] = {m: vs[-1] if (vs := info.views.get(m)) else None for m in live}
    for m, v in finals.items():
        if v is None:
            bad(m, f"{m} installed no view in its final incarnation", None)
        elif v.members != expected:
            bad(
                m,
                f"{m}'s last view {v.view_id} is [{', '.join(sorted(v.members))}] but the members alive at the "
                f"end are [{', '.join(live)}]",
                v.t,
            )
        elif heal is not None and v.t > heal + int(bound * 1e9):
            bad(
                m,
                f"{m} installed its last view {v.view_id} {(v.t - heal) / 1e9:.3f} s after the last fault ended "
                f"(bound {bound:g} s)",
                v.t,
            )
    ids = {v.view_id for v in finals.values() if v is not None}
    if not out and len(ids) > 1:
        which = ", ".join(f"{m}: {v.view_id}" for m, v in finals.items() if v is not None)
        bad(None, f"the live members ended in different views with the same members ({which})", None)
    return out, None


def control_per_heal(info: RunInfo, control: dict[tuple[str, str], list[int]]) -> list[Violation]:
    """One violation per (member, event kind, recovery interval) whose count exceeds the kind's bound."""
    heals = info.heals()
    out = []
    for kind, bound in info.checks.control_bounds:
        for m in info.members:
            for i, n in enumerate(control.get((m, kind), [])):
                if n > bound:
                    detail = f"{m} wrote {n} {kind} events {info.interval_label(heals, i)} (bound {bound} per heal)"
                    t = info.t_min if i == 0 else heals[i - 1]
                    out.append(Violation("control_per_heal", m, None, None, None, None, detail, info.run, kind, t))
    return out
