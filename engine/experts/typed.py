"""Typed symbol search for Python: definitions, references and subclasses, as jedi resolved them.

Precision class ``typed``: every item is a row jedi's static analysis wrote into the typed index
during ``engine index`` (:mod:`engine.index.typed`, docs/adr/0013-typed-index.md), never a bare
tree-sitter tag. Query time is a look-up, no jedi call:

* **definitions** — definitions whose name is the asked one, ranked like the structural
  expert's (:func:`~engine.experts.symbols.definition_score`, on the qualified name inside the
  module) and exact on jedi's full name (``pkg.mod.Cls.method``, module path included);
* **references** — the references jedi resolved (``goto``, imports followed) to the best of
  those definitions, across every project of the workspace: ``obj.save()`` on an unrelated
  ``save`` is not a caller. For a name defined outside the workspace (stdlib, a dependency), the
  references whose resolved full name is or ends with the asked one. The definitions close the
  list (halved): what the references resolved to;
* **subclasses** — classes with a base that resolved to one of those definitions, then one level
  further down.

Each file's first reference ranks above any file's second (a file-level decay), so a name used
40 times in one module does not crowd out the other modules that use it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

from ..errors import ExpertUnavailable
from ..index.files import SourceFile
from ..index.symbols import last_component
from ..index.typed import DefRow, RefRow, TypedIndexer, TypedStore, is_python
from ..types import Evidence, Query
from ..workspace import in_scope
from .base import POSITIVE_INT, settings
from .indexed import IndexedExpert
from .symbols import definition_score, symbol_item, symbol_plan, without_namesakes

#: a file's k-th reference (from 0) scores ``1 - k * FILE_DECAY``, floored at ``MIN_SCORE``; an
#: import scores ``IMPORT_SCORE``: every file's first use ranks before any file's second
FILE_DECAY = 0.05
MIN_SCORE = 0.1
IMPORT_SCORE = 0.9
STATEMENT_FACTOR = 0.95  # ``name = …`` at module or class level, below a ``def`` / ``class`` of that name
STUB_FACTOR = 0.9  # a ``.pyi`` declaration, below the source that implements it
SUBCLASS_DEPTH = 2


class TypedExpert(IndexedExpert):
    adapter = "typed"
    settings_schema = settings(
        {
            "max_files": POSITIVE_INT,  # references / subclasses come from at most this many files per answer
            "file_seconds": {"type": "number", "exclusiveMinimum": 0},  # index time: jedi's CPU seconds per file
            "recycle_files": POSITIVE_INT,  # index time: a fresh jedi state after this many files (memory)
        }
    )
    languages = ("python",)
    #: jedi resolves every name of every file: ~5–10x slower than tree-sitter, so it is indexed
    #: after the lexical and structural indexes (they are searchable first)
    slow_index = True
    _store: TypedStore | None = None

    def indexer(self) -> TypedIndexer:
        return TypedIndexer(
            self._dir,
            self.env.workspace.projects,
            file_seconds=float(self.settings.get("file_seconds", 30.0)),
            recycle_files=int(self.settings.get("recycle_files", 300)),
        )

    def accepts(self, f: SourceFile) -> bool:
        return is_python(f.path)

    def store(self) -> TypedStore:
        if self._store is None:
            store = TypedStore(self._dir)
            if not store.exists():
                raise ExpertUnavailable(f"no typed index in {self._dir}: run `engine index`", expert=self.name)
            self._store = store
        return self._store

    def plan(self, query: Query) -> dict[str, Any]:
        max_files = int(self.settings.get("max_files", 60))
        return {**symbol_plan(query, self.name), "analysis": "jedi", "max_files": max_files}

    def _search_sync(self, query: Query, plan: dict[str, Any]) -> list[Evidence]:
        store = self.store()
        targets = self._definitions(store, plan)
        best = max((s for s, _ in targets), default=0.0)
        best_targets = [d for s, d in targets if s >= best]  # ``Order.total`` is not ``FakeOrder.total``
        if plan["mode"] == "references":
            items = self._references(store, plan, best_targets) + [
                _definition_item(d, 0.5 * s) for s, d in targets if s >= best
            ]
        elif plan["mode"] == "subclasses":
            items = self._subclasses(store, plan, best_targets)
        else:
            items = [_definition_item(d, s) for s, d in targets]
        return self._finish(query, items)

    def _finish(self, query: Query, items: list[Evidence]) -> list[Evidence]:
        by_name = {p.name: p for p in query.projects}
        out: list[Evidence] = []
        seen: set[tuple[str, str, int, int]] = set()
        for e in sorted(items, key=lambda e: (-e.score, e.project, e.path, e.start_line)):
            where = (e.project, e.path, e.start_line, e.end_line)
            project = by_name.get(e.project)
            if project is None or where in seen or not in_scope(e.path, query.scope):
                continue
            seen.add(where)
            stale = self.stale_flags(project, e.path)
            out.append(replace(e, flags=stale) if stale else e)
            if len(out) >= query.limit:
                break
        return out

    @staticmethod
    def _definitions(store: TypedStore, plan: dict[str, Any]) -> list[tuple[float, DefRow]]:
        """Definitions of the asked names, scored; among equals a class or function outranks an
        attribute or constant, and source outranks a ``.pyi`` stub that only declares it."""
        names, guessed = plan["names"], plan["guessed"]
        scored = []
        for d in store.definitions(names, plan["projects"]):
            s = 1.0 if d.full_name in names else max(definition_score(n, d.qname, d.path, guessed) for n in names)
            if s > 0:
                s *= STATEMENT_FACTOR if d.type == "statement" else 1.0
                s *= STUB_FACTOR if d.path.endswith(".pyi") else 1.0
                scored.append((s, d))
        return without_namesakes(scored, names)

    @staticmethod
    def _references(store: TypedStore, plan: dict[str, Any], targets: list[DefRow]) -> list[Evidence]:
        projects = plan["projects"]
        if targets:
            rows = store.references_to(sorted({d.full_name for d in targets}), projects)
        else:  # defined outside the workspace: match the resolved full name itself
            rows = [
                r
                for ident in plan["names"]
                for r in store.references_ending(last_component(ident), projects)
                if r.target == ident or r.target.endswith("." + ident)
            ]
        out: list[Evidence] = []
        files: set[tuple[str, str]] = set()
        uses: Counter[tuple[str, str]] = Counter()  # a file's references so far (its imports score flat)
        for r in rows:
            place = (r.project, r.path)
            if place not in files and len(files) >= plan["max_files"]:
                continue
            files.add(place)
            if r.kind == "import":
                score = IMPORT_SCORE
            else:
                score = max(MIN_SCORE, 1.0 - uses[place] * FILE_DECAY)
                uses[place] += 1
            out.append(_reference_item(r, score))
        return out

    @staticmethod
    def _subclasses(store: TypedStore, plan: dict[str, Any], targets: list[DefRow]) -> list[Evidence]:
        projects = plan["projects"]
        if targets:
            found = store.subclasses(sorted({d.full_name for d in targets}), projects)
        else:  # a base outside the workspace (``Exception``): its resolved full name ends with the name
            found = [
                (d, base)
                for d, base in store.subclasses(plan["names"], projects, by_last=True)
                if any(base == n or base.endswith("." + n) for n in plan["names"])
            ]
        out: list[Evidence] = []
        seen: set[str] = set()
        files: set[tuple[str, str]] = set()
        factor = 1.0
        for _depth in range(SUBCLASS_DEPTH):
            next_level: list[str] = []
            for d, base in found:
                if d.full_name in seen or (len(files) >= plan["max_files"] and (d.project, d.path) not in files):
                    continue
                seen.add(d.full_name)
                files.add((d.project, d.path))
                next_level.append(d.full_name)
                item = _definition_item(d, factor)
                meta = {**item.meta, "bases": store.bases_of(d.project, d.path, d.full_name), "base": base}
                out.append(replace(item, meta=meta))
            if not next_level:
                break
            found, factor = store.subclasses(next_level, projects), factor * 0.8
        return out


def _definition_item(d: DefRow, score: float) -> Evidence:
    meta = {"kind": d.type, "role": "definition", "full_name": d.full_name, "analysis": "jedi"}
    return symbol_item((d.project, d.path, d.start, d.end), d.snippet, score, d.full_name, meta)


def _reference_item(r: RefRow, score: float) -> Evidence:
    meta = {"kind": r.kind, "role": "reference", "target": r.target, "analysis": "jedi"}
    if r.enclosing:
        meta["enclosing"] = r.enclosing
    return symbol_item((r.project, r.path, r.line, r.line), r.text, score, r.enclosing or r.target, meta)
