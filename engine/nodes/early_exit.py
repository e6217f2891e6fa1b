"""The fan-out's early exit: stop waiting once high-precision experts agree on a definition.

``fanout`` with ``settings.early_exit: {experts: [symbols, ripgrep], min_agree: 2, top: 1,
skip: [semantic, typed]}``: once every listed expert has answered, the rule looks at them; when
at least ``min_agree`` have a *definition* (an item whose ``meta.role`` is ``definition`` or
whose ``meta.definition`` is true) among their first ``top`` items at the same place (project,
path, overlapping lines), the ``skip`` experts (default: every expert not listed) are left out
of the answer: cancelled if still running, their items dropped if they had already answered.
They are reported ``skipped`` with ``error_class: early_exit`` and the reason, so the receipt
shows what was not waited for and why. Experts in neither list are always awaited.

Dropping what already answered is deliberate: which experts fuse must not depend on which of them
happened to be faster on this run, or the same question, config and index would give different
answers (and a pinned or replayed run could not be reproduced). A question whose definition two
structural experts already agree on needs no embedding call and no jedi.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..types import Evidence, ExpertOutcome


def is_definition(e: Evidence) -> bool:
    return e.meta.get("role") == "definition" or e.meta.get("definition") is True


@dataclass(frozen=True, slots=True)
class EarlyExit:
    experts: tuple[str, ...]
    min_agree: int = 2
    top: int = 1
    skip: tuple[str, ...] | None = None  # None: every expert not in ``experts``

    @classmethod
    def from_settings(cls, raw: Any) -> EarlyExit:
        if not isinstance(raw, Mapping) or not raw.get("experts"):
            raise ValueError("needs experts: [names] (the high-precision experts whose agreement ends the fan-out)")
        experts = tuple(str(e) for e in raw["experts"])
        skip = raw.get("skip")
        if skip is not None and (not isinstance(skip, list) or set(map(str, skip)) & set(experts)):
            raise ValueError("skip must be a list of experts not among `experts`")
        rule = cls(
            experts,
            int(raw.get("min_agree", 2)),
            int(raw.get("top", 1)),
            None if skip is None else tuple(str(e) for e in skip),
        )
        if not 1 <= rule.min_agree <= len(experts) or rule.top < 1:
            raise ValueError(f"min_agree must be 1..{len(experts)} and top ≥ 1")
        return rule

    def skips(self, expert: str) -> bool:
        return expert not in self.experts if self.skip is None else expert in self.skip

    def agreed(self, outcomes: Mapping[str, ExpertOutcome], running: Sequence[str]) -> str | None:
        """Why the skip experts may be left out, or None. Decided only once every listed expert
        has finished (so the decision never depends on timing); only ``ok`` answers count."""
        if any(name in running for name in self.experts):
            return None
        places: list[tuple[str, Evidence]] = []
        for name in self.experts:
            o = outcomes.get(name)
            if o is None or o.status != "ok":
                continue
            places += [(name, e) for e in o.items[: self.top] if is_definition(e)]
        for _, e in places:
            agree = sorted(
                {
                    other
                    for other, f in places
                    if f.project == e.project
                    and f.path == e.path
                    and f.start_line <= e.end_line
                    and e.start_line <= f.end_line
                }
            )
            if len(agree) >= self.min_agree:
                return f"{' and '.join(agree)} agree on the definition at {e.project}/{e.path}:{e.start_line}"
        return None

    @staticmethod
    def mark_skipped(outcome: ExpertOutcome, why: str) -> None:
        outcome.status, outcome.error_class, outcome.error = "skipped", "early_exit", why
        outcome.items = []
