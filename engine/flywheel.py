"""What a Router learns from its own answers (docs/adr/0017-flywheel.md): the hint book and the
feedback bandit it serves to nodes, and the after-answer work that feeds them.

The hot path only reads memory (:meth:`Flywheel.hint_book`, :meth:`Flywheel.bandit`); what it
asked for and memory lacked (a config version's stored hints, the bandit's stored arms) is read by
:meth:`Flywheel.load` after the answer, so the first hinted question of a process uses only what
the process learned itself (its receipt's ``hints.loaded`` is false). Learning is queued too:
:meth:`Flywheel.observed` after an answer and :meth:`Flywheel.feedback` after feedback return a
:class:`Learn` the Router's flush hands to :meth:`Flywheel.learn`, which writes hints and bandit
arms to the store and into memory.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .bandit import Bandit
from .errors import StoreError
from .hints import HINT_LANE, OBSERVED_ITEMS, AnsweredItem, HintBook, Observation, question_keys
from .store import Feedback, Store

if TYPE_CHECKING:
    from .nodes.base import RunState

log = logging.getLogger("engine")
OBSERVED = 256  # recent answers feedback can still teach about


@dataclass(frozen=True)
class Learn:
    """An answer (``feedback`` None) or feedback on it, to learn from after the answer."""

    seen: Observation
    feedback: Feedback | None


class Flywheel:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._hints = HintBook()
        self._bandit = Bandit(loaded=False)
        self._observed: dict[str, Observation] = {}  # receipt id → what its answer can teach

    def hint_book(self) -> HintBook:
        """The hints in memory (no I/O: a version's stored hints are read by :meth:`load`)."""
        return self._hints

    def bandit(self) -> Bandit:
        """The bandit's arms in memory (no I/O: the stored arms are read by :meth:`load`)."""
        return self._bandit

    def load(self) -> None:
        """After an answer (the Router's flush): read what the hot path asked for and did not have
        — the stored hints of a config version, the bandit's arms. A damaged store is logged."""
        try:
            self._hints.load(self.store)
            self._bandit.load(self.store)
        except StoreError as exc:
            log.warning("store: %s", exc.message)

    def observed(self, state: RunState, receipt_id: str) -> Learn | None:
        """After an answer: what a run with a hints node or a bandit draw can teach (no I/O)."""
        if (state.hints is None and state.bandit is None) or state.classification is None or not receipt_id:
            return None
        seen = observe(state, receipt_id)
        self._observed[receipt_id] = seen
        while len(self._observed) > OBSERVED:
            self._observed.pop(next(iter(self._observed)))
        if state.hints is None or not state.hints.learns_agreement:
            return None  # kept for feedback only: nothing reads what agreement alone teaches
        return Learn(seen, None)

    def feedback(self, feedback: Feedback) -> Learn | None:
        """After stored feedback: what it teaches, for an answer given recently."""
        seen = self._observed.get(feedback.receipt_id)
        return Learn(seen, feedback) if seen is not None else None

    def learn(self, entry: Learn) -> None:
        """Hints from an answer (agreement) or from feedback on it, and the bandit's update, into
        the store and memory (off the hot path: the Router's flush)."""
        book = self.hint_book()
        seen, fb = entry.seen, entry.feedback
        if fb is None:
            hints = seen.hints(seen.receipt_id, "agreement", seen.agreement(), book.hashes)
        else:
            judged = seen.judged(fb.useful_item_ids, fb.not_useful_item_ids)
            hints = seen.hints(fb.feedback_id, "feedback", judged, book.hashes)
            if seen.bandit is not None:
                for arm in self.bandit().update(*seen.bandit, seen.rewards(fb.useful_item_ids)):
                    self.store.put_bandit(arm)
        for h in hints:
            self.store.put_hint(h)
        book.add(hints)


def observe(state: RunState, receipt_id: str) -> Observation:
    """What the run's answer can teach (cheap: no I/O; called in the after-answer queue)."""
    c = state.classification
    assert c is not None
    experts = {key: o.expert for key, o in state.outcomes.items() if o.expert != HINT_LANE}
    classes = {key: o.precision_class for key, o in state.outcomes.items() if o.expert != HINT_LANE}
    items = []
    for it in state.fused[:OBSERVED_ITEMS]:
        if not it.path or it.kind == "commit":
            continue
        best: dict[str, int] = {}
        for src in it.sources:
            if src.expert in experts:
                e = experts[src.expert]
                best[e] = min(best.get(e, src.rank), src.rank)
        found = tuple(sorted(best))
        keys = [src.expert for src in it.sources if src.expert in experts]
        precision = frozenset(classes[k] for k in keys)
        items.append(AnsweredItem(it.id, it.project, it.path, found, precision, tuple(best[e] for e in found)))
    ran = sorted({o.expert for o in state.outcomes.values() if o.status in ("ok", "partial") and o.expert != HINT_LANE})
    roots = {p.name: p.root for p in state.workspace.projects}
    drawn = (state.bandit.scope, "abstained" if c.abstained else c.klass) if state.bandit is not None else None
    return Observation(
        receipt_id, state.config_version, c.klass, question_keys(c), tuple(items), tuple(ran), roots, drawn
    )
