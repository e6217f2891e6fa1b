"""Front an HTTP search API as an expert (a company code-search service, a docs search endpoint…).

Settings (experts.yaml ``settings:``)::

    url: http://127.0.0.1:8080/search      # fixed: the question never becomes part of the URL's text
    method: GET                             # GET | POST
    params: {q: "{{ question }}", n: "{{ limit }}"}   # query string (sandboxed jinja2 templates)
    json: {query: "{{ pattern }}"}          # POST body (templates; "{{ var }}" keeps the native type)
    headers: {Accept: application/json}    # templates too
    auth_env: SEARCH_API_TOKEN              # header value read from this environment variable
    auth_header: Authorization              # default Authorization
    auth_prefix: "Bearer "                  # default "Bearer "
    per_project: false                      # true: one request per project in scope
    required: [term]                        # template variables the question must fill
    result: {items: "results", fields: {path: file, line: line, content: snippet}}

    max_response_bytes: 16000000            # the decoded body's cap (default 16 MB)

Errors: a connection that cannot be made (``httpx.TransportError``) → unavailable; a non-2xx
status → internal; a body that is not JSON (or nested past the parser), not of the configured
shape, over ``max_response_bytes`` decoded, not valid HTTP or not in its declared encoding →
malformed. The body is streamed and parsed in a worker thread.

A fresh ``httpx.AsyncClient`` per search: the router may call from a different event loop on
each CLI run, and a pooled client is bound to the loop that created it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx

from ..errors import ExpertFailed, ExpertOutputError, ExpertUnavailable, ExpertUnconfigured
from ..types import Evidence, Query
from .base import settings
from .mapping import ResultMapper, TemplateSet, auth_headers, plan_calls, run_each
from .templated import SHARED_SETTINGS, TemplatedExpert

_TEMPLATED = ("params", "json", "headers")
#: a search API's answer, decoded: the row caps (engine.experts.mapping) read only the first rows
#: anyway; past this the response is malformed, not buffered (``max_response_bytes`` changes it)
MAX_RESPONSE_BYTES = 16_000_000
ERROR_BODY_BYTES = 4096


class HttpExpert(TemplatedExpert):
    adapter = "http"
    settings_schema = settings(
        {
            **SHARED_SETTINGS,
            "url": {"type": "string", "pattern": "^https?://"},
            "method": {"type": "string", "pattern": "^(?i:get|post)$"},
            "params": {"type": "object"},
            "json": {},
            "headers": {"type": "object"},
            "max_response_bytes": {"type": "integer", "minimum": 1024},
        },
        required=["url"],
    )

    def _build(self) -> tuple[TemplateSet, ResultMapper]:
        url = self.settings.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ExpertUnconfigured("settings.url must be an http(s) URL", expert=self.name)
        if str(self.settings.get("method", "GET")).upper() not in ("GET", "POST"):
            raise ExpertUnconfigured("settings.method must be GET or POST", expert=self.name)
        source = {k: self.settings[k] for k in _TEMPLATED if k in self.settings}
        return TemplateSet(self.name, source, "request"), ResultMapper(self.name, self.settings.get("result"))

    def plan(self, query: Query) -> dict[str, Any]:
        templates, _ = self._prepare()
        return {
            "method": str(self.settings.get("method", "GET")).upper(),
            "url": self.settings["url"],
            "calls": plan_calls(self.name, self.settings, templates, query, "request"),
        }

    async def search(self, query: Query, plan: dict[str, Any]) -> list[Evidence]:
        _, mapper = self._prepare()
        auth = auth_headers(self.name, self.settings)
        by_project = {p.name: p for p in query.projects}
        async with httpx.AsyncClient(timeout=httpx.Timeout(self.spec.timeout_ms / 1000 + 1)) as client:

            def one(call: dict[str, Any]) -> Callable[[], Awaitable[list[Evidence]]]:
                async def run() -> list[Evidence]:
                    req = call["request"]
                    headers = {str(k): str(v) for k, v in (req.get("headers") or {}).items()} | auth
                    params = {
                        str(k): v if isinstance(v, (str, int, float)) else str(v)
                        for k, v in (req.get("params") or {}).items()
                    }
                    body = await self._fetch(client, plan["method"], plan["url"], params, req.get("json"), headers)
                    return mapper.evidence(mapper.records_from_json(body), query, by_project.get(call["project"] or ""))

                return run

            chunks = await run_each([one(c) for c in plan["calls"]])
        return [e for chunk in chunks for e in chunk][: query.limit]

    async def _fetch(
        self,
        client: httpx.AsyncClient,
        method: str,
        url: str,
        params: dict[str, Any],
        body: Any,
        headers: dict[str, str],
    ) -> Any:
        limit = int(self.settings.get("max_response_bytes", MAX_RESPONSE_BYTES))
        try:
            async with client.stream(
                method, url, params=params or None, json=body if method == "POST" else None, headers=headers
            ) as resp:
                if resp.is_error:
                    text = (await _read(resp, ERROR_BODY_BYTES, None)).decode("utf-8", "replace")
                    raise ExpertFailed(
                        f"HTTP {resp.status_code} from {url}: {text[:200]}", expert=self.name, status=resp.status_code
                    )
                data = await _read(resp, limit, f"response from {url} is over {limit:,} bytes (max_response_bytes)")
        except ExpertOutputError as exc:
            raise ExpertOutputError(exc.message, expert=self.name) from None
        except (httpx.RemoteProtocolError, httpx.DecodingError) as exc:
            # the host answered, but not in HTTP (a header past h11's buffer) or not in its declared
            # encoding (a broken gzip): its output is malformed, the server is reachable
            raise ExpertOutputError(f"response from {url}: {type(exc).__name__}: {exc}", expert=self.name) from None
        except httpx.TransportError as exc:
            raise ExpertUnavailable(f"cannot reach {url}: {type(exc).__name__}: {exc}", expert=self.name) from None
        try:
            # off the event loop: parsing megabytes there stalled every other expert of the request
            return await anyio.to_thread.run_sync(json.loads, data, abandon_on_cancel=True)
        except (ValueError, RecursionError) as exc:
            reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
            raise ExpertOutputError(f"response from {url} is not JSON: {reason}", expert=self.name) from None


async def _read(resp: httpx.Response, limit: int, over: str | None) -> bytes:
    """The decoded body, at most ``limit`` bytes: past it, ``over`` is raised as malformed output
    (None: the first ``limit`` bytes are enough). A 500 MB body, an endless stream or a gzip bomb
    held the whole of it in memory (2.7 GB for one request)."""
    buf = bytearray()
    async for chunk in resp.aiter_bytes():
        buf += chunk
        if len(buf) > limit:
            if over is None:
                return bytes(buf[:limit])
            raise ExpertOutputError(over, expert="")
    return bytes(buf)
