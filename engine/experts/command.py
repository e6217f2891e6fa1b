"""Front a command-line search tool as an expert (an in-house grep wrapper, ``git grep``, a CLI indexer…).

Settings (experts.yaml ``settings:``)::

    argv: [git, grep, -n, -I, --fixed-strings, -e, "{{ term }}", --]   # each element a sandboxed template
    cwd: project          # project: run once per project in scope, in its root (default); none: once
    output: lines         # lines (``result.pattern``, default ``path:line:text``) | jsonl
    ok_codes: [0, 1]      # exit codes that mean "answered" (grep exits 1 on no match)
    env: {NAME: value}    # extra environment
    required: [term]      # template variables the question must fill
    result: {...}         # see engine.experts.mapping

Never a shell: argv goes to the OS as a list. Question text can still look like an *option*
(``--pre=…``) to the tool, so an element rendered from a template with variables may not start
with ``-`` unless its template does (``--regexp={{ pattern }}``) or it comes after a literal
``--``; such a question is declined (``unconfigured``), not run.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from ..errors import ExpertUnconfigured
from ..types import Evidence, Query
from .base import expert_errors, run_process, settings
from .mapping import ResultMapper, TemplateSet, plan_calls, run_each
from .templated import SHARED_SETTINGS, TemplatedExpert


class CommandExpert(TemplatedExpert):
    adapter = "command"
    local_files = True  # the tool runs here, in each project's root
    settings_schema = settings(
        {
            **SHARED_SETTINGS,
            "argv": {"type": "array", "minItems": 1, "items": {"type": "string"}},
            "cwd": {"enum": ["project", "none"]},
            "output": {"enum": ["lines", "jsonl"]},
            "ok_codes": {"type": "array", "items": {"type": "integer"}},
        },
        required=["argv"],
    )

    def _build(self) -> tuple[TemplateSet, ResultMapper]:
        argv = self.settings.get("argv")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise ExpertUnconfigured("settings.argv must be a non-empty list of strings", expert=self.name)
        if self.settings.get("cwd", "project") not in ("project", "none"):
            raise ExpertUnconfigured("settings.cwd must be project or none", expert=self.name)
        result = dict(self.settings.get("result") or {})
        if self.settings.get("output", "lines") == "jsonl":
            result["format"] = "jsonl"
        else:
            result.setdefault("format", "text")
        return TemplateSet(self.name, argv, "argv"), ResultMapper(self.name, result)

    def plan(self, query: Query) -> dict[str, Any]:
        templates, _ = self._prepare()
        settings = {**self.settings, "per_project": self.settings.get("cwd", "project") == "project"}
        calls = plan_calls(self.name, settings, templates, query, "argv")
        for call in calls:
            self._check_options(call["argv"])
        return {"calls": calls}

    def _check_options(self, argv: list[Any]) -> None:
        after_dashes = False
        for template, value in zip(self.settings["argv"], argv, strict=True):
            text = str(value)
            if template == "--":
                after_dashes = True
            elif (
                ("{{" in template or "{%" in template)
                and not after_dashes
                and text.startswith("-")
                and not template.lstrip().startswith("-")
            ):
                raise ExpertUnconfigured(
                    f"declined: question text {text[:40]!r} would be read as an option", expert=self.name
                )

    async def search(self, query: Query, plan: dict[str, Any]) -> list[Evidence]:
        _, mapper = self._prepare()
        by_project = {p.name: p for p in query.projects}
        ok_codes = tuple(int(c) for c in self.settings.get("ok_codes", (0,)))
        extra = {str(k): str(v) for k, v in (self.settings.get("env") or {}).items()}
        env = {**os.environ, **extra} if extra else None

        def one(call: dict[str, Any]) -> Callable[[], Awaitable[list[Evidence]]]:
            async def run() -> list[Evidence]:
                project = by_project.get(call["project"] or "")
                res = await run_process(
                    [str(a) for a in call["argv"]],
                    expert=self.name,
                    cwd=project.root if project else None,
                    ok_codes=ok_codes,
                    env=env,
                )
                data = res.stdout
                if res.truncated:  # past max_output: its last line may be cut mid-record (mid-character)
                    data = data[: data.rfind(b"\n") + 1]
                with expert_errors(self.name):
                    text = data.decode("utf-8")
                items = mapper.evidence(mapper.records_from_text(text), query, project)
                # a tool that printed more than we read: said on every item, as ripgrep's are
                return [replace(e, flags=(*e.flags, "output-truncated")) for e in items] if res.truncated else items

            return run

        chunks = await run_each([one(c) for c in plan["calls"]])
        return [e for chunk in chunks for e in chunk][: query.limit]
