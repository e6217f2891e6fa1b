"""classify: cheap local rules → intent class, confidence, the rule that fired (DESIGN §6.1).

The rules are data: the config folder's ``classifier.yaml`` (:mod:`engine.classifier`), part of
``config_version``. Order matters: the first rule that holds wins. Below
``priors.classifier.abstain_below`` the classifier abstains and the gate runs the documented
default expert set. A caller's ``intent`` or a class pipeline run directly overrides the rules
(and the receipt says so).
"""

from __future__ import annotations

from ..classifier import classify
from ..types import Classification
from .base import Node, RunState, node_kind


@node_kind
class ClassifyNode(Node):
    kind = "classify"

    async def run(self, state: RunState) -> None:
        if state.classification is not None:  # already classified by the router that dispatched here
            return None
        req = state.request
        c = classify(req.question, state.config.classifier, state.config.priors.abstain_below)
        if req.intent:
            c = Classification(req.intent, 1.0, "caller-intent", False, c.features, c.ignored, c.routed)
        elif state.pipeline.klass:
            pipeline_rule = f"pipeline-class:{state.pipeline.name}"
            c = Classification(state.pipeline.klass, 1.0, pipeline_rule, False, c.features, c.ignored, c.routed)
        state.classification = c
        return None
