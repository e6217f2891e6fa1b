"""cache: answer a repeated question from the answer cache, as a stage of the graph (DESIGN §6).

Placed after the gate (``requires``), so a cached answer's receipt carries the same
classification, pipeline path and expert selection as the answer it repeats, plus
``cache: {hit: true, key}``. On a hit the node fills the fused answer from the cache and returns
``Skip(descendants=True)``: fan-out, score and fuse do not run, the receipt (a finalizer) does.
On a miss it records the key; the runtime stores the new answer under it after the response is
out (off the hot path).

The key hashes the config_version, the request, the workspace, every project's HEAD and every
index's state (:meth:`~engine.nodes.base.Services.cache_key`), so any change that can change an
answer is a miss. Only fused answers are cached; a ``no_cache`` request neither reads nor feeds it.
"""

from __future__ import annotations

from .base import Node, RunState, Skip, node_kind


@node_kind
class CacheNode(Node):
    kind = "cache"
    requires = ("gate",)

    async def run(self, state: RunState) -> Skip | None:
        req = state.request
        if req.no_cache or req.mode != "fused":
            return None
        key = state.services.cache_key(req, state.config_version)
        state.cache = {"hit": False, "key": key}
        hit = state.services.cached_answer(key)
        if hit is None:
            return None
        state.cache = {"hit": True, "key": key}
        state.fused = list(hit.items)
        state.fusion_info = dict(hit.fusion)
        state.confidence = hit.confidence
        return Skip(descendants=True)
