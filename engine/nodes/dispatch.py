"""dispatch: hand the classified question to its class pipeline (the router's second step).

``settings.routes`` maps each class to a pipeline name; ``settings.default`` takes abstentions
(and any class without a route). The node returns a :class:`~engine.nodes.base.RunPipeline`
directive and the scheduler runs the target in the same run state, so its receipt shows
the whole path (``router → identifier``) under the router's config_version, which hashes every
pipeline the router can reach.
"""

from __future__ import annotations

from ..spec import ConfigSet, PipelineSpec
from ..types import CLASSES
from .base import Node, RunPipeline, RunState, node_kind


@node_kind
class DispatchNode(Node):
    kind = "dispatch"
    settings_keys = frozenset({"routes", "default"})
    requires = ("classify",)

    def validate(self, config: ConfigSet, pipeline: PipelineSpec) -> None:
        routes = self.settings.get("routes")
        if not isinstance(routes, dict) or not routes:
            raise self.invalid(pipeline, "needs settings.routes: {class: pipeline}", "routes")
        targets = [*routes.items(), ("default", self.settings.get("default"))]
        for klass, target in targets:
            if klass != "default" and klass not in CLASSES:
                message = f"settings.routes names unknown class {klass!r}; classes: {list(CLASSES)}"
                raise self.invalid(pipeline, message, "routes", klass)
            if target is None and klass == "default":
                raise self.invalid(pipeline, "needs settings.default")
            if not isinstance(target, str) or target not in config.pipelines or target == pipeline.name:
                raise self.invalid(
                    pipeline,
                    f"route {klass} → {target!r} is not another pipeline; pipelines: {sorted(config.pipelines)}",
                    *(("default",) if klass == "default" else ("routes", klass)),
                )

    async def run(self, state: RunState) -> RunPipeline:
        c = state.classification
        assert c is not None  # guaranteed by `requires`
        routes = self.settings["routes"]
        target = self.settings["default"] if c.abstained else routes.get(c.klass, self.settings["default"])
        return RunPipeline(str(target))
