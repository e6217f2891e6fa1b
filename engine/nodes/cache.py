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

Only *complete* answers feed it (:func:`not_kept`): one that an expert crashed in, timed out in,
answered partially or malformed, or that skipped an expert for want of budget, is answered but not
kept — the cause may pass in a second (a load spike, a model still loading), and a kept answer
would repeat it until the entry expires. The receipt says which: ``cache.kept`` and, when
false, ``cache.not_kept`` (the first expert that made it incomplete).
"""

from __future__ import annotations

from typing import Any

from .base import Node, RunState, Skip, node_kind

#: expert statuses a kept answer may have: answered, or a setup state that lasts until something
#: the key sees changes (no index yet: `engine index` changes its generation; not configured)
KEPT_STATUSES = frozenset({"ok", "unconfigured", "unavailable"})
#: why an expert was skipped, that does not pass with the machine's load (the config decided it)
STABLE_SKIPS = frozenset({"early_exit"})


def not_kept(state: RunState) -> str | None:
    """Why this answer must not feed the cache (an expert and its status), or None: it may."""
    if state.error is not None:
        return f"error {state.error.code}"
    for name, o in sorted(state.outcomes.items()):
        if o.status in KEPT_STATUSES or (o.status == "skipped" and o.error_class in STABLE_SKIPS):
            continue
        return f"{name} {o.error_class or o.status}" if o.status == "skipped" else f"{name} {o.status}"
    return None


def receipt_section(state: RunState) -> dict[str, Any]:
    """The receipt's ``cache``: {hit, key}, and for a keyed miss whether the answer is kept."""
    out = dict(state.cache)
    if out.get("key") and not out.get("hit"):
        why = not_kept(state)
        out["kept"] = why is None
        if why is not None:
            out["not_kept"] = why
    return out


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
        changed = hit.changed_file({p.name: p.root for p in state.workspace.projects})
        if changed is not None:  # a file it shows changed since (edited without `engine index`)
            state.cache = {"hit": False, "key": key, "changed": changed}
            return None
        state.cache = {"hit": True, "key": key}
        state.fused = list(hit.items)
        state.fusion_info = dict(hit.fusion)
        state.confidence = hit.confidence
        return Skip(descendants=True)
