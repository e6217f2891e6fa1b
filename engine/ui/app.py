"""The pages' Starlette app: the routes and the app itself (what every page shares: :mod:`engine.ui.pages`).

``engine serve --transport http`` mounts it beside the MCP endpoint (:func:`engine.mcp_server.http_app`);
it reaches the router through a :class:`Backend` (the MCP server's tool app, opened by the
server's lifespan), so the pages and the MCP tools share one Router, one store and one key.

Templates are jinja2 with autoescape on for every template: whatever comes from the workspace
or a question is text, never markup. No Python here builds HTML; charts are geometry
(:mod:`engine.ui.charts`) drawn by a template macro.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from . import ask, configs, files, receipts, stats
from .login import login_form, login_submit, logout
from .pages import Backend, UIState, environment, page
from .security import ASGIApp, CSRFError, Guard

MAX_FORM_BYTES = 1_000_000


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return page(request, "error.html", exc.status_code, code=exc.status_code, message=exc.detail)


async def _csrf_error(request: Request, exc: Exception) -> Response:
    return page(request, "error.html", 403, code=403, message=f"refused: {exc}")


def routes() -> list[BaseRoute]:
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
