"""What every page shares: the :class:`Backend` it reaches the router through, the UI's state on the
Starlette app, the template environment, and the helpers a page handler calls (:func:`page`,
:func:`backend`, :func:`in_thread`). The routes that use them are in :mod:`engine.ui.app`.

Templates are jinja2 with autoescape on for every template: whatever comes from the workspace
or a question is text, never markup. No Python here builds HTML.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import jinja2
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse

from .. import __version__
from ..runtime import Router, RunResult
from .answers import AnswerMemo


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
