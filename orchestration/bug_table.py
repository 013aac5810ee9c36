"""A catalogue file's `[bug]` table (docs/scenario-format.md, "Bug files"): the model's variant pair (`flawed` and
`fixed`: settings of chaosbed's own protocols, or of a system) and, for a bug that real releases of a system had,
the `real` pair (`[bug.real]`: the release that had it and the release that fixed it, SCENARIO.md's "Releases of a
real system").

```toml
[bug]
id = "JGRP-2904"
flawed = { "cluster.properties.mcast.purge_on_view_change" = false }   # the model's pair
fixed = { }
violates = ["complete", "timeout"]
[bug.real]                                     # the real releases' pair (a bug chaosbed does not model has this only)
system = "jgroups-5"                           # cluster.system of both variants
flawed = "5.4.8"                               # cluster.version of the flawed variant
fixed = "5.4.10"                               # ... and of the fixed one
violates = ["timeout"]                         # optional: what the flawed release violates (default: bug.violates)
```

What else the real system needs (its stack, faults in its wire's names, checks) goes in the file's
`[per_system.SYSTEM]` table, as for any scenario that runs on several systems.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

BUG_KEYS = {"id", "title", "layer", "breaks", "source", "flawed", "fixed", "violates", "no_fix", "real"}
REAL_KEYS = {"system", "flawed", "fixed", "violates", "note"}
MODEL_VARIANTS = ("flawed", "fixed")
REAL_VARIANTS = ("real-flawed", "real-fixed")


@dataclass(frozen=True)
class RealPair:
    """The releases of a real system that had the bug (`flawed`) and that fixed it (`fixed`)."""

    system: str
    flawed: str
    fixed: str
    violates: list[str]
    note: str = ""

    def settings(self, variant: str) -> dict[str, object]:
        release = self.flawed if variant == "real-flawed" else self.fixed
        return {"cluster.system": self.system, "cluster.version": release}


@dataclass
class Bug:
    """A known-bug scenario's `[bug]` table: the same schedule FAILS on the flawed variant (exactly the checks in
    `violates`) and PASSES on the fixed one. Variants are settings (dotted keys as in --set) applied to the file.
    A bug of a system that has no fix (`no_fix`: why) has the flawed variant only. `real`: the releases of a real
    system that had it and fixed it, run as two more variants (real-flawed, real-fixed)."""

    id: str
    title: str
    layer: str
    breaks: str
    source: str
    flawed: dict[str, object]
    fixed: dict[str, object]
    violates: list[str]
    no_fix: str = ""
    real: RealPair | None = field(default=None)
    modelled: bool = True  # False: only real releases have it (no flawed/fixed table: chaosbed has no such flaw)

    @property
    def model_variants(self) -> tuple[str, ...]:
        if not self.modelled:
            return ()
        return ("flawed",) if self.no_fix else MODEL_VARIANTS

    @property
    def variants(self) -> tuple[str, ...]:
        return self.model_variants + (REAL_VARIANTS if self.real else ())

    def settings(self, variant: str) -> dict[str, object]:
        if variant not in self.variants:
            raise ValueError(f"variant must be one of {', '.join(self.variants)}, not {variant!r}")
        if variant in REAL_VARIANTS:
            assert self.real is not None
            return self.real.settings(variant)
        return dict(self.flawed if variant == "flawed" else self.fixed)

    def must_violate(self, variant: str) -> list[str] | None:
        """What a variant's run must violate: exactly these checks (None: it must pass)."""
        if variant == "flawed":
            return list(self.violates)
        if variant == "real-flawed":
            assert self.real is not None
            return list(self.real.violates)
        return None


Need = Callable[[bool, str, str], None]
TableOf = Callable[[object, str, str], dict[str, object]]


def parse_bug(raw: object, need: Need, table: TableOf, violations: set[str]) -> Bug:
    """The [bug] table; `need(cond, path, reason)` and `table(value, path, reason)` raise the scenario's errors."""
    b = table(raw, "bug", "must be a table")
    for key in b:
        need(key in BUG_KEYS, f"bug.{key}", f"unknown key; a [bug] table has: {', '.join(sorted(BUG_KEYS))}")
    for key in ("id", "title"):
        need(isinstance(b.get(key), str) and bool(b.get(key)), f"bug.{key}", "a non-empty string is required")
    for key in ("layer", "breaks", "source", "no_fix"):
        need(isinstance(b.get(key, ""), str), f"bug.{key}", "must be a string")
    no_fix = str(b.get("no_fix", ""))
    modelled = "flawed" in b or "fixed" in b or "real" not in b  # a bug with only real releases has no model pair
    if not modelled:
        need(not no_fix, "bug.no_fix", "a bug with only a [bug.real] pair has its fixing release; leave no_fix out")
        b = {**b, "flawed": {}, "fixed": {}}
    if no_fix:  # the system has no fixed variant: the file asserts the flawed behaviour only
        need("fixed" not in b, "bug.fixed", "a bug with no_fix has no fixed variant; leave fixed out")
    flawed, fixed = (
        table(b.get(key, {} if no_fix else None), f"bug.{key}", "a table of --set keys and values is required ({} "
              "for none), or no_fix = \"why\" instead of fixed")
        for key in ("flawed", "fixed")
    )  # fmt: skip
    need(not modelled or bool(no_fix) or bool(flawed) or bool(fixed), "bug",
         "flawed and fixed must differ in at least one setting")  # fmt: skip
    violates = _checks(b.get("violates"), "bug.violates", need, violations)
    real = _real(b["real"], need, table, violations, violates) if "real" in b else None
    return Bug(
        str(b["id"]), str(b["title"]), str(b.get("layer", "")), str(b.get("breaks", "")), str(b.get("source", "")),
        dict(flawed), dict(fixed), violates, no_fix, real, modelled,
    )  # fmt: skip


def _checks(value: object, path: str, need: Need, violations: set[str]) -> list[str]:
    ok = isinstance(value, list) and bool(value) and all(isinstance(v, str) for v in value)
    need(ok, path, "a non-empty list of check names")
    assert isinstance(value, list)
    for v in value:
        need(v in violations, path, f"unknown check {v!r}; checks: {', '.join(sorted(violations))}")
    return [str(v) for v in value]


def _real(raw: object, need: Need, table: TableOf, violations: set[str], default: list[str]) -> RealPair:
    r: Mapping[str, object] = table(
        raw, "bug.real", 'a table: system = "jgroups-5", flawed = "5.4.8", fixed = "5.4.10" (the releases)'
    )
    for key in r:
        need(key in REAL_KEYS, f"bug.real.{key}", f"unknown key; [bug.real] has: {', '.join(sorted(REAL_KEYS))}")
    for key in ("system", "flawed", "fixed"):
        need(isinstance(r.get(key), str) and bool(r.get(key)), f"bug.real.{key}",
             "a non-empty string is required: the system, and the releases that had the bug and fixed it")  # fmt: skip
    need(r["flawed"] != r["fixed"], "bug.real.fixed", "the fixing release must differ from the flawed one")
    need(isinstance(r.get("note", ""), str), "bug.real.note", "must be a string")
    violates = _checks(r["violates"], "bug.real.violates", need, violations) if "violates" in r else list(default)
    return RealPair(str(r["system"]), str(r["flawed"]), str(r["fixed"]), violates, str(r.get("note", "")))
