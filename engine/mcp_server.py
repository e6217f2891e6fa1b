"""The server side of MCP (``mcp>=2,<3``): one of the two modules importing the SDK (the client
side is :mod:`engine.mcp_client`).

Keeping every ``mcp`` import in these two modules makes an SDK rename (v1 ``FastMCP`` → v2
``MCPServer``, the v2 low-level ``Server(on_list_tools=..., on_call_tool=...)`` handlers) a
two-file change. The rest of the engine speaks plain types: :class:`ToolSpec`, :class:`ToolReply`.

* :func:`build_server` wraps a :class:`ToolApp` (:mod:`engine.serve`) in the SDK's low-level
  ``Server`` (the high-level ``MCPServer`` derives input schemas from Python signatures; ours is
  the request JSON Schema). The app is opened by the server's lifespan, so there is one per
  server lifetime on stdio and on streamable HTTP alike.
* :func:`run_stdio` serves newline-delimited JSON-RPC on stdin/stdout with our own reader, so
  that every line gets an answer: a line that is not JSON gets a JSON-RPC parse error (-32700,
  ``id: null``), JSON that is not a JSON-RPC message an invalid-request error (-32600), and a
  message carrying text the SDK's strict JSON parser refuses (a lone surrogate, ``"x \\ud800"``)
  is read with Python's parser and reaches the tool, which answers it as ``invalid_request``.
  The SDK's own reader drops such lines and the client waits forever.
* :func:`http_app` adds bearer-token auth in front of the SDK's streamable-HTTP app, and mounts
  the web UI (:mod:`engine.ui`) at every other path.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, BinaryIO, Protocol

import anyio
import mcp_types as types
import pydantic
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

log = logging.getLogger("engine.mcp")


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


async def run_stdio(server: Server[Any], stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> int | None:
    """Serve ``server`` over newline-delimited JSON-RPC until stdin closes, or (serving the
    process's own stdio) until SIGTERM, SIGHUP or SIGINT: then returns the signal's number, after
    the server's lifespan has closed (the caller must not wait for the stdin reader: a worker
    thread blocked in ``readline`` until the client closes the pipe).

    While serving, fd 0 reads the null device and fd 1 writes to stderr, so child processes and a
    stray ``print`` (ours or a library's) cannot touch the wire; the wire is a private duplicate
    of each (what the SDK's own stdio transport does).
    """
    restore: Callable[[], None] | None = None
    if stdin is None or stdout is None:
        stdin, stdout, restore = _claim_stdio()
    wire_in, wire_out = stdin, stdout
    read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](0)

    async def reader() -> None:
        async with read_send:
            while line := await anyio.to_thread.run_sync(wire_in.readline, abandon_on_cancel=True):
                if not line.strip():
                    continue
                message, error = parse_line(line)
                if message is not None:
                    await read_send.send(SessionMessage(message))
                elif error is not None:
                    await write_send.send(SessionMessage(error))

    async def writer() -> None:
        async with write_recv:
            async for session_message in write_recv:
                data = session_message.message.model_dump_json(by_alias=True, exclude_unset=True)
                try:
                    await anyio.to_thread.run_sync(_write_line, wire_out, data)
                except (BrokenPipeError, ConnectionResetError):  # the client went away: nobody to answer
                    log.info("stdio server: the client closed the pipe, shutting down")
                    tg.cancel_scope.cancel()
                    return

    got: list[int] = []

    async def on_signal(scope: anyio.CancelScope) -> None:
        # SIGTERM / SIGHUP / SIGINT end the server as a closed stdin does: the session is cancelled,
        # the lifespan flushes and closes the Router (which ends every expert's process tree); the
        # default handlers killed it on the spot and left the experts' children running
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP, signal.SIGINT) as received:
            async for signum in received:
                log.info("stdio server: %s, shutting down", signal.Signals(signum).name)
                got.append(signum)
                scope.cancel()
                return

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            tg.start_soon(writer)
            if restore is not None and threading.current_thread() is threading.main_thread():
                tg.start_soon(on_signal, tg.cancel_scope)
            # the session gets its own clone: closing it leaves the reader's error replies a way out
            await server.run(read_recv, write_send.clone(), server.create_initialization_options())
            await write_send.aclose()
            tg.cancel_scope.cancel()
    finally:
        if restore is not None:
            restore()
    return got[0] if got else None


def parse_line(line: bytes) -> tuple[types.JSONRPCMessage | None, types.JSONRPCError | None]:
    """One wire line → (a message for the session, or the error to answer it with)."""
    try:
        msg = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
        # a request whose id is not a string or an integer (true, 1.5) parses as a notification,
        # which JSON-RPC answers with nothing: the client would wait forever
        if not isinstance(msg, types.JSONRPCNotification) or b'"id"' not in line or not _has_bad_id(line):
            return msg, None
        return None, _wire_error(None, types.INVALID_REQUEST, "Invalid Request: id must be a string or an integer")
    except pydantic.ValidationError:
        pass  # the SDK's parser is strict (jiter); read it again with Python's to say what is wrong
    try:
        data = json.loads(line.decode("utf-8", "replace"))
    except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than Python's parser goes
        return None, _wire_error(None, types.PARSE_ERROR, f"Parse error: {type(exc).__name__}: {str(exc)[:200]}")
    try:
        return types.jsonrpc_message_adapter.validate_python(data, by_name=False), None
    except pydantic.ValidationError:
        rid = data.get("id") if isinstance(data, dict) else None
        if isinstance(data, dict) and "method" in data and rid is None:
            return None, None  # a broken notification: JSON-RPC answers nothing
        rid = rid if isinstance(rid, (int, str)) and not isinstance(rid, bool) else None
        return None, _wire_error(rid, types.INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 message")


def _wire_error(rid: int | str | None, code: int, message: str) -> types.JSONRPCError:
    return types.JSONRPCError(jsonrpc="2.0", id=rid, error=types.ErrorData(code=code, message=message))


def _write_line(out: BinaryIO, data: str) -> None:
    out.write(data.encode("utf-8", "backslashreplace") + b"\n")
    out.flush()


def _claim_stdio() -> tuple[BinaryIO, BinaryIO, Callable[[], None] | None]:
    """Private duplicates of fds 0 and 1 for the wire; fd 0 → /dev/null and fd 1 → stderr meanwhile."""
    try:
        wire_in, wire_out = os.dup(0), os.dup(1)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.dup2(2, 1)
    except OSError:  # no usable descriptors (an embedded interpreter): serve the buffers in place
        return sys.stdin.buffer, sys.stdout.buffer, None

    def restore() -> None:
        try:
            os.dup2(wire_in, 0)
            os.dup2(wire_out, 1)
        except OSError:
            log.exception("restoring stdin/stdout")

    return os.fdopen(wire_in, "rb", closefd=False), os.fdopen(wire_out, "wb", closefd=False), restore


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


class PathSplit:
    """ASGI: requests under ``path`` and the lifespan go to the MCP app, every other path to
    ``pages`` (the web UI, which applies the same auth rules itself: :mod:`engine.ui.security`)."""

    def __init__(self, mcp: Any, pages: Any, path: str) -> None:
        self.mcp, self.pages, self.path = mcp, pages, path

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        p = scope.get("path", "")
        if scope["type"] == "lifespan" or p == self.path or p.startswith(self.path + "/"):
            await self.mcp(scope, receive, send)
        else:
            await self.pages(scope, receive, send)


#: a POST body the id check reads whole before the SDK does (the SDK refuses bigger ones itself)
MAX_CHECKED_BODY = 8 * 1024 * 1024


class RequestIds:
    """ASGI: a JSON-RPC request on the MCP endpoint whose ``id`` is not a string or an integer
    (``true``, ``1.5``, ``null``, an object) is answered ``-32600`` here. The SDK reads such a
    request as a notification and answers ``202`` with no body: the client waits for ever (the
    stdio wire answers it the same way, :func:`parse_line`)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size, more = 0, True
        while more and size <= MAX_CHECKED_BODY:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                await self.app(scope, _replay([], message, receive), send)
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
        if not more and _has_bad_id(b"".join(chunks)):
            body = json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": None,
                    "error": {
                        "code": types.INVALID_REQUEST,
                        "message": "Invalid Request: id must be a string or an integer",
                    },
                }
            ).encode()
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
            await send({"type": "http.response.start", "status": 400, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, _replay(chunks, {"type": "http.request", "body": b"", "more_body": more}, receive), send)


def _has_bad_id(body: bytes) -> bool:
    """Does a JSON-RPC message (or batch) hold a request whose ``id`` is not a string or an integer
    (the stdio wire and the HTTP endpoint both answer it ``-32600``)?"""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return False  # the SDK answers what it cannot parse
    messages = data if isinstance(data, list) else [data]
    return any(
        isinstance(m, dict)
        and "method" in m
        and "id" in m
        and (isinstance(m["id"], bool) or not isinstance(m["id"], int | str))
        for m in messages
    )


def _replay(chunks: list[bytes], last: Any, receive: Any) -> Any:
    """A ``receive`` that gives back the body already read, then the rest from the client."""
    pending = [{"type": "http.request", "body": c, "more_body": True} for c in chunks]
    if last is not None:
        pending.append(last)

    async def again() -> Any:
        return pending.pop(0) if pending else await receive()

    return again


def http_app(server: Server[Any], *, host: str, token: str | None, path: str = "/mcp", pages: Any = None) -> Any:
    """The SDK's streamable-HTTP ASGI app (DNS-rebinding protection on loopback) behind the request-id
    check (:class:`RequestIds`) and bearer auth, with ``pages`` (an ASGI app) served at every other path."""
    app = RequestIds(server.streamable_http_app(streamable_http_path=path, host=host))
    mcp = BearerAuth(app, token) if token else app
    return mcp if pages is None else PathSplit(mcp, pages, path)


async def run_http(server: Server[Any], *, host: str, port: int, token: str | None, pages: Any = None) -> None:
    import uvicorn

    config = uvicorn.Config(
        http_app(server, host=host, token=token, pages=pages),
        host=host,
        port=port,
        log_level="info",
        access_log=False,
        lifespan="on",
    )
    await uvicorn.Server(config).serve()
