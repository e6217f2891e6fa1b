"""fuse: the fused answer (DESIGN §6.5), a thin wrapper over :func:`engine.fusion.fuse`.

Weights are the gate's per-class priors and each lane's own weight; ``k`` (``settings.k`` overrides it per node), the
per-file diversity cap, the prose-doc and test-file priors, the snippet cap and the
low-confidence threshold come from ``priors.yaml: fusion``. ``settings.candidates`` keeps that many
items (at least the request's ``limit``) for a ``rerank`` or ``expand`` node downstream; the
receipt node cuts the answer to ``limit``. ``mode: separate`` skips
cross-expert fusion and returns each expert's own list, labelled, built by the same item
builder (:func:`engine.items.answer_item`).
"""

from __future__ import annotations

from typing import Any

from ..confidence import assess, signals
from ..fusion import contributions, fuse
from ..items import Confidence, answer_item
from ..spec import ConfigSet, PipelineSpec
from ..types import Features
from .base import Node, RunState, node_kind


@node_kind
class FuseNode(Node):
    kind = "fuse"
    settings_keys = frozenset({"candidates", "k"})
    requires = ("score",)

    def validate(self, config: ConfigSet, pipeline: PipelineSpec) -> None:
        for key, most in (("k", 1000), ("candidates", 10_000)):  # k: as priors.yaml fusion.k
            v = self.settings.get(key, 1)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= most:
                raise self.invalid(pipeline, f"settings.{key} {v!r} must be an integer in [1, {most}]", key)

    async def run(self, state: RunState) -> None:
        assert state.selection is not None  # guaranteed by `requires`
        fusion = state.config.priors.fusion
        k = int(self.settings.get("k", fusion.k))
        weights = state.weights()
        state.fusion_info = {
            "method": fusion.method,
            "k": k,
            "weights": weights,
            "per_file_cap": fusion.per_file_cap,
            "doc_file_prior": fusion.doc_file_prior,
            "test_file_prior": fusion.test_file_prior,
        }
        if state.request.mode == "separate":
            state.fusion_info["method"] = "none (mode=separate)"
            state.separate = separate_lists(state)
            return None
        fused = fuse(
            state.scored,
            weights=weights,
            classes={n: o.precision_class for n, o in state.outcomes.items()},
            fusion=fusion,
            k=k,
            klass=state.classification.klass if state.classification else None,
            limit=max(state.request.limit, int(self.settings.get("candidates", 0))),
        )
        state.fused = list(fused.items)
        state.confidence = calibrated(state, k) or fused.confidence
        state.fusion_info["contribution"] = contributions(state.fused, weights, k)
        return None


def separate_lists(state: RunState) -> dict[str, dict[str, Any]]:
    """mode=separate: each expert's own list (at most ``limit`` items), labelled, no cross-expert fusion."""
    snippet = state.config.priors.fusion.snippet_chars
    out: dict[str, dict[str, Any]] = {}
    for name, o in sorted(state.outcomes.items()):
        items = [
            answer_item(
                s.evidence,
                rank=s.rank,
                score=round(float(s.evidence.score), 4),
                subscores=s.subscores,
                flags=s.flags,
                snippet_chars=snippet,
            ).to_dict()
            for s in state.scored.get(name, [])[: state.request.limit]
        ]
        out[name] = {"status": o.status, "precision_class": o.precision_class, "items": items}
        if o.error:
            out[name]["error"] = o.error
    return out


def calibrated(state: RunState, k: int) -> Confidence | None:
    """The answer's calibrated confidence (:mod:`engine.confidence`), or None without a calibration."""
    spec = state.config.priors.confidence
    if spec is None:
        return None
    if not state.fused:
        return assess(None, spec)
    weights = state.weights()
    sig = signals(
        state.fused,
        precision={key: o.precision_class for key, o in state.outcomes.items()},
        returned={key: len(o.items) for key, o in state.outcomes.items()},
        features=state.classification.features if state.classification else Features(),
        max_rrf=sum(weights.values()) / (k + 1) if weights else 0.0,
    )
    return assess(sig, spec)
