"""What a Router learns from its own answers (docs/adr/0017-flywheel.md): the hint book and the
feedback bandit it serves to nodes, and the after-answer work that feeds them.

The hot path only reads (:meth:`Flywheel.hint_book`, :meth:`Flywheel.bandit`: in memory, read from
the store once per Router). Learning is queued: :meth:`Flywheel.observed` after an answer and
:meth:`Flywheel.feedback` after feedback return a :class:`Learn` the Router's flush hands to
:meth:`Flywheel.learn`, which writes hints and bandit arms to the store and into memory.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .bandit import Bandit
from .errors import StoreError
from .hints import HintBook, Observation, observe
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
        self._hints: HintBook | None = None
        self._bandit: Bandit | None = None
        self._observed: dict[str, Observation] = {}  # receipt id → what its answer can teach

    def hint_book(self) -> HintBook:
        """Every hint of the store, read once (then kept current by :meth:`learn`)."""
        if self._hints is None:
            try:
                self._hints = HintBook.load(self.store)
            except StoreError as exc:  # a damaged store: no hints, never a failed answer
                log.warning("store: %s", exc.message)
                self._hints = HintBook()
        return self._hints

    def bandit(self) -> Bandit:
        """The bandit's arms, read once (then kept current by :meth:`learn`)."""
        if self._bandit is None:
            try:
                self._bandit = Bandit.load(self.store)
            except StoreError as exc:  # a damaged store: fresh arms, never a failed answer
                log.warning("store: %s", exc.message)
                self._bandit = Bandit()
        return self._bandit

    def observed(self, state: RunState, receipt_id: str) -> Learn | None:
        """After an answer: what a run with a hints node or a bandit draw can teach (no I/O)."""
        if (state.hints is None and state.bandit is None) or state.classification is None or not receipt_id:
            return None
        seen = observe(state, receipt_id)
        self._observed[receipt_id] = seen
        while len(self._observed) > OBSERVED:
            self._observed.pop(next(iter(self._observed)))
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
