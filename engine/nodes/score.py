"""score: per-item sub-scores, each from something real (DESIGN §6.4).

* ``native`` — the expert's own score, normalised to [0, 1] by the best in its list;
* ``precision`` — what the expert's precision class is worth (:data:`PRECISION_SCORE`);
* ``freshness`` — 1.0 for live experts and fresh index entries, 0.0 for a file changed since it
  was indexed; missing (and flagged ``freshness-unknown``) for experts that cannot tell;
* ``scope`` — 1.0; items outside the request scope are dropped here as a last guard.
"""

from __future__ import annotations

from typing import Any

from ..workspace import in_scope
from .base import Node, RunState, node_kind

PRECISION_SCORE = {
    "typed": 1.0,
    "structural": 0.9,
    "hybrid": 0.85,
    "lexical": 0.75,
    "semantic": 0.6,
    "docs": 0.5,
    "history": 0.5,
}


@node_kind
class ScoreNode(Node):
    kind = "score"
    requires = ("fanout",)

    async def run(self, state: RunState) -> None:
        scope = state.request.scope
        for name, outcome in sorted(state.outcomes.items()):
            spec = state.config.experts[name]
            items = [e for e in outcome.items if e.kind == "commit" or not e.path or in_scope(e.path, scope)]
            best = max((e.score for e in items), default=0.0)
            scored: list[dict[str, Any]] = []
            for rank, e in enumerate(items, start=1):
                sub: dict[str, Any] = {
                    "native": round(e.score / best, 4) if best > 0 else 0.0,
                    "precision": PRECISION_SCORE[spec.precision_class],
                    "scope": 1.0,
                }
                flags = list(e.flags)
                if "file-changed-since-indexed" in flags:
                    sub["freshness"] = 0.0
                elif spec.freshness in ("live", "index"):
                    sub["freshness"] = 1.0
                else:
                    flags.append("freshness-unknown")
                scored.append({"evidence": e, "rank": rank, "subscores": sub, "flags": flags})
            state.scored[name] = scored
