"""gate: class + scope + budget + priors ⇒ the experts that run, and why every other one does not.

* with ``priors.bandit.enabled``, each prior is first multiplied by the feedback bandit's bounded
  factor for this class (:mod:`engine.bandit`; the receipt's ``bandit`` has the draw);
* classifier abstained ⇒ ``priors.default_experts`` (the documented default set);
* an expert whose prior is below ``gate.min_prior`` does not run; neither does a disabled one,
  one below ``budget.min_precision_class``, one whose ``languages`` exclude ``scope.language``,
  nor one whose adapter ``reads_history`` with no git repository in scope;
* "one expert suffices": a prior ≥ ``gate.single_expert_at`` with every other prior below
  ``gate.single_expert_others_below`` runs alone;
* at most ``min(budget.max_experts, gate.max_experts)`` run, highest prior first;
* after a ``hints`` node, experts that contributed nothing to similar questions may be skipped,
  within that node's ``skip`` bounds (:meth:`engine.hints.HintPlan.apply_skips`);
* nothing left ⇒ :class:`~engine.errors.GateError` (``zero_expert_gate``), never "run everything".
"""

from __future__ import annotations

from ..bandit import scope_of
from ..errors import GateError
from ..experts import adapter_class
from ..spec import ConfigSet, PipelineSpec
from ..types import PRECISION
from .base import Node, RunState, Selection, node_kind


@node_kind
class GateNode(Node):
    kind = "gate"
    settings_keys = frozenset({"experts"})
    requires = ("classify",)

    def validate(self, config: ConfigSet, pipeline: PipelineSpec) -> None:
        self._check_experts(self.settings.get("experts"), config, pipeline, "experts")

    async def run(self, state: RunState) -> None:
        allowed = self.settings.get("experts")
        state.selection = select(state, set(allowed) if allowed else None)
        if state.hints is not None:  # experts idle on similar questions, within the hints node's bounds
            state.hints.apply_skips(state.selection.experts, state.selection.reasons)
        if not state.selection.experts:
            raise GateError(
                "no expert passed the gate for this question; see receipt.experts_selected for why",
                reasons=state.selection.reasons,
            )
        return None


def select(state: RunState, allowed: set[str] | None = None) -> Selection:
    config, req, c = state.config, state.request, state.classification
    assert c is not None  # guaranteed by `requires`
    priors, gate = config.priors, config.priors.gate
    weights = adjusted(state, dict(priors.weights_for(None if c.abstained else c.klass, c.rule)))
    reasons: dict[str, str] = {}
    basis = "default set (classifier abstained)" if c.abstained else f"class {c.klass}"
    if not c.abstained and c.rule in priors.rule_weights:
        basis += f" (rule {c.rule})"
    candidates: dict[str, float] = {}
    projects = state.workspace.scoped_projects(req.scope, dict(priors.groups))
    for name, spec in sorted(config.experts.items()):
        w = weights.get(name)
        if w is None:
            reasons[name] = f"no prior for {basis}"
        elif not spec.enabled:
            reasons[name] = "disabled in experts.yaml"
        elif w < gate.min_prior:
            reasons[name] = f"prior {w} below gate.min_prior {gate.min_prior} for {basis}"
        elif (
            req.budget.min_precision_class
            and PRECISION[spec.precision_class].rank < PRECISION[req.budget.min_precision_class].rank
        ):
            reasons[name] = f"precision {spec.precision_class} below budget.min_precision_class"
        elif req.scope.language and spec.languages and req.scope.language.lower() not in spec.languages:
            reasons[name] = f"does not handle scope.language {req.scope.language}"
        elif adapter_class(spec.adapter).reads_history and not any(p.is_git for p in projects):
            reasons[name] = "no git repository in scope"
        elif allowed is not None and name not in allowed:
            reasons[name] = "not in this pipeline's expert list"
        else:
            candidates[name] = w
    ranked = sorted(candidates.items(), key=lambda kv: (-kv[1], kv[0]))
    single = False
    if (
        len(ranked) > 1
        and ranked[0][1] >= gate.single_expert_at
        and all(w < gate.single_expert_others_below for _, w in ranked[1:])
    ):
        for name, w in ranked[1:]:
            reasons[name] = f"one expert suffices: {ranked[0][0]} prior {ranked[0][1]} dominates ({w})"
        ranked, single = ranked[:1], True
    cap = min(gate.max_experts, req.budget.max_experts or gate.max_experts)
    for name, w in ranked[cap:]:
        reasons[name] = f"over the expert cap {cap} (prior {w})"
    ranked = ranked[:cap]
    for name, w in ranked:
        reasons[name] = f"selected: prior {w} for {basis}"
    return Selection(experts=dict(ranked), reasons=reasons, single_expert=single)


def adjusted(state: RunState, weights: dict[str, float]) -> dict[str, float]:
    """The priors times the bandit's factors for this class (unchanged with the bandit off, or in
    session scope without a session_id)."""
    spec, c = state.config.priors.bandit, state.classification
    scope = scope_of(spec, state.request.session_id) if spec.enabled else None
    if scope is None or c is None:
        return weights
    klass = "abstained" if c.abstained else c.klass
    state.bandit = state.services.bandit().draw(spec, scope, klass, weights, state.request.hash())
    return dict(state.bandit.weights)
