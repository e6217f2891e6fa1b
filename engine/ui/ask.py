"""The Ask page: a question with scope, mode and budget in; ranked evidence, tiers, lanes, the
confidence and useful / not-useful buttons out (feedback checked against the receipt)."""

from __future__ import annotations

import uuid
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from ..errors import EngineError, InvalidRequest, StoreError
from ..store import Feedback
from ..workspace import LANGUAGES
from .answers import Answer, answer_view, verdicts_of
from .pages import backend, in_thread, page, state
from .security import checked_form, local_path, small_int

FIELDS = ("question", "pipeline", "project", "path", "language", "mode", "budget_ms", "limit")
DEFAULTS = {"pipeline": "router", "mode": "fused", "budget_ms": "", "limit": "10"}
VERDICTS = {"useful": "useful", "not_useful": "not useful"}


def choices(request: Request) -> dict[str, Any]:
    router = backend(request).router
    cfg = router.config()
    pipelines = sorted(cfg.pipelines, key=lambda n: (n != "router", n))
    return {
        "pipelines": pipelines,
        "projects": [p.name for p in router.workspace.projects],
        "languages": sorted(LANGUAGES),
    }


def build_request(values: dict[str, str]) -> dict[str, Any]:
    """The request JSON a form asks for. Numbers that are not numbers are passed on as they are:
    the router answers them with a receipted ``invalid_request`` naming the field."""
    req: dict[str, Any] = {"question": values["question"], "mode": values["mode"] or "fused", "format": "json"}
    scope = {k: values[k] for k in ("project", "path", "language") if values[k]}
    if scope:
        req["scope"] = scope
    if values["budget_ms"]:
        req["budget"] = {"latency_ms": _number(values["budget_ms"])}
    if values["limit"]:
        req["limit"] = _number(values["limit"])
    return req


def _number(text: str) -> int | str:
    """A number field: an int when it is one (the router's schema then checks its range), else the
    text, which the schema refuses with a clear message."""
    n = small_int(text)
    return text if n is None else n


async def ask_form(request: Request) -> Response:
    form = {**dict.fromkeys(FIELDS, ""), **DEFAULTS}
    return page(request, "ask.html", form=form, choices=choices(request), answer=None, problem=None)


async def ask_submit(request: Request) -> Response:
    posted = await checked_form(request)
    values = {k: str(posted.get(k) or "").strip() for k in FIELDS}
    values["question"] = str(posted.get("question") or "")  # the question as typed: spaces are data too
    pipeline = values["pipeline"] or "router"
    if pipeline not in backend(request).router.config().pipelines:  # a name, never a path the server looks up
        problem = {"error": "invalid_request", "message": f"unknown pipeline {pipeline[:100]!r}", "field": "pipeline"}
        return page(request, "ask.html", 400, form=values, choices=choices(request), answer=None, problem=problem)
    try:
        result = await backend(request).run(pipeline, build_request(values))
    except EngineError as exc:  # an unknown pipeline, a config that cannot load: no run happened
        return page(request, "ask.html", 400, form=values, choices=choices(request), answer=None, problem=exc.to_dict())
    rid = str(result.response["receipt"]["receipt_id"])
    state(request).answers.put(rid, Answer(values, pipeline, result.response))
    return RedirectResponse(f"/answer/{rid}", status_code=303)


async def answer(request: Request) -> Response:
    rid = request.path_params["receipt_id"]
    held = state(request).answers.get(rid)
    if held is None:
        raise HTTPException(404, f"answer {rid} is no longer held by this server; its receipt is at /receipts/{rid}")
    router = backend(request).router
    feedback = await in_thread(lambda: router.store.list_feedback(rid))
    view = answer_view(held, verdicts_of(feedback), router.config().priors)
    return page(request, "ask.html", form=held.form, choices=choices(request), answer=view, problem=None)


async def feedback(request: Request) -> Response:
    posted = await checked_form(request)
    rid, item = str(posted.get("receipt_id") or ""), str(posted.get("item_id") or "")
    verdict = str(posted.get("verdict") or "")
    wants_json = "application/json" in request.headers.get("accept", "")
    if verdict not in VERDICTS or not rid or not item:
        return _refused(wants_json, 400, "receipt_id, item_id and verdict (useful | not_useful) are required")
    useful = verdict == "useful"
    fb = Feedback(
        feedback_id=uuid.uuid4().hex,
        receipt_id=rid,
        useful_item_ids=(item,) if useful else (),
        not_useful_item_ids=() if useful else (item,),
        note="web UI",
    )
    b = backend(request)
    try:
        await in_thread(lambda: b.router.record_feedback(fb))  # the store checks it against the receipt
    except InvalidRequest as exc:
        return _refused(wants_json, 400, exc.message)
    except StoreError as exc:
        return _refused(wants_json, 503, exc.message)
    b.changed()
    if wants_json:
        return JSONResponse({"feedback_id": fb.feedback_id, "item_id": item, "verdict": VERDICTS[verdict]})
    return RedirectResponse(local_path(str(posted.get("back") or ""), f"/receipts/{rid}"), status_code=303)


def _refused(wants_json: bool, status: int, message: str) -> Response:
    if wants_json:
        code = "invalid_request" if status == 400 else "store_error"
        return JSONResponse({"error": code, "message": message}, status)
    raise HTTPException(status, message)
