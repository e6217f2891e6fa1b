"""hints: what earlier answers taught about similar questions, before the gate and the fan-out.

Looks the question's feature keys up in the router's hint book (:mod:`engine.hints`; a dict
read, no store access on the hot path) and

* adds a labelled lane ``hints`` of files confirmed for similar questions (corroborated across
  precision classes, or marked useful by feedback) whose content has not changed since, fused with
  its own weight beside the experts (its items carry the flag ``hint``);
* with ``settings.skip``, lets the gate skip experts that ran on similar questions and contributed
  nothing, within bounds (:class:`~engine.hints.SkipBounds`).

The receipt's ``hints`` says which keys were looked up, which files the lane held and why, how many
hints had expired (file changed), and which experts were skipped because of them. A run with a
hints node also *records* hints after its answer (the Router's after-answer queue).

Settings (all optional): ``weight`` (the lane's fusion weight, default 0.5; 0: no lane),
``max_files`` (5), ``min_score`` (0.2), ``precision_class`` of the lane (``lexical``),
``keys`` (weight per key kind: identifiers, paths, literals, keywords, class; defaults 1, 1, 1,
0.25, 0), ``skip`` (a mapping of :class:`~engine.hints.SkipBounds` fields; absent: no skipping).
"""

from __future__ import annotations

from ..hints import HINT_LANE, KEY_KINDS, SkipBounds, question_keys
from ..items import ScoredItem
from ..spec import ConfigSet, PipelineSpec
from ..types import PRECISION, ExpertOutcome
from ..workspace import in_scope
from .base import Node, RunState, node_kind

DEFAULT_KEY_WEIGHTS = {"identifiers": 1.0, "paths": 1.0, "literals": 1.0, "keywords": 0.25, "class": 0.0}
SETTINGS = frozenset({"weight", "max_files", "min_score", "precision_class", "keys", "skip"})


@node_kind
class HintsNode(Node):
    kind = "hints"
    settings_keys = SETTINGS
    requires = ("classify",)

    def validate(self, config: ConfigSet, pipeline: PipelineSpec) -> None:
        for key, lo in (("weight", 0.0), ("min_score", 0.0), ("max_files", 1)):
            v = self.settings.get(key, lo)
            if isinstance(v, bool) or not isinstance(v, int | float) or v < lo:
                raise self.invalid(pipeline, f"settings.{key} {v!r} must be a number >= {lo}")
        if self.settings.get("precision_class", "lexical") not in PRECISION:
            raise self.invalid(pipeline, f"settings.precision_class must be one of {sorted(PRECISION)}")
        keys = self.settings.get("keys", {})
        if not isinstance(keys, dict) or set(keys) - set(KEY_KINDS):
            raise self.invalid(pipeline, f"settings.keys maps key kinds {list(KEY_KINDS)} to weights")
        try:
            bounds = SkipBounds.from_settings(self.settings.get("skip"))
        except (TypeError, ValueError) as exc:
            raise self.invalid(pipeline, f"settings.skip: {exc}") from None
        self._check_experts(bounds.protect if bounds else (), config, pipeline, "skip.protect")

    async def run(self, state: RunState) -> None:
        c = state.classification
        assert c is not None  # guaranteed by `requires`
        s = self.settings
        scope = state.request.scope
        roots = {p.name: p.root for p in state.workspace.scoped_projects(scope, dict(state.config.priors.groups))}
        weights: dict[str, float] = {**DEFAULT_KEY_WEIGHTS, **s.get("keys", {})}
        weight = float(s.get("weight", 0.5))
        plan = state.services.hint_book().plan(
            question_keys(c),
            state.config_version,
            roots,
            key_weights=weights if weight > 0 else {},  # no lane: no file is looked at
            max_files=int(s.get("max_files", 5)) if weight > 0 else 0,
            min_score=float(s.get("min_score", 0.2)),
            weight=weight,
            precision_class=str(s.get("precision_class", "lexical")),
            bounds=SkipBounds.from_settings(s.get("skip")),
        )
        plan.lane = [f for f in plan.lane if in_scope(f.path, scope)]
        state.hints = plan
        if plan.lane:
            items = plan.evidence()
            outcome = ExpertOutcome(HINT_LANE, plan.precision_class, "ok", {"keys": list(plan.keys)}, items=items)
            state.outcomes[HINT_LANE] = outcome
            best = max(e.score for e in items)
            precision = PRECISION[plan.precision_class].score
            state.scored[HINT_LANE] = [
                ScoredItem(e, rank, _subscores(e.score / best, precision), e.flags)
                for rank, e in enumerate(items, start=1)
            ]
        return None


def _subscores(native: float, precision: float) -> dict[str, float]:
    return {"native": round(native, 4), "precision": precision, "scope": 1.0}
