"""The login form (token mode only): the token is entered once and kept as a session cookie."""

from __future__ import annotations

import anyio
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from .pages import page, state
from .security import (
    SESSION_COOKIE,
    SESSION_MAX_AGE_S,
    WRONG_TOKEN_DELAY_S,
    bearer_ok,
    checked_form,
    cookie_header,
    local_path,
    revoke_session,
    session_value,
)


def _token(request: Request) -> str | None:
    token: str | None = request.app.state.token
    return token


async def login_form(request: Request) -> Response:
    nxt = local_path(request.query_params.get("next"))
    if not state(request).token_mode:
        return RedirectResponse(nxt, status_code=303)
    return page(request, "login.html", next=nxt, problem=None)


async def login_submit(request: Request) -> Response:
    form = await checked_form(request)
    nxt = local_path(str(form.get("next") or ""))
    token = _token(request)
    if token is None:
        return RedirectResponse(nxt, status_code=303)
    given = str(form.get("token") or "")
    if not given or not bearer_ok(token, f"Bearer {given}"):
        await anyio.sleep(WRONG_TOKEN_DELAY_S)
        return page(request, "login.html", 401, next=nxt, problem="That token is not the server's token.")
    response = RedirectResponse(nxt, status_code=303)
    secure = request.url.scheme == "https"
    response.raw_headers.append(
        (b"set-cookie", cookie_header(SESSION_COOKIE, session_value(token), secure=secure, max_age=SESSION_MAX_AGE_S))
    )
    return response


async def logout(request: Request) -> Response:
    await checked_form(request)
    revoke_session(request.cookies.get(SESSION_COOKIE, ""))  # a copy of the cookie must not outlive it
    response = RedirectResponse("/login" if state(request).token_mode else "/", status_code=303)
    secure = request.url.scheme == "https"
    response.raw_headers.append((b"set-cookie", cookie_header(SESSION_COOKIE, "", secure=secure, max_age=0)))
    return response
