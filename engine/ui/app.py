"""The pages' Starlette app: routes, the template environment and what every page shares.

``engine serve --transport http`` mounts it beside the MCP endpoint (:func:`engine.mcp_server.http_app`);
it reaches the router through a :class:`Backend` (the MCP server's tool app, opened by the
server's lifespan), so the pages and the MCP tools share one Router, one store and one key.

Templates are jinja2 with autoescape on for every template: whatever comes from the workspace
or a question is text, never markup. No Python here builds HTML; charts are geometry
(:mod:`engine.ui.charts`) drawn by a template macro.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import jinja2
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from .. import __version__
from ..runtime import Router, RunResult
from .answers import AnswerMemo
from .security import ASGIApp, CSRFError, Guard

MAX_FORM_BYTES = 1_000_000


class Backend(Protocol):
    """What the pages need from the server: its Router, a way to run a pipeline that schedules the
    deferred work (events, cache rows, snapshots, ingest) like an MCP call does, and a way to say
    the store changed (feedback) so it is ingested soon."""

    @property
    def router(self) -> Router: ...

    async def run(self, pipeline: str, request: dict[str, Any]) -> RunResult: ...

    def changed(self) -> None: ...


@dataclass
class UIState:
    backend: Callable[[], Backend | None]
    env: jinja2.Environment
    token_mode: bool
    answers: AnswerMemo = field(default_factory=AnswerMemo)


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("engine.ui", "templates"),
        autoescape=True,  # every template, whatever its name: workspace text and questions are data
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["engine_version"] = __version__
    return env


def state(request: Request) -> UIState:
    ui: UIState = request.app.state.ui
    return ui


def backend(request: Request) -> Backend:
    got = state(request).backend()
    if got is None:  # the server's lifespan has not opened the router yet
        raise HTTPException(503, "the router is starting; try again in a moment")
    return got


def page(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    ui = state(request)
    html = ui.env.get_template(template).render(
        csrf=request.state.csrf,
        token_mode=ui.token_mode,
        here=request.url.path,
        **context,
    )
    return HTMLResponse(html, status_code=status)


async def in_thread(fn: Callable[[], Any]) -> Any:
    """Blocking work (store reads, git, file reads, secrets scans) off the event loop."""
    return await anyio.to_thread.run_sync(fn)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return page(request, "error.html", exc.status_code, code=exc.status_code, message=exc.detail)


async def _csrf_error(request: Request, exc: Exception) -> Response:
    return page(request, "error.html", 403, code=403, message=f"refused: {exc}")


def routes() -> list[BaseRoute]:
    from . import ask, configs, files, receipts, stats
    from .login import login_form, login_submit, logout

    return [
        Route("/", ask.ask_form, methods=["GET"]),
        Route("/ask", ask.ask_submit, methods=["POST"]),
        Route("/answer/{receipt_id}", ask.answer, methods=["GET"]),
        Route("/feedback", ask.feedback, methods=["POST"]),
        Route("/file", files.file_view, methods=["GET"]),
        Route("/receipts", receipts.receipt_list, methods=["GET"]),
        Route("/receipts/{receipt_id}", receipts.receipt_view, methods=["GET"]),
        Route("/receipts/{receipt_id}/json", receipts.receipt_json, methods=["GET"]),
        Route("/stats", stats.stats_view, methods=["GET"]),
        Route("/config", configs.config_view, methods=["GET"]),
        Route("/config/diff", configs.diff_view, methods=["GET"]),
        Route("/login", login_form, methods=["GET"]),
        Route("/login", login_submit, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Mount("/static", StaticFiles(packages=[("engine.ui", "static")]), name="static"),
    ]


def ui_app(backend: Callable[[], Backend | None], *, token: str | None, loopback: bool) -> ASGIApp:
    """The pages as an ASGI app behind :class:`~engine.ui.security.Guard` (same auth as ``/mcp``)."""
    app = Starlette(
        routes=routes(),
        exception_handlers={HTTPException: _http_error, CSRFError: _csrf_error},
        max_body_size=MAX_FORM_BYTES,
    )
    app.state.ui = UIState(backend, environment(), token_mode=token is not None)
    app.state.token = token
    return Guard(app, token=token, loopback=loopback)
