"""score: per-item sub-scores, each from something real (DESIGN §6.4).

* ``native`` — the expert's own score, normalised to [0, 1] by the best in its list;
* ``precision`` — what the expert's precision class is worth (:data:`engine.types.PRECISION`);
* ``freshness`` — 1.0 for live experts and fresh index entries, 0.0 for a file changed since it
  was indexed; missing (and flagged ``freshness-unknown``) for experts that cannot tell;
* ``scope`` — 1.0; items outside the request scope are dropped here as a last guard.

Writes ``state.scored``: each expert's (and each lane's) :class:`~engine.items.ScoredItem` list,
best first. A second score node (after a second fan-out) scores only the outcomes not scored yet,
so what an ``aggregate`` node did to the first lists stays.
"""

from __future__ import annotations

from ..items import ScoredItem
from ..types import PRECISION
from ..workspace import in_scope
from .base import Node, RunState, node_kind


@node_kind
class ScoreNode(Node):
    kind = "score"
    requires = ("fanout",)

    async def run(self, state: RunState) -> None:
        scope = state.request.scope
        filtered = bool(scope.path or scope.language)
        for name, outcome in sorted(state.outcomes.items()):
            if name in state.scored:
                continue
            spec = state.config.experts[outcome.expert]  # a lane's key names its expert
            items = outcome.items
            if filtered:
                items = [e for e in items if e.kind == "commit" or not e.path or in_scope(e.path, scope)]
            best = max((e.score for e in items), default=0.0)
            precision = PRECISION[spec.precision_class].score
            knows_freshness = spec.freshness in ("live", "index")
            scored: list[ScoredItem] = []
            for rank, e in enumerate(items, start=1):
                sub: dict[str, float] = {
                    "native": round(e.score / best, 4) if best > 0 else 0.0,
                    "precision": precision,
                    "scope": 1.0,
                }
                flags = e.flags if type(e.flags) is tuple else tuple(e.flags)
                if "file-changed-since-indexed" in flags:
                    sub["freshness"] = 0.0
                elif knows_freshness:
                    sub["freshness"] = 1.0
                else:
                    flags = (*flags, "freshness-unknown")
                scored.append(ScoredItem(e, rank, sub, flags))
            state.scored[name] = scored
        return None
