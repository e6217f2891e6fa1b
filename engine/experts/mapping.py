"""What the external-expert adapters (``mcp``, ``http``, ``command``) share: templates in, evidence out.

**Templates.** experts.yaml holds the template *sources* (tool arguments, request params, argv
elements). They are compiled in a :class:`jinja2.sandbox.SandboxedEnvironment` and rendered with
variables drawn from the query (:func:`query_variables`). The question is only ever a template
*variable*: it is never compiled, never re-rendered, never joined into a shell line. A string that
is exactly one variable (``"{{ limit }}"``) renders to that variable's native value, so JSON bodies
and tool arguments get real integers and lists.

**Results.** :class:`ResultMapper` turns what an external tool returned into :class:`Evidence`:

* JSON (an MCP tool's structured content, JSON text, an HTTP body, JSON lines): ``items`` is a
  dotted path to the record list (``results``, ``data.hits[*]``, ``"."`` for the root) and
  ``fields`` maps evidence fields to dotted paths inside one record;
* plain text: ``pattern`` is a regex run over the whole text (multiline); named groups are the
  fields. The default reads ``path:line:text`` lines.

Absolute paths are made relative to the project holding them and items must pass the request
scope; a path outside every project (``..``, a symlink out) or a withheld file is left as named
for the fan-out's screen, which drops and counts it (:mod:`engine.screen`). Items
carry only what the tool returned. Output not of the configured shape is ``malformed``.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

import anyio
import jinja2
from jinja2.sandbox import SandboxedEnvironment

from ..errors import ExpertError, ExpertOutputError, ExpertUnconfigured
from ..types import ITEM_KINDS, Evidence, Project, Query
from ..workspace import in_scope, safe_join

#: default text pattern: ``path:line:text`` (ripgrep/grep -n style)
LINE_PATTERN = r"^(?P<path>[^\n:]+):(?P<line>\d+):(?P<content>[^\n]*)$"
FIELDS = ("project", "path", "line", "start_line", "end_line", "content", "score", "symbol", "kind", "sha")
_URL = re.compile(r"^https?://[^\s]+$")
_ONE_VAR = re.compile(r"^\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}$")
_PATH_TOKEN = re.compile(r"([^.\[\]]+)|\[(\*|-?\d+)\]")
T = TypeVar("T")


@cache
def _env() -> SandboxedEnvironment:
    # StrictUndefined: a template naming an unknown variable is a config error, not an empty string
    return SandboxedEnvironment(undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=False)


class TemplateSet:
    """A nested structure (mapping / list / strings) of templates from experts.yaml, compiled once."""

    def __init__(self, expert: str, source: Any, where: str) -> None:
        self.expert, self.where = expert, where
        try:
            self._compiled = self._compile(source)
        except jinja2.TemplateError as exc:
            raise ExpertUnconfigured(f"settings.{where}: bad template: {exc}", expert=expert) from None

    def _compile(self, node: Any) -> Any:
        if isinstance(node, str):
            m = _ONE_VAR.match(node)
            return ("var", m.group(1)) if m else ("tpl", _env().from_string(node))
        if isinstance(node, Mapping):
            return {str(k): self._compile(v) for k, v in node.items()}
        if isinstance(node, list):
            return [self._compile(v) for v in node]
        return ("lit", node)

    def render(self, variables: Mapping[str, Any]) -> Any:
        try:
            return self._render(self._compiled, variables)
        except jinja2.TemplateError as exc:  # UndefinedError, SecurityError
            raise ExpertUnconfigured(
                f"settings.{self.where}: {type(exc).__name__}: {exc}", expert=self.expert
            ) from None

    def _render(self, node: Any, variables: Mapping[str, Any]) -> Any:
        if isinstance(node, dict):
            return {k: self._render(v, variables) for k, v in node.items()}
        if isinstance(node, list):
            return [self._render(v, variables) for v in node]
        tag, value = node
        if tag == "lit":
            return value
        if tag == "var":
            if value not in variables:
                raise jinja2.UndefinedError(f"{value!r} is undefined; variables: {sorted(variables)}")
            return variables[value]
        return value.render(variables)


def best_term(query: Query) -> str:
    """The single most specific thing to search for: a literal, an identifier, else the longest keyword."""
    f = query.features
    if f.literals:
        return f.literals[0]
    if f.identifiers:
        return f.identifiers[0]
    words = sorted((k for k in f.keywords if len(k) >= 3), key=lambda k: (-len(k), k))
    return words[0] if words else ""


def query_variables(query: Query, project: Project | None = None) -> dict[str, Any]:
    """Everything a template may use. All of it is data; none of it is ever compiled."""
    f = query.features
    terms = list(f.literals or f.identifiers or f.keywords)
    pattern = f.regex or "|".join(re.escape(t) for t in terms[:8])
    if project is None and len(query.projects) == 1:
        project = query.projects[0]
    return {
        "question": query.question,
        "class": query.klass,
        "klass": query.klass,
        "literals": list(f.literals),
        "identifiers": list(f.identifiers),
        "keywords": list(f.keywords),
        "paths": list(f.paths),
        "regex": f.regex or "",
        "terms": terms,
        "term": best_term(query),
        "pattern": pattern,
        "scope": query.scope.to_dict(),
        "scope_path": query.scope.path or "",
        "language": query.scope.language or "",
        "limit": query.limit,
        "projects": [{"name": p.name, "root": str(p.root)} for p in query.projects],
        "project": project.name if project else "",
        "root": str(project.root) if project else "",
    }


def plan_calls(
    expert: str, settings: Mapping[str, Any], templates: TemplateSet, query: Query, key: str
) -> list[dict[str, Any]]:
    """One rendered call per project (``per_project: true``) or one for the whole scope; pure.

    ``required`` names template variables the question must fill (e.g. ``[pattern]``); when one is
    empty the expert is ``unconfigured`` for this question rather than asked for nothing.
    """
    targets: list[Project | None] = list(query.projects) if settings.get("per_project") else [None]
    calls = []
    for project in targets:
        variables = query_variables(query, project)
        for name in settings.get("required", ()) or ():
            value = variables.get(name)
            if value is None or value == [] or (isinstance(value, str) and not value.strip()):
                raise ExpertUnconfigured(f"the question gives nothing for {name!r}", expert=expert)
        calls.append({"project": project.name if project else None, key: templates.render(variables)})
    return calls


def auth_headers(expert: str, settings: Mapping[str, Any]) -> dict[str, str]:
    """The per-expert auth header; its secret is read from the environment variable named in ``auth_env``."""
    name = settings.get("auth_env")
    if not name:
        return {}
    value = os.environ.get(str(name))
    if not value:
        raise ExpertUnconfigured(f"environment variable {name} (settings.auth_env) is not set", expert=expert)
    return {str(settings.get("auth_header", "Authorization")): f"{settings.get('auth_prefix', 'Bearer ')}{value}"}


def resolve(data: Any, path: str | None) -> Any:
    """A small dotted-path resolver: ``a.b``, ``a[0]``, ``a[*].b`` (``[*]`` maps over a list).

    Returns ``None`` when a key is missing. ``"."``, ``""`` or ``None`` is the value itself.
    """
    if path in (None, "", "."):
        return data
    tokens = [(m.group(1), m.group(2)) for m in _PATH_TOKEN.finditer(str(path))]
    return _walk(data, tokens)


def _walk(data: Any, tokens: list[tuple[str | None, str | None]]) -> Any:
    for i, (key, index) in enumerate(tokens):
        if data is None:
            return None
        if key is not None:
            data = data.get(key) if isinstance(data, Mapping) else None
        elif index == "*":
            if not isinstance(data, list):
                return None
            rest = tokens[i + 1 :]
            return [_walk(d, rest) for d in data] if rest else list(data)
        else:
            n = int(index or 0)
            data = data[n] if isinstance(data, list) and -len(data) <= n < len(data) else None
    return data


class ResultMapper:
    """Maps one tool's output to evidence, per the ``result:`` settings of an expert."""

    def __init__(self, expert: str, settings: Mapping[str, Any] | None) -> None:
        s = dict(settings or {})
        self.expert = expert
        self.format = s.get("format", "auto")  # auto | json | jsonl | text
        if self.format not in ("auto", "json", "jsonl", "text"):
            raise ExpertUnconfigured(
                f"settings.result.format {self.format!r}: use auto, json, jsonl or text", expert=expert
            )
        self.items = s.get("items")
        self.fields: dict[str, str] = {k: str(v) for k, v in (s.get("fields") or {}).items()}
        unknown = set(self.fields) - set(FIELDS)
        if unknown:
            raise ExpertUnconfigured(
                f"settings.result.fields: unknown {sorted(unknown)}; known {list(FIELDS)}", expert=expert
            )
        self.kind = s.get("kind")
        self.line_offset = int(s.get("line_offset", 0))
        self.urls = bool(s.get("urls", False))  # keep http(s) URLs (external docs) as their own "project"
        self.meta_fields: dict[str, str] = {str(k): str(v) for k, v in (s.get("meta") or {}).items()}
        try:
            self.pattern = re.compile(s.get("pattern", LINE_PATTERN), re.MULTILINE)
        except re.error as exc:
            raise ExpertUnconfigured(f"settings.result.pattern: {exc}", expert=expert) from None

    # ------------------------------------------------------------------ output → records
    def records_from_json(self, data: Any) -> list[dict[str, Any]]:
        found = resolve(data, self.items)
        if found is None and self.items not in (None, "", "."):
            raise ExpertOutputError(f"result has no {self.items!r}", expert=self.expert)
        if isinstance(found, Mapping) and self.items in (None, "", "."):
            found = [found]
        if not isinstance(found, list):
            raise ExpertOutputError(
                f"{self.items or 'result'!r} is {type(found).__name__}, expected a list", expert=self.expert
            )
        out = []
        for rec in found[:ROW_CAP_MAX]:  # a ranked list: what lies past this is never served
            if not isinstance(rec, Mapping):
                raise ExpertOutputError(
                    f"a result record is {type(rec).__name__}, expected an object", expert=self.expert
                )
            row = {f: resolve(rec, self.fields.get(f, f)) for f in FIELDS}
            if "line" not in self.fields and row["line"] is None and "start_line" not in self.fields:
                row["line"] = rec.get("line_number")
            if "path" not in self.fields and row["path"] is None:
                row["path"] = rec.get("file") or rec.get("file_path") or rec.get("relative_path")
            row["meta"] = {k: resolve(rec, p) for k, p in self.meta_fields.items()}
            out.append(row)
        return out

    def records_from_text(self, text: str) -> list[dict[str, Any]]:
        if self.format == "jsonl":
            rows: list[dict[str, Any]] = []
            for n, line in enumerate(text.splitlines(), start=1):
                if len(rows) >= ROW_CAP_MAX:
                    break
                if line.strip():
                    try:
                        rows.extend(self.records_from_json(json.loads(line)))
                    except json.JSONDecodeError as exc:
                        raise ExpertOutputError(f"line {n} is not JSON: {exc.msg}", expert=self.expert) from None
            return rows
        if self.format == "json" or (
            self.format == "auto" and self.items is not None and text.lstrip()[:1] in ("{", "[")
        ):
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ExpertOutputError(f"output is not JSON: {exc.msg} at {exc.pos}", expert=self.expert) from None
            return self.records_from_json(data)
        rows = []
        for m in itertools.islice(self.pattern.finditer(text), ROW_CAP_MAX):
            groups = {k: v for k, v in m.groupdict().items() if v is not None}
            row = {f: groups.get(self.fields.get(f, f)) for f in FIELDS}
            row["meta"] = {k: groups.get(g) for k, g in self.meta_fields.items()}
            rows.append(row)
        return rows

    def records(self, structured: Any, text: str) -> list[dict[str, Any]]:
        """Pick the source: structured content when JSON is expected, else the text."""
        if structured is not None and (
            self.format == "json"
            or (self.format == "auto" and self.items is not None and resolve(structured, self.items) is not None)
        ):
            return self.records_from_json(structured)
        return self.records_from_text(text)

    # ------------------------------------------------------------------ records → evidence
    def evidence(self, rows: Iterable[dict[str, Any]], query: Query, project: Project | None = None) -> list[Evidence]:
        """Evidence for the rows that land inside the workspace and the scope, in the tool's order.
        Only the first :func:`row_cap` rows are read: placing a row stats its path, and a tool that
        returned 300,000 of them held the request for 17 s past every deadline (this runs in one go)."""
        out: list[Evidence] = []
        rows = list(itertools.islice(rows, row_cap(query)))
        for rank, row in enumerate(rows, start=1):
            e = self._one(row, rank, len(rows), query, project)
            if e is not None:
                out.append(e)
        return out

    def _one(self, row: dict[str, Any], rank: int, total: int, query: Query, ctx: Project | None) -> Evidence | None:
        sha = _text(row.get("sha"))
        start = _int(row.get("start_line"), self.expert)
        start = start if start is not None else _int(row.get("line"), self.expert)
        end = _int(row.get("end_line"), self.expert)
        kind = row.get("kind") if row.get("kind") in ITEM_KINDS else None
        kind = kind or self.kind or ("commit" if sha else "chunk" if start is not None else "file")
        raw = _text(row.get("path"))
        named = row.get("project")
        owner = self._project_named(named, query)
        if owner is None and isinstance(named, str) and named and named != (ctx.name if ctx else None):
            return None  # a project the request does not cover (out of scope): never re-homed into another
        owner = owner or ctx
        if not self.urls and _URL.match(raw):
            return None  # URLs are items only where the expert declares them (`urls: true`)
        placed = self._place(raw, owner, query) if raw and not _URL.match(raw) else None
        if self.urls and _URL.match(raw):  # external documentation: a URL is not a workspace path
            project_name, rel, kind, start = self.expert, raw, self.kind or "doc", None
        elif kind == "commit":
            project = placed[0] if placed else owner or (query.projects[0] if len(query.projects) == 1 else None)
            if project is None:
                return None
            project_name, rel = project.name, placed[1] if placed else ""
        elif placed is None:
            # outside every project (a symlink out included): kept as named, so the fan-out's
            # screen drops it and counts it in the receipt (engine/screen.py)
            if not raw:
                return None
            project_name, rel = (owner.name if owner else ""), raw
        elif not in_scope(placed[1], query.scope):
            return None
        else:
            project_name, rel = placed[0].name, placed[1]  # a secret is dropped (and counted) by the screen
        if start is None:  # a whole file, a commit or a URL: no line range
            start = end = 1
        else:
            start, end = start + self.line_offset, (end if end is not None else start) + self.line_offset
        start = max(1, start)
        meta = {k: v for k, v in (row.get("meta") or {}).items() if v is not None}
        if sha:
            meta["sha"] = sha
        content = row.get("content")
        content = content if isinstance(content, str) else "" if content is None else json.dumps(content)
        return Evidence(
            project=project_name,
            path=rel,
            kind=kind,
            start_line=start,
            end_line=max(start, end),
            content=content,
            score=_score(row.get("score"), rank, total, self.expert),
            symbol=_text(row.get("symbol")) or None,
            meta=meta,
        )

    @staticmethod
    def _project_named(name: Any, query: Query) -> Project | None:
        return next((p for p in query.projects if isinstance(name, str) and p.name == name), None)

    @staticmethod
    def _place(raw: str, project: Project | None, query: Query) -> tuple[Project, str] | None:
        """(project, posix path relative to it), or None when the path is outside every project."""
        raw = raw.strip().removeprefix("file://")
        candidates = [project] if project else list(query.projects)
        if Path(raw).is_absolute():
            full = Path(raw).resolve()
            for p in candidates:
                try:
                    return p, full.relative_to(p.root.resolve()).as_posix()
                except ValueError:
                    continue
            return None
        rel = PurePosixPath(raw.replace("\\", "/").removeprefix("./")).as_posix()
        for p in candidates:  # the project that has the file
            inside = safe_join(p, rel)
            if inside is not None and inside.exists():
                return p, rel
        for p in candidates:  # relative to the folder holding the projects ("alpha/src/x.py")
            full = (p.root.parent / rel).resolve()
            if full.exists() and full.is_relative_to(p.root.resolve()):
                return p, full.relative_to(p.root.resolve()).as_posix()
        if len(candidates) == 1 and safe_join(candidates[0], rel) is not None:
            return candidates[0], rel  # one project, a file it no longer has: keep, it cannot escape
        return None


#: the fewest rows of a tool's answer read, whatever the request's limit, and the most parsed
ROW_CAP_MIN = 1000
ROW_CAP_MAX = 5000


def _score(score: Any, rank: int, total: int, expert: str) -> float:
    """The tool's own score, or one derived from its order (best first) when it gives none."""
    try:
        value = float(score) if score is not None else (total - rank + 1) / max(total, 1)
    except (TypeError, ValueError):
        raise ExpertOutputError(f"score {score!r} is not a number", expert=expert) from None
    if not math.isfinite(value):  # NaN or infinity would make the answer's JSON invalid
        raise ExpertOutputError(f"score {score!r} is not a finite number", expert=expert)
    return value


def row_cap(query: Query) -> int:
    """How many of a tool's rows are read: far more than the answer keeps (its items are ranked)."""
    return max(ROW_CAP_MIN, 20 * query.limit)


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ("" if value is None else str(value))


def _int(value: Any, expert: str) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: `"line": Infinity`
        raise ExpertOutputError(f"line {value!r} is not an integer", expert=expert) from None


async def run_each(calls: Sequence[Callable[[], Awaitable[T]]]) -> list[T]:
    """Run calls concurrently, results in call order.

    A failure is re-raised as itself, not inside an ``ExceptionGroup``, so that an
    ``ExpertUnavailable`` raised by one call keeps its classification in the receipt.
    """
    if len(calls) == 1:
        return [await calls[0]()]
    results: list[Any] = [None] * len(calls)

    async def one(i: int) -> None:
        results[i] = await calls[i]()

    try:
        async with anyio.create_task_group() as tg:
            for i in range(len(calls)):
                tg.start_soon(one, i)
    except BaseExceptionGroup as group:
        _, rest = group.split(anyio.get_cancelled_exc_class())
        if rest is None:
            raise
        leaves: list[BaseException] = []
        todo: list[BaseException] = [rest]
        while todo:
            exc = todo.pop(0)
            if isinstance(exc, BaseExceptionGroup):
                todo.extend(exc.exceptions)
            else:
                leaves.append(exc)
        raise next((e for e in leaves if isinstance(e, ExpertError)), leaves[0]) from None
    return results
