"""The one module that imports the MCP SDK (``mcp>=2,<3``): server plumbing and a reusable client.

Keeping every ``mcp`` import here makes an SDK rename (v1 ``FastMCP`` → v2 ``MCPServer``, the
v2 low-level ``Server(on_list_tools=..., on_call_tool=...)`` handlers) a one-file change. The
rest of the engine speaks plain types: :class:`ToolSpec`, :class:`ToolReply`, :class:`ToolOutput`.

* Server side (used by :mod:`engine.serve`): :func:`build_server` wraps a :class:`ToolApp` in the
  SDK's low-level ``Server`` (the high-level ``MCPServer`` derives input schemas from Python
  signatures; ours is the request JSON Schema). The app is opened by the server's lifespan, so
  there is one per server lifetime on stdio and on streamable HTTP alike. :func:`http_app` adds
  bearer-token auth in front of the SDK's streamable-HTTP app.
* Client side (used by the ``mcp`` expert): :class:`McpConnection` keeps one session to an
  external server. SDK sessions are task-bound context managers, but an expert is called from
  a different fan-out task on every request (and, from the CLI, from a new event loop each
  run), so the session lives in a private event-loop thread (an anyio blocking portal in a
  daemon thread) and calls are forwarded to it. A call cancelled by the caller's deadline
  cancels the forwarded call too; a server that died is restarted on the next call.
"""

from __future__ import annotations

import hmac
import logging
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from concurrent.futures import Future
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import anyio.from_thread
import httpx2
import mcp_types as types
import pydantic
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

from . import proctree
from .errors import ExpertFailed, ExpertOutputError, ExpertUnavailable

log = logging.getLogger("engine.mcp")


# ---------------------------------------------------------------------------------------------
# server side


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    description: str
    input_schema: Mapping[str, Any]
    title: str | None = None
    read_only: bool = True


@dataclass(frozen=True, slots=True)
class ToolReply:
    text: str
    structured: dict[str, Any] | None = None
    is_error: bool = False


class UnknownTool(LookupError):
    """Raised by a ToolApp for a name it does not serve (a protocol error, not a tool error)."""


class ToolApp(Protocol):
    async def list_tools(self) -> list[ToolSpec]: ...

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolReply: ...


def build_server(
    name: str, version: str, instructions: str, open_app: Callable[[], AbstractAsyncContextManager[ToolApp]]
) -> Server[Any]:
    """A low-level SDK server whose lifespan opens ``open_app()`` once and serves its tools."""

    @asynccontextmanager
    async def lifespan(_server: Server[Any]) -> AsyncIterator[ToolApp]:
        async with open_app() as app:
            yield app

    async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        app: ToolApp = ctx.lifespan_context
        tools = [
            types.Tool(
                name=t.name,
                title=t.title,
                description=t.description,
                input_schema=dict(t.input_schema),
                annotations=types.ToolAnnotations(read_only_hint=t.read_only, open_world_hint=False),
            )
            for t in await app.list_tools()
        ]
        return types.ListToolsResult(tools=tools)

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        app: ToolApp = ctx.lifespan_context
        try:
            reply = await app.call_tool(params.name, dict(params.arguments or {}))
        except UnknownTool as exc:
            raise MCPError(types.INVALID_PARAMS, f"unknown tool {params.name!r}; {exc}") from None
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=reply.text)],
            structured_content=reply.structured,
            is_error=reply.is_error,
        )

    return Server(
        name,
        version=version,
        instructions=instructions,
        lifespan=lifespan,
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
    )


async def run_stdio(server: Server[Any]) -> None:
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


class BearerAuth:
    """ASGI middleware: every HTTP request must carry ``Authorization: Bearer <token>`` (else 401)."""

    def __init__(self, app: Any, token: str) -> None:
        if not token.strip():  # an empty token would let every request in
            raise ValueError("the bearer token is empty")
        self.app = app
        self.expected = token.encode()

    def _authorized(self, header: bytes) -> bool:
        # RFC 7235: the scheme is case-insensitive ("bearer", "BEARER"); the token is compared whole
        scheme, _, token = header.strip().partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self.expected)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            got = next((v for k, v in scope.get("headers", []) if k.lower() == b"authorization"), b"")
            if not self._authorized(got):
                body = b'{"error":"unauthorized","message":"missing or wrong bearer token"}'
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"www-authenticate", b"Bearer"),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def http_app(server: Server[Any], *, host: str, token: str | None, path: str = "/mcp") -> Any:
    """The SDK's streamable-HTTP ASGI app (DNS-rebinding protection on loopback), behind bearer auth."""
    app = server.streamable_http_app(streamable_http_path=path, host=host)
    return BearerAuth(app, token) if token else app


async def run_http(server: Server[Any], *, host: str, port: int, token: str | None) -> None:
    import uvicorn

    config = uvicorn.Config(
        http_app(server, host=host, token=token),
        host=host,
        port=port,
        log_level="info",
        access_log=False,
        lifespan="on",
    )
    await uvicorn.Server(config).serve()


# ---------------------------------------------------------------------------------------------
# client side


@dataclass(frozen=True, slots=True)
class ToolOutput:
    structured: Any
    text: str
    is_error: bool


class McpConnection:
    """One reusable session to an external MCP server (stdio command or streamable-HTTP URL).

    Errors are the engine's: the server cannot be started or reached → ``ExpertUnavailable``;
    it dies or breaks the protocol mid-call → ``ExpertFailed`` (and the next call restarts it);
    a result that is not a valid MCP result → ``ExpertOutputError``. Deadlines are the caller's.
    """

    def __init__(
        self,
        expert: str,
        *,
        command: list[str] | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        url: str | None = None,
        headers: Mapping[str, str] | None = None,
        protocol: str = "auto",
    ) -> None:
        if bool(command) == bool(url):
            raise ValueError("exactly one of command or url")
        self.expert = expert
        self.command, self.env, self.cwd = command, dict(env or {}), cwd
        # a stdio server and everything it starts carry this tag: killed as a tree (engine.proctree)
        self.tag = proctree.new_tag()
        self.url, self.headers, self.protocol = url, dict(headers or {}), protocol
        self._guard = threading.Lock()
        self._portal: anyio.from_thread.BlockingPortal | None = None
        self._root: Future[Any] | None = None
        self._tg: Any = None
        self._lock: anyio.Lock | None = None
        self._stop: anyio.Event | None = None
        self._session: tuple[Client, anyio.Event] | None = None
        self.starts = 0  # how many times a server session was opened (tests: reuse and restart)

    # ---------------------------------------------------------------- the caller's side
    async def call(self, tool: str, arguments: dict[str, Any]) -> ToolOutput:
        portal = await anyio.to_thread.run_sync(self._ensure_portal)
        fut = portal.start_task_soon(self._call, tool, arguments)
        try:
            return await anyio.to_thread.run_sync(fut.result, abandon_on_cancel=True)
        except BaseException:
            fut.cancel()  # the caller's deadline (or shutdown) cancels the forwarded call as well
            if self.command and not fut.done():
                # a stdio server still busy at the deadline dies with its whole tree (setsid
                # children included); the next call starts a fresh one
                proctree.kill_tagged(self.tag)
            raise

    async def aclose(self) -> None:
        await anyio.to_thread.run_sync(self._close_portal)
        if self.command:
            proctree.kill_tagged(self.tag)  # whatever the server left behind

    def _ensure_portal(self) -> anyio.from_thread.BlockingPortal:
        with self._guard:
            if self._portal is None:
                # our own daemon thread (not start_blocking_portal's executor in older anyio): a
                # process that never calls aclose() must still be able to exit
                ready: Future[anyio.from_thread.BlockingPortal] = Future()
                thread = threading.Thread(
                    target=anyio.run, args=(self._portal_main, ready), daemon=True, name=f"mcp-{self.expert}"
                )
                thread.start()
                portal = ready.result(timeout=30)
                self._root, self._tg = portal.start_task(self._root_task)
                self._portal = portal
            return self._portal

    @staticmethod
    async def _portal_main(ready: Future[anyio.from_thread.BlockingPortal]) -> None:
        async with anyio.from_thread.BlockingPortal() as portal:
            ready.set_result(portal)
            await portal.sleep_until_stopped()

    def _close_portal(self) -> None:
        with self._guard:
            if self._portal is None:
                return
            portal, self._portal = self._portal, None
            try:
                if self._stop is not None:
                    portal.call(self._stop.set)
                if self._root is not None:
                    self._root.result(timeout=10)
                portal.call(portal.stop)
            except Exception:  # noqa: BLE001 - closing must not mask the caller's answer
                log.exception("closing MCP session of %s", self.expert)
            finally:
                self._root = None

    # ---------------------------------------------------------------- the portal's side
    async def _root_task(self, *, task_status: Any) -> None:
        self._lock, self._stop = anyio.Lock(), anyio.Event()
        async with anyio.create_task_group() as tg:
            task_status.started(tg)
            await self._stop.wait()
            if self._session is not None:
                self._session[1].set()

    def _client(self) -> Client:
        if self.url:
            http = httpx2.AsyncClient(headers=self.headers, timeout=httpx2.Timeout(30.0, read=300.0))
            return Client(streamable_http_client(self.url, http_client=http), mode=self.protocol)
        assert self.command
        env = {**self.env, proctree.TAG_VAR: self.tag}
        params = StdioServerParameters(command=self.command[0], args=list(self.command[1:]), env=env, cwd=self.cwd)
        return Client(params, mode=self.protocol)

    async def _own_session(self, *, task_status: Any) -> None:
        stop = anyio.Event()
        started = False
        try:
            async with self._client() as client:
                started = True
                task_status.started((client, stop))
                await stop.wait()
        except BaseException as exc:  # noqa: BLE001 - after start, a dying session is just "gone"
            if not started or isinstance(exc, anyio.get_cancelled_exc_class()):
                raise
            log.info("MCP session of %s ended: %s", self.expert, exc)
        finally:
            if self._session is not None and self._session[1] is stop:
                self._session = None

    async def _session_client(self) -> Client:
        assert self._lock is not None
        async with self._lock:
            if self._session is None:
                try:
                    self._session = await self._tg.start(self._own_session)
                except Exception as exc:  # noqa: BLE001 - whatever stops a start: the server is unavailable
                    raise ExpertUnavailable(
                        f"cannot start or reach the MCP server: {_reason(exc)}", expert=self.expert
                    ) from None
                self.starts += 1
            return self._session[0]

    def _drop(self, client: Client) -> None:
        if self._session is not None and self._session[0] is client:
            self._session[1].set()
            self._session = None

    async def _call(self, tool: str, arguments: dict[str, Any]) -> ToolOutput:
        client = await self._session_client()
        try:
            result = await client.call_tool(tool, arguments)
        except MCPError as exc:
            if exc.code == types.CONNECTION_CLOSED:
                self._drop(client)
                raise ExpertFailed(
                    f"the MCP server closed the connection mid-call: {exc.message}", expert=self.expert
                ) from None
            raise ExpertFailed(f"MCP error {exc.code}: {exc.message}", expert=self.expert) from None
        except pydantic.ValidationError as exc:
            raise ExpertOutputError(f"not a valid tool result: {exc.errors()[:1]}", expert=self.expert) from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError) as exc:
            self._drop(client)
            raise ExpertFailed(f"the MCP server went away mid-call: {_reason(exc)}", expert=self.expert) from None
        text = "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))
        return ToolOutput(structured=result.structured_content, text=text, is_error=bool(result.is_error))


def _reason(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"
