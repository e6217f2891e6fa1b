"""``engine run``'s one code path, whether it runs in-process or in the daemon.

The typer command (:func:`engine.cli.run`) and the daemon (:mod:`engine.daemon.server`) both turn
the command line's parameters into a :class:`RunCall`, locate the workspace, config and pipeline
relative to the caller's directory, and turn the router's result into a :class:`Reply` (the exact
stdout, stderr and exit code). Output is therefore the same by construction either way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .configdir import ConfigRef, resolve_run
from .errors import EngineError
from .render import render

FORMATS = ("json", "markdown", "toon")
_SCOPE = {"scope_project": "project", "scope_group": "group", "scope_path": "path", "scope_language": "language"}
_BUDGET = {"budget_ms": "latency_ms", "max_experts": "max_experts", "min_precision_class": "min_precision_class"}


@dataclass(frozen=True, slots=True)
class Reply:
    """What the command prints and how it exits."""

    stdout: str
    stderr: str
    code: int


@dataclass(frozen=True, slots=True)
class RunCall:
    """One ``engine run`` invocation: what to run, where, and the request it sends."""

    pipeline: str
    workspace: tuple[Path, ...]
    config_dir: Path | None
    request: dict[str, Any]
    fmt: str

    @classmethod
    def from_params(cls, p: Mapping[str, Any]) -> RunCall:
        """From the command's parameters, as typer (or click's parser, in the daemon) gives them."""
        request: dict[str, Any] = {
            "question": p["question"],
            "mode": p["mode"],
            "limit": p["limit"],
            "format": p["fmt"],
            "no_cache": p["no_cache"],
        }
        if p.get("intent"):
            request["intent"] = p["intent"]
        scope = {field: p[name] for name, field in _SCOPE.items() if p.get(name) is not None}
        budget = {field: p[name] for name, field in _BUDGET.items() if p.get(name) is not None}
        if scope:
            request["scope"] = scope
        if budget:
            request["budget"] = budget
        if p.get("session_id"):
            request["session_id"] = p["session_id"]
        return cls(str(p["pipeline"]), tuple(p.get("workspace") or ()), p.get("config_dir"), request, p["fmt"])

    def roots(self, cwd: Path) -> list[Path]:
        """The workspace roots, relative ones taken from ``cwd`` (default: ``cwd`` itself)."""
        return [_absolute(w, cwd) for w in self.workspace] or [cwd.resolve()]

    def locate(self, cwd: Path, env: Mapping[str, str]) -> tuple[list[Path], ConfigRef, str | Path]:
        """Workspace roots, config folder and pipeline, with relative paths taken from ``cwd``."""
        roots = self.roots(cwd)
        explicit = _absolute(self.config_dir, cwd) if self.config_dir is not None else None
        ref, target = resolve_run(self.pipeline, explicit, roots, cwd, env=env)
        return roots, ref, target


def _absolute(path: Path, cwd: Path) -> Path:
    path = path.expanduser()
    return (path if path.is_absolute() else cwd / path).resolve()


def answer_reply(response: dict[str, Any], exit_code: int, fmt: str) -> Reply:
    return Reply(render(response, fmt if fmt in FORMATS else "json") + "\n", "", exit_code)


def error_reply(exc: EngineError) -> Reply:
    """A failure before any answer (bad workspace, config, pipeline): the classified error on stderr."""
    return Reply("", json.dumps(exc.to_dict(), ensure_ascii=False) + "\n", exc.exit_code)
