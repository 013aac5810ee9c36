"""The multicasts the histories show a running member is still owed, read as a run goes (orchestration/systems/
quiet.py waits for them before it ends the run of foreign members).

The checker's rule (docs/analysis.md, "Which deliveries are owed"), applied to what has been written so far: a
multicast from S is owed to R (S included) when R's current incarnation had started when S's current one sent it,
R was in S's current view and S in R's (any member, for a system whose histories hold no views), and neither has
since installed a view without the other. A restart of either ends what was owed between them; a member that is
not running is not waited for (the caller says who runs). JGroups repairs a lost multicast tail only at its next
STABLE round, seconds after a heal, while nothing is written to any history: without this the run ended first and the
checker reported the tail as never delivered (explore's fourth hunt on 5.5.6, docs/explore.md).
"""

from __future__ import annotations

from collections.abc import Collection

from node.addresses import name_of


class OwedMulticasts:
    """Feed it the histories' events in time order (`add`); `pending(running)` says whether one is owed still."""

    def __init__(self) -> None:
        self.views: dict[str, set[str] | None] = {}  # member -> its current view's member names (None: no view yet)
        self.has_views = False  # some history holds a view: owing follows the views from then on
        self.started: set[str] = set()
        self._pending: dict[tuple[str, str], set[str]] = {}  # (sender, receiver) -> msg_ids owed, not yet delivered
        self._delivered: dict[tuple[str, str], set[str]] = {}  # (sender, receiver) -> msg_ids the receiver delivered

    def add(self, e: dict[str, object]) -> None:
        member, kind = e.get("member"), e.get("event")
        if not isinstance(member, str):
            return
        if kind == "start":
            self._restarted(member)
        elif kind == "view":
            self._viewed(member, e.get("members"))
        elif kind == "send" and e.get("kind") == "multicast":
            self._sent(member, e.get("msg_id"))
        elif kind == "deliver" and e.get("kind") == "multicast":
            sender, msg_id = e.get("sender"), e.get("msg_id")
            if isinstance(sender, str) and isinstance(msg_id, str):
                key = (name_of(sender), member)
                self._delivered.setdefault(key, set()).add(msg_id)
                if key in self._pending:
                    self._pending[key].discard(msg_id)

    def pending(self, running: Collection[str]) -> int:
        """How many multicasts between running members are owed and not delivered yet."""
        return sum(len(ids) for (s, r), ids in self._pending.items() if s in running and r in running)

    def _restarted(self, member: str) -> None:
        """A new incarnation: what its predecessor sent or was owed is no longer owed (the checker's from_crashed,
        to_crashed)."""
        self.started.add(member)
        self.views[member] = None
        for key in [k for k in (*self._pending, *self._delivered) if member in k]:
            self._pending.pop(key, None)
            self._delivered.pop(key, None)

    def _viewed(self, member: str, members: object) -> None:
        if not isinstance(members, list):
            return
        names = {name_of(str(m)) for m in members}
        self.has_views = True
        self.views[member] = names
        for s, r in list(self._pending):  # excluded, even for a while: not owed again after a merge
            if (s == member and r not in names) or (r == member and s not in names):
                del self._pending[(s, r)]

    def _together(self, s: str, r: str) -> bool:
        if not self.has_views:
            return True
        vs, vr = self.views.get(s), self.views.get(r)
        return vs is not None and vr is not None and r in vs and s in vr

    def _sent(self, sender: str, msg_id: object) -> None:
        if not isinstance(msg_id, str):
            return
        for r in self.started:
            if self._together(sender, r) and msg_id not in self._delivered.get((sender, r), ()):
                self._pending.setdefault((sender, r), set()).add(msg_id)
