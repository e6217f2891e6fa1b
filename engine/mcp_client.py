"""The client side of MCP (``mcp>=2,<3``): one of the two modules importing the SDK (the server
side is :mod:`engine.mcp_server`). Used by the ``mcp`` expert adapter (:mod:`engine.experts.mcp`).

:class:`McpConnection` keeps one session to an external server. SDK sessions are task-bound
context managers, but an expert is called from a different fan-out task on every request (and,
from the CLI, from a new event loop each run), so the session lives in a private event-loop
thread (an anyio blocking portal in a daemon thread) and calls are forwarded to it. A call
cancelled by the caller's deadline cancels the forwarded call too; a server that died is
restarted on the next call.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from concurrent.futures import Future
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.from_thread
import httpx2
import mcp_types as types
import pydantic
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from . import proctree
from .errors import ExpertFailed, ExpertOutputError, ExpertUnavailable, ExpertUnconfigured

log = logging.getLogger("engine.mcp")
# A server line that is not JSON-RPC: the SDK logs its traceback (55 lines on the CLI's stderr,
# whose contract is one JSON error object) and hands the error to the session; the call then
# ends as the expert's classified error (malformed, or timeout when no answer comes), so the
# SDK's own log of it is silenced.
logging.getLogger("mcp.client.stdio").setLevel(logging.CRITICAL)


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
            raise ExpertUnconfigured("set exactly one of settings.command or settings.url", expert=expert)
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
            busy = not fut.done()  # asked before cancel(): a cancelled future is always done
            fut.cancel()  # the caller's deadline (or shutdown) cancels the forwarded call as well
            if self.command and busy:
                # a stdio server still busy at the deadline dies with its whole tree (setsid
                # children included); the next call starts a fresh one
                proctree.kill_tagged(self.tag)
                with contextlib.suppress(Exception):  # the portal may be closing meanwhile
                    portal.call(self._forget_session)
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

    def _forget_session(self) -> None:
        """(On the portal's loop) the session of a killed server is over: the next call starts one."""
        if self._session is not None:
            self._session[1].set()
            self._session = None

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


@asynccontextmanager
async def http_tools(
    url: str, *, timeout_s: float = 120.0
) -> AsyncIterator[Callable[[str, dict[str, Any]], Awaitable[ToolOutput]]]:
    """A plain MCP session over streamable HTTP on the caller's own event loop, for load generators
    (``engine bench --load``): yields ``call(tool, arguments)``. Errors are the SDK's, unclassified:
    a load generator counts them, an expert would use :class:`McpConnection`."""
    http = httpx2.AsyncClient(timeout=httpx2.Timeout(timeout_s))
    async with http, Client(streamable_http_client(url, http_client=http)) as client:

        async def call(tool: str, arguments: dict[str, Any]) -> ToolOutput:
            result = await client.call_tool(tool, arguments)
            text = "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))
            return ToolOutput(structured=result.structured_content, text=text, is_error=bool(result.is_error))

        yield call


def _reason(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"
