"""Typed symbol search for Python with jedi: definitions, references and subclasses, resolved.

Precision class ``typed``: every item is something jedi's static analysis produced or
confirmed, never a bare tree-sitter tag. The symbols index is only the *candidate finder* that
keeps jedi cheap (jedi's own project-wide search parses every file that mentions a name and
took 1.5 s on flask, 4.4 s on the stdlib):

* **definitions** — candidate files come from the index's Python definitions with the asked
  name; jedi parses each and its ``get_names`` gives the definition's full name (module path
  included: ``pkg.mod.Cls.method``), type and exact range. A tag jedi does not see is dropped;
* **references** — candidate files are those whose text mentions the name (the index's
  ``names`` table); every occurrence in them is ``goto``-resolved by jedi and kept only if it
  lands on one of the definitions above (or, for a name defined outside the workspace, on a
  full name ending in the asked one). ``obj.save()`` on an unrelated ``save`` is not a caller;
* **subclasses** — definitions whose bases mention the name, kept when jedi resolves the base
  to the target; then one level further down.

jedi is not thread-safe and can be slow, so calls are serialised by one lock, run in a worker
thread, and stop at the expert's own soft deadline (70 % of ``timeout_ms``), returning what was
confirmed so far. ``jedi.Project`` objects are cached per project root; the interpreter
environment is used in-process (no subprocess per query). Offline: nothing is fetched.
"""

from __future__ import annotations

import re
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import anyio

from ..errors import ExpertTimeout
from ..index.files import read_indexable
from ..index.symbols import SymbolRow, SymbolStore, last_component
from ..types import Evidence, Project, Query
from ..workspace import in_scope
from .base import expert_errors, settings
from .symbols import SymbolsExpert, base_score_any, symbol_plan

_JEDI_LOCK = threading.Lock()
_PROJECTS: dict[Path, Any] = {}
_ENV: list[Any] = []
SNIPPET_LINES = 8
HEADER_LINES = 10  # a class's bases are looked for this far below its first line
#: share of ``timeout_ms`` after which no new jedi call starts (one call can take ~1 s on a cold,
#: 6,000-line file), so a slow question returns what was confirmed instead of timing out empty
SOFT_DEADLINE = 0.7


@dataclass(frozen=True, slots=True)
class Target:
    """A definition jedi confirmed: what references and subclasses must resolve to."""

    project: str
    path: str
    module_path: str
    line: int  # the name's line (what ``goto`` returns)
    full_name: str
    type: str
    start_line: int
    end_line: int
    score: float
    content: str


def _jedi() -> Any:
    import jedi  # on first use: a missing package is mapped to `unavailable` by expert_errors

    return jedi


def _environment() -> Any:
    if not _ENV:
        _ENV.append(_jedi().InterpreterEnvironment())
    return _ENV[0]


def _project(root: Path) -> Any:
    proj = _PROJECTS.get(root)
    if proj is None:
        extra = tuple(str(root / d) for d in ("src", "lib") if (root / d).is_dir())  # src/ layouts
        proj = _PROJECTS[root] = _jedi().Project(root, added_sys_path=extra, smart_sys_path=True)
    return proj


class _Files:
    """jedi Scripts and source lines per file for one query (a file is parsed once)."""

    def __init__(self, projects: dict[str, Project]) -> None:
        self.projects = projects
        self._scripts: dict[tuple[str, str], tuple[Any, list[str]] | None] = {}

    def script(self, project: str, path: str) -> tuple[Any, list[str]] | None:
        key = (project, path)
        if key not in self._scripts:
            p = self.projects.get(project)
            data = read_indexable(p.root, path) if p is not None else None
            if data is None or p is None:
                self._scripts[key] = None
            else:
                code = data.decode("utf-8", "replace")
                script = _jedi().Script(code, path=p.root / path, project=_project(p.root), environment=_environment())
                self._scripts[key] = (script, code.split("\n"))
        return self._scripts[key]


def _snippet(lines: list[str], start: int, end: int) -> str:
    return "\n".join(lines[start - 1 : min(end, start - 1 + SNIPPET_LINES)])


class TypedExpert(SymbolsExpert):
    adapter = "typed"
    settings_schema = settings(
        {**SymbolsExpert.settings_schema["properties"], "max_files": {"type": "integer", "minimum": 1}}
    )
    languages = ("python",)
    references = False  # usages are found by resolving every mention, not from call tags
    with_names = True  # ... in the files that mention the name

    def plan(self, query: Query) -> dict[str, Any]:
        return {
            **symbol_plan(query, self.name),
            "analysis": "jedi",
            "max_files": int(self.settings.get("max_files", 60)),
        }

    async def search(self, query: Query, plan: dict[str, Any]) -> list[Evidence]:
        deadline = time.monotonic() + SOFT_DEADLINE * self.spec.timeout_ms / 1000
        with expert_errors(self.name):
            return await anyio.to_thread.run_sync(self._typed_sync, query, plan, deadline, abandon_on_cancel=True)

    def _typed_sync(self, query: Query, plan: dict[str, Any], deadline: float) -> list[Evidence]:
        store = self.store()
        if not _JEDI_LOCK.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise ExpertTimeout("jedi is busy with an earlier question", expert=self.name)
        try:
            files = _Files({p.name: p for p in query.projects})
            targets = self._definitions(store, files, plan, deadline)
            best = max((t.score for t in targets), default=0.0)
            best_targets = [t for t in targets if t.score >= best]  # ``Order.total`` is not ``FakeOrder.total``
            if plan["mode"] == "references":
                items = self._references(store, files, plan, best_targets, deadline)
            elif plan["mode"] == "subclasses":
                items = self._subclasses(store, files, plan, best_targets, deadline)
            else:
                items = [self._target_item(t) for t in targets]
        finally:
            _JEDI_LOCK.release()
        return self._finish(query, items)

    def _finish(self, query: Query, items: list[Evidence]) -> list[Evidence]:
        by_name = {p.name: p for p in query.projects}
        out: list[Evidence] = []
        seen: set[tuple[str, str, int, int]] = set()
        for e in sorted(items, key=lambda e: (-e.score, e.project, e.path, e.start_line)):
            where = (e.project, e.path, e.start_line, e.end_line)
            if where in seen or not in_scope(e.path, query.scope):
                continue
            seen.add(where)
            stale = self.stale_flags(by_name[e.project], e.path)
            if stale:
                e = replace(e, flags=stale)
            out.append(e)
            if len(out) >= query.limit:
                break
        return out

    # -- definitions ---------------------------------------------------------------------------

    def _definitions(self, store: SymbolStore, files: _Files, plan: dict[str, Any], deadline: float) -> list[Target]:
        names = plan["names"]
        scored = self._definition_rows(store, names, plan["guessed"], plan["projects"])
        by_file: dict[tuple[str, str], list[tuple[float, SymbolRow]]] = defaultdict(list)  # best files first
        for s, r in sorted(scored, key=lambda t: (-t[0], t[1].project, t[1].path, t[1].start_line)):
            by_file[(r.project, r.path)].append((s, r))
        out: list[Target] = []
        for found in list(by_file.values())[: plan["max_files"]]:
            if time.monotonic() > deadline:
                break
            for s, row in found:
                target = self._confirm_definition(files, row, s)
                if target is not None:
                    if any(target.full_name == ident for ident in names):
                        target = replace(target, score=1.0)
                    out.append(target)
        return out

    @staticmethod
    def _confirm_definition(files: _Files, row: SymbolRow, score: float) -> Target | None:
        """jedi's view of the definition tree-sitter tagged at ``row``; None when jedi sees none."""
        loaded = files.script(row.project, row.path)
        if loaded is None:
            return None
        script, lines = loaded
        for line, col in occurrences(lines, row.name, row.start_line, row.end_line, definition=True):
            for n in _goto(script, line, col, follow_imports=False):
                if n.name == row.name and n.line == line and n.type in DEFINITION_TYPES:
                    start = (n.get_definition_start_position() or (n.line, 0))[0]
                    end = (n.get_definition_end_position() or (n.line, 0))[0]
                    return Target(
                        row.project,
                        row.path,
                        str(n.module_path),
                        n.line,
                        n.full_name or row.qualified_name,
                        n.type,
                        start,
                        end,
                        score,
                        _snippet(lines, start, end),
                    )
        return None

    @staticmethod
    def _target_item(t: Target) -> Evidence:
        return Evidence(
            project=t.project,
            path=t.path,
            kind="symbol",
            start_line=t.start_line,
            end_line=t.end_line,
            content=t.content,
            score=round(t.score, 4),
            symbol=t.full_name,
            meta={"kind": t.type, "role": "definition", "full_name": t.full_name, "analysis": "jedi"},
        )

    # -- references ------------------------------------------------------------------------------

    @staticmethod
    def _resolves_to(script: Any, line: int, col: int, targets: list[Target], idents: list[str]) -> str | None:
        """The full name the name at (line, col) resolves to when it is one of ``targets`` (else None)."""
        for g in _goto(script, line, col, follow_imports=True):
            for t in targets:
                same_place = str(g.module_path) == t.module_path and g.line == t.line
                if same_place or (g.full_name and g.full_name == t.full_name):
                    return str(t.full_name)
            if not targets and g.full_name and any(g.full_name == i or g.full_name.endswith("." + i) for i in idents):
                return str(g.full_name)  # defined outside the workspace (stdlib, a dependency)
        return None

    def _references(
        self, store: SymbolStore, files: _Files, plan: dict[str, Any], targets: list[Target], deadline: float
    ) -> list[Evidence]:
        idents = plan["names"]
        own = {(t.project, t.path, t.line) for t in targets}
        out: list[Evidence] = []
        for ident in idents:
            last = last_component(ident)
            for project, path in store.files_mentioning(last, plan["projects"])[: plan["max_files"]]:
                if time.monotonic() > deadline:
                    break
                loaded = files.script(project, path)
                if loaded is None:
                    continue
                script, lines = loaded
                for line, col in occurrences(lines, last):
                    if (project, path, line) in own:
                        continue
                    if time.monotonic() > deadline:
                        break
                    full = self._resolves_to(script, line, col, targets, idents)
                    if full is None:
                        continue
                    context = script.get_context(line, col)
                    caller = context.full_name if context is not None and context.full_name else None
                    is_import = bool(_IMPORT.match(lines[line - 1]))
                    meta = {
                        "kind": "import" if is_import else "reference",
                        "role": "reference",
                        "target": full,
                        "analysis": "jedi",
                    }
                    if caller:
                        meta["enclosing"] = caller
                    out.append(
                        Evidence(
                            project=project,
                            path=path,
                            kind="symbol",
                            start_line=line,
                            end_line=line,
                            content=lines[line - 1].strip(),
                            score=0.9 if is_import else 1.0,
                            symbol=caller or full,
                            meta=meta,
                        )
                    )
        # the definitions close the list: what every reference above resolved to
        return out + [replace(self._target_item(t), score=round(0.5 * t.score, 4)) for t in targets]

    # -- subclasses ------------------------------------------------------------------------------

    def _subclasses(
        self, store: SymbolStore, files: _Files, plan: dict[str, Any], targets: list[Target], deadline: float
    ) -> list[Evidence]:
        out: list[Evidence] = []
        idents, factor = list(plan["names"]), 1.0
        for _depth in range(2):
            found: list[Target] = []
            for row in store.subclasses(idents, plan["projects"])[: plan["max_files"] * 4]:
                if time.monotonic() > deadline:
                    return out
                confirmed = self._confirm_subclass(files, row, targets, idents, factor)
                if confirmed is not None:
                    found.append(confirmed)
                    item = self._target_item(confirmed)
                    out.append(replace(item, meta={**item.meta, "bases": list(row.bases)}))
            if not found:
                break
            targets, idents, factor = found, [t.full_name for t in found], factor * 0.8
        return out

    def _confirm_subclass(
        self, files: _Files, row: SymbolRow, targets: list[Target], idents: list[str], factor: float
    ) -> Target | None:
        """The class at ``row`` when one of its bases resolves to a target (jedi ``goto`` on the base)."""
        own = self._confirm_definition(files, row, base_score_any(idents, row.bases) * factor or factor)
        loaded = files.script(row.project, row.path)
        if own is None or loaded is None:
            return None
        script, lines = loaded
        header_end = min(row.end_line, own.line + HEADER_LINES)
        for last in sorted({last_component(i) for i in idents}):
            for line, col in occurrences(lines, last, own.line, header_end):
                if self._resolves_to(script, line, col, targets, idents):
                    return own
        return None


DEFINITION_TYPES = frozenset({"class", "function", "statement", "module", "instance", "param"})
_IMPORT = re.compile(r"\s*(from\s+\S+\s+)?import\b")


def occurrences(
    lines: list[str], name: str, start: int = 1, end: int | None = None, *, definition: bool = False
) -> list[tuple[int, int]]:
    """(line, column) of ``name`` as a whole word in lines ``start..end`` outside ``#`` comments.

    With ``definition``, ``def name`` / ``class name`` come first: the name jedi can ``goto``.
    """
    word = re.compile(
        rf"(?<![\w.])(?:(?:async\s+)?def|class)\s+({re.escape(name)})\b" if definition else rf"\b({re.escape(name)})\b"
    )
    found: list[tuple[int, int]] = []
    last = min(len(lines), end or len(lines))
    for n in range(max(1, start), last + 1):
        text = lines[n - 1]
        if name not in text:
            continue
        comment = text.find("#")
        for m in word.finditer(text):
            if comment < 0 or m.start(1) < comment:
                found.append((n, m.start(1)))
    if definition:
        found += [o for o in occurrences(lines, name, start, end) if o not in found]
    return found


def _goto(script: Any, line: int, col: int, *, follow_imports: bool) -> list[Any]:
    try:
        return list(script.goto(line, col, follow_imports=follow_imports))
    except Exception:  # noqa: BLE001 - jedi gives up on some dynamic code: nothing confirmed
        return []
