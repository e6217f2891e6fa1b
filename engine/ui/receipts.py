"""The receipt browser: filter by class, status, pipeline, time and config version; each receipt
rendered readably with its signature checked on the server against the pinned keys
(:func:`engine.receipts.verify_pinned`, never the key a receipt names), raw JSON one click away."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from ..errors import EngineError
from ..receipts import verify_pinned
from ..store import ReceiptQuery
from .pages import backend, in_thread, page
from .security import small_int

FILTERS = ("class", "status", "pipeline", "config_version", "since", "until", "limit")
STATUSES = ("ok", "invalid_request", "zero_expert_gate", "receipt_error", "node_error")
DEFAULT_LIMIT = 50


def when(text: str) -> str | None:
    """A ``datetime-local`` value (``2026-12-01T10:00``, read as UTC) or an ISO time → the stores' form."""
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise HTTPException(400, f"not a time: {text!r} (use YYYY-MM-DDTHH:MM, UTC)") from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC).isoformat(timespec="milliseconds")
    except OverflowError:  # year 1 or 9999 with an offset: outside what a datetime holds in UTC
        raise HTTPException(400, f"not a time: {text!r} (out of range)") from None


def query_of(values: dict[str, str]) -> ReceiptQuery:
    limit = values["limit"]
    return ReceiptQuery(
        klass=values["class"] or None,
        status=values["status"] or None,
        pipeline=values["pipeline"] or None,
        config_version=values["config_version"] or None,
        since=when(values["since"]),
        until=when(values["until"]),
        limit=min(small_int(limit) or DEFAULT_LIMIT, 1000),
    )


async def receipt_list(request: Request) -> Response:
    router = backend(request).router
    values = {k: request.query_params.get(k, "").strip() for k in FILTERS}
    query = query_of(values)
    cfg = router.config()
    rows, snapshots = await in_thread(lambda: (router.store.list_receipts(query), router.store.list_config_snapshots()))
    return page(
        request,
        "receipts.html",
        values=values,
        rows=rows,
        limit=query.limit,
        classes=sorted(cfg.priors.classes),
        statuses=STATUSES,
        pipelines=sorted(cfg.pipelines),
        versions=[s.config_version for s in reversed(snapshots)],
    )


def verification(body: dict[str, Any], pinned: list[str]) -> dict[str, Any]:
    why = verify_pinned(body, pinned)
    return {"ok": why is None, "why": why, "pinned": len(pinned)}


async def _load(request: Request) -> tuple[dict[str, Any], list[str]]:
    router = backend(request).router
    rid = request.path_params["receipt_id"]

    def read() -> tuple[dict[str, Any] | None, dict[str, str | None]]:
        return router.store.get_receipt(rid), router.receipt_log.keys.verification_keys()

    try:
        body, pinned = await in_thread(read)
    except EngineError as exc:  # a damaged store or an unreadable pinned-keys file
        raise HTTPException(503, f"{exc.code}: {exc.message}") from None
    if body is None:
        raise HTTPException(404, f"no receipt {rid!r}")
    return body, pinned


async def receipt_view(request: Request) -> Response:
    body, pinned = await _load(request)
    router = backend(request).router
    feedback = await in_thread(lambda: router.store.list_feedback(str(body.get("receipt_id"))))
    return page(
        request,
        "receipt.html",
        r=body,
        check=verification(body, pinned),
        feedback=feedback,
        raw=json.dumps(body, ensure_ascii=False, indent=2),
    )


async def receipt_json(request: Request) -> Response:
    body, _ = await _load(request)
    return Response(
        json.dumps(body, ensure_ascii=False, indent=2),
        media_type="application/json",
        headers={"content-disposition": f'inline; filename="receipt-{_safe(body.get("receipt_id"))}.json"'},
    )


def _safe(value: Any) -> str:
    return "".join(c for c in str(value) if c.isascii() and c.isalnum())[:64]
