"""rerank: re-score the top fused items from features, with weights kept in priors.yaml.

Fusion knows ranks only. This node, after ``fuse``, computes for each of the top ``settings.top``
items the features of :mod:`engine.rerank` (each expert's and lane's rank, agreement, identifier
and path overlap with the question, file kinds, definitions, …) and orders them by a linear
score with the weight set ``priors.yaml: rerank.<settings.weights>`` (fitted by ``engine tune
--rerank`` on dev splits). Items below the top keep their order after them. Each item's features
are in its sub-scores (``rr.<feature>``) and its new score in ``rerank``; ``fusion.rerank`` in the
receipt names the weight set.

Settings: ``weights`` (required: a weight set of priors.yaml ``rerank``), ``top`` (default 30).
"""

from __future__ import annotations

from ..rerank import QuestionSignals, known_feature, rerank
from ..spec import ConfigSet, PipelineSpec
from .base import Node, RunState, node_kind
from .fuse import calibrated


@node_kind
class RerankNode(Node):
    kind = "rerank"
    settings_keys = frozenset({"weights", "top"})
    requires = ("fuse",)

    def validate(self, config: ConfigSet, pipeline: PipelineSpec) -> None:
        name = str(self.settings.get("weights"))
        if name not in config.priors.rerank:
            raise self.invalid(
                pipeline,
                f"settings.weights {name!r} is not a weight set of priors.yaml rerank: {sorted(config.priors.rerank)}",
            )
        unknown = [f for f in config.priors.rerank[name] if not known_feature(f)]
        if unknown:
            raise self.invalid(pipeline, f"priors.yaml rerank.{name} names unknown features {unknown}")
        top = self.settings.get("top", 30)
        if isinstance(top, bool) or not isinstance(top, int) or top < 1:
            raise self.invalid(pipeline, f"settings.top {top!r} must be a positive integer")

    async def run(self, state: RunState) -> None:
        if not state.fused:
            return None
        c = state.classification
        assert c is not None  # a fuse upstream implies a classify upstream
        name = str(self.settings["weights"])
        weights = state.config.priors.rerank[name]
        top = int(self.settings.get("top", 30))
        cands, rest = state.fused[:top], state.fused[top:]
        q = QuestionSignals.of(state.question, c.features, [p.name for p in state.workspace.projects])
        state.fused = rerank(cands, q, weights) + [it.ranked(len(cands) + n) for n, it in enumerate(rest, 1)]
        state.fusion_info["rerank"] = {"weights": name, "top": top}
        state.confidence = (
            calibrated(state, int(state.fusion_info.get("k", state.config.priors.fusion.k))) or state.confidence
        )
        return None
