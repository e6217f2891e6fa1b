"""fuse: the fused answer (DESIGN §6.5), a thin wrapper over :func:`engine.fusion.fuse`.

Weights are the gate's per-class priors; ``k`` (``settings.k`` overrides it per node), the
per-file diversity cap, the prose-doc and test-file priors, the snippet cap and the
low-confidence threshold come from ``priors.yaml: fusion``. ``mode: separate`` skips
cross-expert fusion and returns each expert's own list, labelled, built by the same item
builder (:func:`engine.items.answer_item`).
"""

from __future__ import annotations

from typing import Any

from ..fusion import fuse
from ..items import answer_item
from .base import Node, RunState, node_kind


@node_kind
class FuseNode(Node):
    kind = "fuse"
    requires = ("score",)

    async def run(self, state: RunState) -> None:
        assert state.selection is not None  # guaranteed by `requires`
        fusion = state.config.priors.fusion
        k = int(self.settings.get("k", fusion.k))
        weights = dict(state.selection.experts)
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
            classes={n: state.config.experts[n].precision_class for n in state.outcomes},
            fusion=fusion,
            k=k,
            klass=state.classification.klass if state.classification else None,
            limit=state.request.limit,
        )
        state.fused = list(fused.items)
        state.confidence = fused.confidence
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
