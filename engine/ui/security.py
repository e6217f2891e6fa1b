"""Who may see the pages, and how a form proves it came from them (docs/ui.md, docs/security.md).

The same rules as the MCP endpoint (:mod:`engine.mcp_server`):

* **Loopback without a token** (the default): every page is open to this machine. The ``Host``
  header must name a loopback address, so a web page elsewhere cannot reach the pages through
  DNS rebinding (the SDK applies the same rule to ``/mcp``).
* **With a token**: a request carries ``Authorization: Bearer <token>`` (as on ``/mcp``), or the
  session cookie the login form sets after the token was entered once: ``HttpOnly`` (no script
  reads it), ``SameSite=Strict`` (no other site's page sends it), ``Secure`` over https. Its value
  is a time and a nonce, MACed with the token: changing the token logs every browser out.
* **CSRF**: every response sets a random ``engine_csrf`` cookie (``HttpOnly``,
  ``SameSite=Strict``) when the browser has none; every state-changing form carries the same
  value in a hidden field, and :func:`checked_form` refuses a POST whose field does not match the
  cookie or whose ``Origin`` is another site. A page elsewhere can neither read the cookie nor
  make the browser send it.
* Every response carries a Content-Security-Policy allowing only this server's own scripts and
  styles (no inline script runs, even one that escaping somehow let through), ``nosniff``,
  ``frame-ancestors 'none'`` and ``Referrer-Policy: same-origin`` (not ``no-referrer``: with it
  Chromium sends forms with ``Origin: null`` and without the ``SameSite=Strict`` cookies).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Awaitable, Callable, MutableMapping
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import quote, urlsplit

import anyio
from starlette.datastructures import FormData
from starlette.requests import Request

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

SESSION_COOKIE = "engine_session"
CSRF_COOKIE = "engine_csrf"
SESSION_MAX_AGE_S = 12 * 3600
#: paths open without a session: the login form and the stylesheet/script it needs
PUBLIC_PREFIXES = ("/static/", "/login")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
)


class CSRFError(Exception):
    """A state-changing request without the form's proof of origin."""


#: what a wrong token costs (login form and Bearer header alike): slows guessing
WRONG_TOKEN_DELAY_S = 0.5


def small_int(text: str, digits: int = 9) -> int | None:
    """``text`` as a non-negative int when it is ASCII digits only, at most ``digits`` of them
    (``str.isdigit`` also takes ``²``, which ``int`` refuses, and ``int`` refuses 4,300+ digits)."""
    return int(text) if text and len(text) <= digits and text.isascii() and text.isdigit() else None


def host_is_loopback(host: str) -> bool:
    """Is a ``Host`` header (with or without a port) a loopback name? Nothing may follow the name
    but ``:<digits>`` (``[::1]evil.com`` and ``localhost:x@evil.com`` are not loopback)."""
    name = host.strip().lower()
    if name.startswith("["):
        end = name.find("]")
        if end == -1:
            return False
        name, rest = name[: end + 1], name[end + 1 :]
    else:
        name, _, port = name.partition(":")
        rest = f":{port}" if port or host.strip().endswith(":") else ""
    if rest and not (rest.startswith(":") and small_int(rest[1:], 5) is not None):
        return False
    return name in LOOPBACK_HOSTS


def session_value(token: str, now: float | None = None) -> str:
    issued = str(int(time.time() if now is None else now))
    nonce = secrets.token_hex(16)
    return f"{issued}.{nonce}.{_mac(token, issued, nonce)}"


#: sessions ended by a logout before they expired (their nonces; a restart forgets them, and with
#: it every session: the MAC key is the token, the clock is the issue time)
REVOKED: set[str] = set()


def session_ok(token: str, value: str, now: float | None = None) -> bool:
    parts = value.split(".")
    issued = small_int(parts[0], 12) if len(parts) == 3 else None
    if issued is None or parts[1] in REVOKED:
        return False
    age = (time.time() if now is None else now) - issued
    return 0 <= age <= SESSION_MAX_AGE_S and hmac.compare_digest(
        parts[2].encode(), _mac(token, parts[0], parts[1]).encode()
    )


def revoke_session(value: str) -> None:
    """A logout: this session's cookie no longer authorizes, even if kept and replayed."""
    parts = value.split(".")
    if len(parts) == 3:
        REVOKED.add(parts[1])


def _mac(token: str, issued: str, nonce: str) -> str:
    return hmac.new(token.encode(), f"engine-ui-session:{issued}:{nonce}".encode(), hashlib.sha256).hexdigest()


def bearer_ok(token: str, header: str) -> bool:
    scheme, _, value = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(value.encode("utf-8", "replace"), token.encode())


def cookie_header(name: str, value: str, *, secure: bool, max_age: int | None = None) -> bytes:
    parts = [f"{name}={value}", "Path=/", "HttpOnly", "SameSite=Strict"]
    if max_age is not None:
        parts.append(f"Max-Age={max_age}")
    if secure:
        parts.append("Secure")
    return "; ".join(parts).encode()


def cookies_of(scope: Scope) -> dict[str, str]:
    jar: SimpleCookie = SimpleCookie()
    for key, value in scope.get("headers", []):
        if key == b"cookie":
            try:
                jar.load(value.decode("latin-1"))
            except Exception:  # noqa: BLE001 - a malformed Cookie header is no cookie, never a 500
                return {}
    return {k: m.value for k, m in jar.items()}


def local_path(target: str | None, default: str = "/") -> str:
    """``target`` when it is a path on this server (``/x``), else ``default``: no open redirects."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return default
    return target


async def checked_form(request: Request) -> FormData:
    """The POSTed form, once its CSRF field matches the cookie and its ``Origin`` is this server.

    Raises:
        CSRFError: the proof is missing or wrong.
    """
    origin = request.headers.get("origin")
    # host only: behind a TLS-terminating proxy the page is https while this server sees http
    if origin is not None and urlsplit(origin).netloc != request.headers.get("host", ""):
        raise CSRFError(f"cross-origin form from {origin!r}")
    form = await request.form()
    sent, cookie = form.get("csrf"), request.cookies.get(CSRF_COOKIE)
    if not isinstance(sent, str) or not cookie or not hmac.compare_digest(sent.encode(), cookie.encode()):
        raise CSRFError("the form's CSRF token does not match this browser's")
    return form


class Guard:
    """ASGI middleware in front of the pages: host check, auth, the CSRF cookie, security headers."""

    def __init__(self, app: ASGIApp, *, token: str | None, loopback: bool) -> None:
        self.app = app
        self.token = token
        self.loopback = loopback

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if self.loopback and not host_is_loopback(headers.get(b"host", "")):
            await _plain(send, 421, "this server answers only to a loopback Host (127.0.0.1, localhost, [::1])")
            return
        cookies = cookies_of(scope)
        path = scope.get("path", "/")
        if not self._authorized(headers, cookies) and not path.startswith(PUBLIC_PREFIXES):
            if headers.get(b"authorization"):  # a wrong token costs what it costs at the login form
                await anyio.sleep(WRONG_TOKEN_DELAY_S)
            if scope.get("method") == "GET" and "text/html" in headers.get(b"accept", ""):
                query = scope.get("query_string", b"").decode("latin-1")
                back = path + (f"?{query}" if query else "")
                await _redirect(send, f"/login?next={quote(back, safe='')}")
            else:
                await _plain(send, 401, "log in at /login or send 'Authorization: Bearer <token>'")
            return
        csrf = cookies.get(CSRF_COOKIE) or ""
        fresh = not (len(csrf) == 64 and all(c in "0123456789abcdef" for c in csrf))
        if fresh:
            csrf = secrets.token_hex(32)
        scope.setdefault("state", {})["csrf"] = csrf
        scope["state"]["authenticated_by_token"] = self.token is not None
        secure = scope.get("scheme") == "https"

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                extra = list(SECURITY_HEADERS)
                if fresh:
                    extra.append((b"set-cookie", cookie_header(CSRF_COOKIE, csrf, secure=secure)))
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def _authorized(self, headers: dict[bytes, str], cookies: dict[str, str]) -> bool:
        if self.token is None:
            return True
        if bearer_ok(self.token, headers.get(b"authorization", "")):
            return True
        return session_ok(self.token, cookies.get(SESSION_COOKIE, ""))


async def _plain(send: Send, status: int, text: str) -> None:
    body = text.encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                *SECURITY_HEADERS,
                *([(b"www-authenticate", b"Bearer")] if status == 401 else []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _redirect(send: Send, location: str) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 303,
            "headers": [(b"location", location.encode("latin-1")), (b"content-length", b"0"), *SECURITY_HEADERS],
        }
    )
    await send({"type": "http.response.body", "body": b""})
