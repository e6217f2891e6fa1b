"""``engine serve``: every pipeline as an MCP tool, plus ``feedback`` and ``receipt``.

A thin surface over :class:`engine.runtime.Router`, the same API the CLI uses. The MCP SDK itself
is only touched through :mod:`engine.mcp_server` (with :mod:`engine.mcp_client`, the only modules importing ``mcp``).

* **Tools.** One per pipeline in the config folder's ``pipelines/`` (name = pipeline name,
  description = the pipeline's ``description``, input schema = the request JSON Schema), listed
  fresh on every ``tools/list``; plus ``feedback`` and ``receipt``.
* **One Router per server lifetime** (the server's lifespan). It hot-reloads the config on each
  call (file mtimes; a bad edit is logged and the last good config keeps serving), so an edit to
  priors.yaml or a pipeline shows up in the next answer's ``config_version`` with no restart.
* **Results.** Text in the requested format (default :data:`DEFAULT_FORMAT`) and the full JSON
  response as structured content. A router failure is a tool error (``isError``) whose text
  starts with the classified error code.
* **Size discipline.** ``limit`` and the snippet cap (priors ``fusion.snippet_chars``) apply as
  in every surface; then text + structured JSON must fit :data:`MAX_RESULT_CHARS` (≈20k tokens;
  agents' MCP clients reject results over ~25k). Over it, the lowest-ranked items are dropped and
  the answer says so (``truncated``). The signed receipt is never altered.
* **Off the hot path.** After each answer a background task runs :meth:`Router.flush` (events,
  cache rows, DuckDB ingest) in a worker thread; the last flush runs at shutdown.
* **Pages.** Over HTTP the web UI (:mod:`engine.ui`, docs/ui.md) is served at ``/`` beside
  ``/mcp``, on the same Router, with the same auth rules.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from jsonschema import Draft202012Validator

from . import __version__
from .errors import EngineError, InvalidRequest, SpecError, StoreError
from .mcp_server import ToolReply, ToolSpec, UnknownTool, build_server, run_http, run_stdio
from .proctree import join_sweeps
from .render import render
from .runtime import Router, RunResult
from .spec import load_schema
from .store import Feedback
from .workspace import Workspace

log = logging.getLogger("engine.serve")

DEFAULT_FORMAT = "toon"  # measured in docs/serve.md: fewer tokens than json, every field kept
MAX_RESULT_CHARS = int(os.environ.get("ENGINE_MCP_MAX_CHARS", "80000"))
RESERVED = ("feedback", "receipt")
INSTRUCTIONS = (
    "Search this workspace's code, docs and history. Call `router` with a plain-words question; "
    "it picks the right search experts, fuses their evidence and returns a signed receipt. "
    "Class tools (identifier, typed-symbol, ...) skip classification. Report which items helped "
    "with `feedback`; look a receipt up with `receipt`."
)

FEEDBACK_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["receipt_id", "useful_item_ids"],
    "properties": {
        "receipt_id": {"type": "string", "minLength": 1, "maxLength": 200},
        "useful_item_ids": {
            "type": "array",
            "items": {"type": "string", "maxLength": 200},
            "maxItems": 200,
            "uniqueItems": True,
        },
        "not_useful_item_ids": {
            "type": "array",
            "items": {"type": "string", "maxLength": 200},
            "maxItems": 200,
            "uniqueItems": True,
        },
        "note": {"type": "string", "maxLength": 4000},
        "session_id": {"type": "string", "maxLength": 200},
    },
}
RECEIPT_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["receipt_id"],
    "properties": {"receipt_id": {"type": "string", "minLength": 1, "maxLength": 200}},
}


def request_schema() -> dict[str, Any]:
    """The request JSON Schema as a tool input schema (``$schema``/``$id`` dropped: some clients trip on them)."""
    return {k: v for k, v in load_schema("request").items() if k not in ("$schema", "$id")}


def fit_answer(response: dict[str, Any], fmt: str, max_chars: int = MAX_RESULT_CHARS) -> tuple[str, dict[str, Any]]:
    """Render ``response``; drop lowest-ranked items until text + JSON fit ``max_chars`` (and say so)."""
    text = render(response, fmt)
    if len(text) + len(_compact(response)) <= max_chars:
        return text, response
    # drop order: fused items from the bottom; in separate mode, the longest list's tail first
    order: list[tuple[str | None, int]] = [(None, i) for i in reversed(range(len(response.get("items", []))))]
    lists = {n: len(s.get("items", [])) for n, s in response.get("separate", {}).items()}
    while any(lists.values()):
        name = max(sorted(lists), key=lambda n: lists[n])
        lists[name] -= 1
        order.append((name, lists[name]))
    if not order:  # nothing to drop (the receipt alone is over the cap): send it as it is
        return text, response

    def trimmed(n: int) -> dict[str, Any]:
        drop = set(order[:n])
        out = dict(response)
        out["items"] = [it for i, it in enumerate(response.get("items", [])) if (None, i) not in drop]
        if "separate" in response:
            out["separate"] = {
                name: {**s, "items": [it for i, it in enumerate(s["items"]) if (name, i) not in drop]}
                for name, s in response["separate"].items()
            }
        out["truncated"] = {
            "dropped_items": n,
            "max_chars": max_chars,
            "hint": "lower `limit` or narrow `scope` to see the rest",
        }
        return out

    def size(n: int) -> int:
        r = trimmed(n)
        return len(_note(r, fmt)) + len(render(r, fmt)) + len(_compact(r))

    lo, hi = 1, len(order)  # smallest n that fits (or all of them)
    while lo < hi:
        mid = (lo + hi) // 2
        if size(mid) <= max_chars:
            hi = mid
        else:
            lo = mid + 1
    out = trimmed(lo)
    return _note(out, fmt) + render(out, fmt), out


def _compact(response: dict[str, Any]) -> str:
    return json.dumps(response, ensure_ascii=False, separators=(",", ":"))


def _note(response: dict[str, Any], fmt: str) -> str:
    t = response.get("truncated")
    if not t or fmt == "json":  # json carries the `truncated` key itself
        return ""
    msg = (
        f"truncated: dropped the {t['dropped_items']} lowest-ranked items to stay under {t['max_chars']} "
        f"characters; {t['hint']}."
    )
    return f"#{msg}\n" if fmt == "toon" else f"> **{msg}**\n\n"


class RouterTools:
    """The ToolApp served over MCP: pipelines, feedback and receipt, over one Router."""

    def __init__(
        self, router: Router, *, default_format: str = DEFAULT_FORMAT, max_chars: int = MAX_RESULT_CHARS
    ) -> None:
        self.router = router
        self.default_format = default_format
        self.max_chars = max_chars
        self._dirty = anyio.Event()

    async def list_tools(self) -> list[ToolSpec]:
        cfg = self.router.config()
        schema = request_schema()
        names = sorted(n for n in cfg.pipelines if n not in RESERVED)
        names.sort(key=lambda n: n != "router")  # the entry pipeline first
        tools = [ToolSpec(n, cfg.pipelines[n].description.strip(), schema, title=f"search: {n}") for n in names]
        tools.append(
            ToolSpec(
                "feedback",
                "Record which evidence items of an answer helped (their `id`s), optionally which did not "
                "(`not_useful_item_ids`), and a note. Improves routing over time.",
                FEEDBACK_SCHEMA,
                read_only=False,
                title="feedback: which items helped",
            )
        )
        tools.append(
            ToolSpec(
                "receipt",
                "Look up a signed receipt by `receipt_id`: which experts ran, why, what "
                "they were asked, their status and latency, and the config version.",
                RECEIPT_SCHEMA,
                title="receipt: look one up",
            )
        )
        return tools

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolReply:
        if name == "feedback":
            return await self._feedback(arguments)
        if name == "receipt":
            return await self._receipt(arguments)
        cfg = self.router.config()
        if name not in cfg.pipelines:
            raise UnknownTool(f"tools: {sorted(cfg.pipelines) + list(RESERVED)}")
        request = dict(arguments)
        fmt = str(request.get("format") or self.default_format)
        if fmt not in ("json", "markdown", "toon"):  # the router rejects it; the answer still renders
            fmt = self.default_format
        request.setdefault("format", fmt)
        try:
            result = await self.run(name, request)
        except EngineError as exc:  # e.g. the config cannot be loaded at all
            return ToolReply(f"{exc.code}: {exc.message}", {"error": exc.to_dict()}, is_error=True)
        text, response = fit_answer(result.response, fmt, self.max_chars)
        if result.error is not None:
            text = f"{result.error.code}: {result.error.message}\n{text}"
        return ToolReply(text, response, is_error=result.error is not None)

    async def run(self, pipeline: str, request: dict[str, Any]) -> RunResult:
        """Run a pipeline, then let the flusher do the deferred work (what every tool call does;
        the web UI's Ask page runs through here too)."""
        try:
            return await self.router.run(pipeline, request)
        finally:
            self._dirty.set()

    def changed(self) -> None:
        """Something was written (feedback from the web UI): ingest it soon."""
        self._dirty.set()

    async def _feedback(self, args: dict[str, Any]) -> ToolReply:
        problem = _arguments_problem(FEEDBACK_SCHEMA, args)  # the tool's own input schema, enforced
        if problem is not None:
            return _error("invalid_request", problem[1], field=problem[0])
        rid, ids, bad = args["receipt_id"], args["useful_item_ids"], args.get("not_useful_item_ids", [])
        both = sorted(set(ids) & set(bad))
        if both:
            return _error(
                "invalid_request", f"marked both useful and not useful: {both[:5]}", field="not_useful_item_ids"
            )
        fb = Feedback(
            feedback_id=uuid.uuid4().hex,
            receipt_id=rid,
            useful_item_ids=tuple(ids),
            not_useful_item_ids=tuple(bad),
            note=str(args.get("note") or ""),
            session_id=args.get("session_id"),
        )
        try:  # the store refuses a receipt it does not hold and ids not in that receipt's answer
            await anyio.to_thread.run_sync(lambda: self.router.record_feedback(fb))
        except (InvalidRequest, StoreError) as exc:
            return _error(exc.code, exc.message, **exc.context)
        self._dirty.set()
        return ToolReply(
            f"feedback {fb.feedback_id} recorded for receipt {rid} ({len(ids)} useful items)",
            {"feedback_id": fb.feedback_id, "receipt_id": rid, "useful_item_ids": ids},
        )

    async def _receipt(self, args: dict[str, Any]) -> ToolReply:
        problem = _arguments_problem(RECEIPT_SCHEMA, args)
        if problem is not None:
            return _error("invalid_request", problem[1], field=problem[0])
        rid = args["receipt_id"]
        try:
            body = await self._receipt_body(rid)
        except StoreError as exc:
            return _error(exc.code, exc.message)
        if body is None:
            return _error("not_found", f"no receipt {rid!r}")
        return ToolReply(json.dumps(body, ensure_ascii=False, indent=2), body)

    async def _receipt_body(self, rid: str) -> dict[str, Any] | None:
        return await anyio.to_thread.run_sync(lambda: self.router.store.get_receipt(rid))

    async def flusher(self) -> None:
        """Background task: after each answer, flush the router's deferred work in a worker thread."""
        while True:
            await self._dirty.wait()
            self._dirty = anyio.Event()
            try:
                await anyio.to_thread.run_sync(self.router.flush)
            except Exception:  # noqa: BLE001 - a failed flush is retried on the next answer
                log.exception("flush failed")


def _arguments_problem(schema: dict[str, Any], args: dict[str, Any]) -> tuple[str, str] | None:
    """(field, what is wrong) for arguments that break ``schema``, in a few words: never the value
    itself (a 1 MB note is not echoed back)."""
    err = next(iter(sorted(Draft202012Validator(schema).iter_errors(args), key=lambda e: list(e.absolute_path))), None)
    if err is None:
        return None
    field = ".".join(str(p) for p in err.absolute_path) or "(arguments)"
    said = {
        "maxLength": f"longer than {err.validator_value} characters",
        "minLength": "empty",
        "maxItems": f"more than {err.validator_value} items",
        "uniqueItems": "lists an id twice",
        "type": f"must be {err.validator_value}",
    }.get(str(err.validator), err.message[:300])
    return field, f"{field}: {said}"


def _error(code: str, message: str, **context: Any) -> ToolReply:
    """A classified tool error; ``context`` (e.g. the ``field`` at fault) goes into the structured error."""
    return ToolReply(f"{code}: {message}", {"error": {"error": code, "message": message, **context}}, is_error=True)


def make_server(
    config_dir: Path,
    workspace: Workspace,
    *,
    default_format: str = DEFAULT_FORMAT,
    max_chars: int = MAX_RESULT_CHARS,
    on_open: Callable[[RouterTools | None], None] | None = None,
    config_source: str = "api",
) -> Any:
    """The MCP server; its lifespan owns the Router, the flusher task and their shutdown.
    ``on_open`` hears of the tool app once it is open (and ``None`` when it closes): the web UI
    shares its Router."""

    @asynccontextmanager
    async def open_app() -> AsyncIterator[RouterTools]:
        router = Router(config_dir, workspace, config_source=config_source)
        router.config()  # a broken config fails at start, loudly
        tools = RouterTools(router, default_format=default_format, max_chars=max_chars)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(tools.flusher)
                if on_open is not None:
                    on_open(tools)
                try:
                    yield tools
                finally:
                    if on_open is not None:
                        on_open(None)
                    tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(router.flush)
                await router.aclose()

    return build_server("search-router", __version__, INSTRUCTIONS, open_app)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(
    config_dir: Path,
    workspace: Workspace,
    *,
    transport: str = "stdio",
    host: str = "127.0.0.1",
    port: int = 8765,
    token: str | None = None,
    config_source: str = "api",
) -> None:
    """Run the server until stdin closes (stdio) or it is interrupted (http)."""
    if transport not in ("stdio", "http"):
        raise SpecError(f"unknown transport {transport!r}; use stdio or http")
    if token is not None and (not token.strip() or token != token.strip()):
        # an empty or blank --token / ENGINE_MCP_TOKEN would silently mean "no auth"
        raise SpecError("the HTTP token is empty or has surrounding whitespace; give a real token or none")
    if transport == "http" and not is_loopback(host) and not token:
        raise SpecError(
            f"binding {host} (not loopback) requires --token; every request must then carry "
            "'Authorization: Bearer <token>'"
        )

    if transport == "stdio":
        signum = anyio.run(run_stdio, make_server(config_dir, workspace, config_source=config_source))
        if signum is not None:  # the Router is closed and flushed; the stdin reader thread is not
            join_sweeps()  # the experts' process trees, swept from threads os._exit would cut short
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(128 + signum)
        return
    from .ui import ui_app  # the pages (docs/ui.md): only the HTTP transport serves them

    opened: list[RouterTools | None] = [None]
    server = make_server(
        config_dir, workspace, config_source=config_source, on_open=lambda tools: opened.__setitem__(0, tools)
    )
    pages = ui_app(lambda: opened[0], token=token, loopback=is_loopback(host))
    anyio.run(lambda: run_http(server, host=host, port=port, token=token, pages=pages))
