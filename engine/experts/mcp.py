"""Front an external MCP server (chunkhound, serena, mcp-server-git, a docs server…) as an expert.

Settings (experts.yaml ``settings:``)::

    command: [chunkhound, mcp, "{{ root }}"]   # stdio server (argv, never a shell) — or:
    url: http://127.0.0.1:9000/mcp              # streamable HTTP
    env: {NAME: value}                          # extra environment for the command
    auth_env: DOCS_TOKEN                         # for url: header value read from this env variable
    auth_header: Authorization                   # default Authorization
    auth_prefix: "Bearer "                       # default "Bearer "
    tool: search_regex                           # the tool to call
    arguments: {pattern: "{{ pattern }}", page_size: "{{ limit }}"}   # sandboxed jinja2 templates
    per_project: false                           # true: one call per project in scope (root/project vars)
    required: [pattern]                          # template variables the question must fill, else unconfigured
    result: {items: results, fields: {path: file_path}}   # see engine.experts.mapping
    protocol: auto                               # auto | legacy (handshake) — how to connect

``command`` and ``cwd`` may use workspace variables only (``roots``, ``root``, ``data_dir``, ``python``), never
the question: the session is opened once and reused for every question. All ``mcp`` SDK use
goes through :mod:`engine.mcp_client` (with :mod:`engine.mcp_server`, the only modules importing ``mcp``).
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ClassVar

from ..errors import ExpertFailed, ExpertUnconfigured
from ..spec import ExpertSpec
from ..types import Evidence, Query
from .base import ExpertEnv, settings
from .mapping import ResultMapper, TemplateSet, auth_headers, plan_calls, run_each
from .templated import SHARED_SETTINGS, TemplatedExpert


class McpExpert(TemplatedExpert):
    adapter = "mcp"
    settings_schema: ClassVar[Mapping[str, Any]] = {
        **settings(
            {
                **SHARED_SETTINGS,
                "command": {"type": "array", "minItems": 1, "items": {"type": "string"}},
                "url": {"type": "string", "pattern": "^https?://"},
                "cwd": {"type": "string"},
                "tool": {"type": "string", "minLength": 1},
                "arguments": {"type": "object"},
                "protocol": {"type": "string", "minLength": 1},  # auto | legacy | a protocol version
            },
            required=["tool"],
        ),
        "oneOf": [{"required": ["command"]}, {"required": ["url"]}],
    }

    def __init__(self, spec: ExpertSpec, env: ExpertEnv) -> None:
        super().__init__(spec, env)
        self._conn: Any = None

    def _build(self) -> tuple[TemplateSet, ResultMapper]:
        if not self.settings.get("tool"):
            raise ExpertUnconfigured("settings.tool is required", expert=self.name)
        if bool(self.settings.get("command")) == bool(self.settings.get("url")):
            raise ExpertUnconfigured("set exactly one of settings.command or settings.url", expert=self.name)
        return (
            TemplateSet(self.name, self.settings.get("arguments", {}), "arguments"),
            ResultMapper(self.name, self.settings.get("result")),
        )

    def plan(self, query: Query) -> dict[str, Any]:
        templates, _ = self._prepare()
        calls = plan_calls(self.name, self.settings, templates, query, "arguments")
        return {"tool": self.settings["tool"], "calls": calls}

    def _connection(self) -> Any:
        if self._conn is None:
            from ..mcp_client import McpConnection  # lazy: the SDK costs ~1 s to import

            ws = {
                "roots": [str(r) for r in self.env.workspace.roots],
                "root": str(self.env.workspace.roots[0]),
                "data_dir": str(self.env.data_dir),
                "python": sys.executable,
            }
            command = self.settings.get("command")
            if command is not None and (not isinstance(command, list) or not command):
                raise ExpertUnconfigured("settings.command must be a non-empty argv list", expert=self.name)
            argv = [str(a) for a in TemplateSet(self.name, command, "command").render(ws)] if command else None
            cwd = self.settings.get("cwd")
            env = {str(k): str(v) for k, v in (self.settings.get("env") or {}).items()}
            self._conn = McpConnection(
                self.name,
                command=argv,
                env=env,
                url=self.settings.get("url"),
                cwd=str(TemplateSet(self.name, cwd, "cwd").render(ws)) if cwd else None,
                headers=auth_headers(self.name, self.settings) if self.settings.get("url") else None,
                protocol=str(self.settings.get("protocol", "auto")),
            )
        return self._conn

    async def search(self, query: Query, plan: dict[str, Any]) -> list[Evidence]:
        _, mapper = self._prepare()
        conn = self._connection()
        by_project = {p.name: p for p in query.projects}

        def one(call: dict[str, Any]) -> Callable[[], Awaitable[list[Evidence]]]:
            async def run() -> list[Evidence]:
                out = await conn.call(plan["tool"], call["arguments"])
                if out.is_error:
                    raise ExpertFailed(f"tool {plan['tool']!r} reported an error: {out.text[:300]}", expert=self.name)
                return mapper.evidence(
                    mapper.records(out.structured, out.text), query, by_project.get(call["project"] or "")
                )

            return run

        chunks = await run_each([one(c) for c in plan["calls"]])
        return [e for chunk in chunks for e in chunk][: query.limit]

    async def aclose(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.aclose()
