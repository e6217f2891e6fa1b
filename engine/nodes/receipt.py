"""receipt: build the receipt's body, then have it signed and stored (DESIGN §5). A finalizer: it
runs even after a failure or a cache hit.

This module owns the body (:func:`build_receipt`); signing and storage are one call to the
runtime (:meth:`~engine.nodes.base.Services.store_receipt`), done before the response exists
(the spool line is written then and fsync'ed after the answer, ADR 0007). When that fails the
request fails with ``receipt_error`` (there is no unlogged path). Idempotent per run: a class
pipeline dispatched by the router writes it, the router's own receipt node then has nothing
left to do.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from .. import __version__
from ..hints import HINT_LANE
from .base import Node, RunState, node_kind
from .cache import receipt_section

#: what a receipt repeats of a long question — the experts' sub-queries, the hint keys — is cut at
#: this many characters: the request keeps the question whole, once (a 64 KB question was carried
#: five times, and its MCP answer dropped every item to fit)
REPEATED_TEXT_MAX = 2000


def bounded(value: Any, limit: int = REPEATED_TEXT_MAX) -> Any:
    """``value`` with every string longer than ``limit`` cut, saying how much was left out."""
    if isinstance(value, str):
        return value if len(value) <= limit else f"{value[:limit]}…[+{len(value) - limit} chars]"
    if isinstance(value, dict):
        return {k: bounded(v, limit) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [bounded(v, limit) for v in value]
    return value


def build_receipt(state: RunState) -> dict[str, Any]:
    req, sel, c = state.request, state.selection, state.classification
    del state.fused[req.limit :]  # nodes before may keep more candidates (for a rerank); the answer is `limit`
    status = "ok" if state.error is None else state.error.code
    receipt: dict[str, Any] = {
        "receipt_id": uuid.uuid4().hex,
        "created_at": state.created_at or datetime.now(UTC).isoformat(timespec="milliseconds"),
        "engine_version": __version__,
        "request_hash": req.hash(),
        "request": req.to_dict(),
        "config_version": state.config_version,
        "config": {"path": str(state.config.root), "source": state.config.source},
        "pipeline": " → ".join(state.pipelines_run) or state.pipeline.name,
        "classifier": c.to_dict() if c else {"class": None, "confidence": 0.0, "rule": "not-run", "abstained": False},
        "experts_selected": {
            "selected": list(sel.experts) if sel else [],
            "single_expert": bool(sel and sel.single_expert),
            "why": dict(sorted(sel.reasons.items())) if sel else {},
        },
        "sub_queries": {n: o.sub_query for n, o in sorted(state.outcomes.items())},
        **({"lanes": {k: lane.to_receipt() for k, lane in sorted(state.lanes.items())}} if state.lanes else {}),
        **({"trace": state.trace} if state.trace else {}),
        **({"hints": state.hints.to_receipt()} if state.hints is not None else {}),
        **({"bandit": state.bandit.to_receipt()} if state.bandit is not None else {}),
        "per_expert": {n: o.to_receipt() for n, o in sorted(state.outcomes.items())},
        "budget": {
            "asked": req.budget.to_dict(),
            "spent": {
                "latency_ms": round(state.elapsed_ms(), 2),
                "experts": sum(o.expert != HINT_LANE for o in state.outcomes.values()),  # the hint lane calls none
                "nodes_ms": dict(state.node_ms),  # each node's own run time, "<pipeline>.<node>"
            },
        },
        "fusion": state.fusion_info or {"method": "none"},
        "cache": receipt_section(state),
        "result_count": len(state.fused)
        if state.request.mode == "fused"
        else sum(len(o.items) for o in state.outcomes.values()),
        "returned": returned_items(state),
        "status": status,
    }
    if len(req.question) > REPEATED_TEXT_MAX:  # only a long question makes long sub-queries
        for key in ("sub_queries", "lanes", "hints", "trace"):
            if key in receipt:
                receipt[key] = bounded(receipt[key])
    if state.reserve_ms is not None:  # kept for after the experts' deadline (engine.deadlines)
        receipt["budget"]["reserved_ms"] = round(state.reserve_ms, 1)
    heads = state.heads.read() if state.heads is not None else None
    if heads is not None:  # stated once; per_expert freshness names only the stale projects
        receipt["heads"] = dict(sorted(heads.items()))
    if state.confidence is not None:
        receipt["confidence"] = state.confidence.to_dict()
    if state.error is not None:
        receipt["error"] = state.error.to_dict()
    return receipt


def returned_items(state: RunState) -> list[dict[str, Any]]:
    """Each item the answer returns: its id, fused rank and which experts found it at which rank
    (in separate mode, every expert list the id appears in). Feedback is checked against these."""
    if state.request.mode == "separate":
        found: dict[str, dict[str, int]] = {}
        for name, listed in sorted(state.separate.items()):
            for it in listed.get("items", ()):
                found.setdefault(str(it["id"]), {})[name] = int(it["rank"])
        return [{"id": i, "experts": e} for i, e in found.items()]
    return [{"id": it.id, "rank": it.rank, "experts": {s.expert: s.rank for s in it.sources}} for it in state.fused]


def write_receipt(state: RunState) -> None:
    """Build, sign and store the run's receipt (once per run)."""
    if state.receipt is None:
        state.receipt = state.services.store_receipt(build_receipt(state))


@node_kind
class ReceiptNode(Node):
    kind = "receipt"
    finalizer = True

    async def run(self, state: RunState) -> None:
        write_receipt(state)
        return None
