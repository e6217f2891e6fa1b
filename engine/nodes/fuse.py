"""fuse: weighted RRF over the scored lists, dedup, tiers, per-file cap, doc/test priors (DESIGN §6.5).

Weights are the gate's per-class priors; ``k``, the per-file diversity cap, the prose-doc and
test-file priors, the snippet cap and the low-confidence threshold come from
``priors.yaml: fusion``. ``mode: separate`` skips cross-expert fusion and returns each expert's
own list, labelled.
"""

from __future__ import annotations

from typing import Any

from ..fusion import cluster_items, cluster_to_item, weighted_rrf
from ..workspace import is_doc_file, is_test_file
from .base import FusedItem, Node, RunState, node_kind


@node_kind
class FuseNode(Node):
    kind = "fuse"
    requires = ("score",)

    async def run(self, state: RunState) -> None:
        assert state.selection is not None
        fusion = state.config.priors.fusion
        k = int(self.settings.get("k", fusion.k))
        weights = dict(state.selection.experts)
        classes = {n: state.config.experts[n].precision_class for n in state.outcomes}
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
            return
        klass = state.classification.klass if state.classification else None
        clusters = cluster_items(state.scored)
        weighted_rrf(clusters, weights, k)
        items: list[dict[str, Any]] = []
        for c in clusters:
            prior = 1.0
            if c.kind != "commit" and c.path:
                if klass != "docs" and is_doc_file(c.path):
                    prior *= fusion.doc_file_prior
                if is_test_file(c.path):
                    prior *= fusion.test_file_prior
            items.append(cluster_to_item(c, weights, k, classes, fusion.snippet_chars, prior))
        items.sort(key=lambda it: (-it["score"], it["project"], it["path"], it["range"]["start_line"]))
        per_file: dict[tuple[str, str], int] = {}
        kept: list[FusedItem] = []
        for it in items:
            key = (it["project"], it["path"] if it["kind"] != "commit" else it["id"])
            if per_file.get(key, 0) >= fusion.per_file_cap:
                continue
            per_file[key] = per_file.get(key, 0) + 1
            kept.append(FusedItem(it, it["score"]))
            if len(kept) >= state.request.limit:
                break
        for rank, f in enumerate(kept, start=1):
            f.item["rank"] = rank
        state.fused = kept
        max_score = sum(weights.values()) / (k + 1) if weights else 0.0
        top = kept[0].score / max_score if kept and max_score else 0.0
        state.confidence = {
            "score": round(top, 4),
            "label": "none" if not kept else ("low" if top < fusion.low_confidence_below else "high"),
        }
