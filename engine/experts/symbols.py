"""Structural symbol search: tree-sitter definitions, references and base types (precision ``structural``).

Answers three kinds of question from the symbols index (:mod:`engine.index.symbols`):

* **definitions** — "where is X defined": definitions whose name or qualified name matches X,
  ranked exact > case-insensitive > suffix of the qualified name > same last name only. Every
  matching definition comes back, across all projects, so an ambiguous name is never
  silently resolved to one of its homes;
* **references** — "who calls / uses / references X": reference tags (calls, type uses) whose
  callee as written matches X, plus definitions inheriting from X; the item's ``symbol`` is the
  definition that contains the reference (the caller), which is what answers "who";
* **subclasses** — "what subclasses / implements / extends X": definitions whose ``bases``
  contain X, then their own subclasses one level down.

The mode comes from the question's words and class (:func:`symbol_plan`), shared with the typed
expert. Names are not resolved — a call ``save()`` may mean any ``save`` — which is exactly why
this expert is ``structural`` and never ``typed``.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any, TypeVar

from ..errors import ExpertUnavailable, ExpertUnconfigured
from ..index.files import SourceFile
from ..index.symbols import SymbolIndexer, SymbolRow, SymbolStore, last_component, taggable
from ..index.tokenize import STOP_WORDS
from ..types import Evidence, Query
from ..workspace import in_scope, normalize_scope_path
from .base import settings
from .indexed import IndexedExpert

SUBCLASS_WORDS = re.compile(
    r"\b(subclass(es|ed|ing)?|inherit(s|ed|ing|ance)?|implements|implementations?|"
    r"implementers?|implementing|extends|extending|derived?|derives|descendants?|"
    r"child class(es)?)\b",
    re.I,
)
REFERENCE_WORDS = re.compile(
    r"\b(calls?|callers?|called|call sites?|references?|referenced|referencing|uses|"
    r"usages?|used by|who uses|invok(es|ed|ing)|importers?|imports|imported|depends?|"
    r"breaks?|impact)\b",
    re.I,
)
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NOT_NAMES = frozenset(
    [
        "where",
        "what",
        "which",
        "who",
        "whom",
        "class",
        "classes",
        "function",
        "functions",
        "method",
        "methods",
        "type",
        "types",
        "interface",
        "interfaces",
        "struct",
        "structs",
        "symbol",
        "symbols",
        "module",
        "modules",
        "variable",
        "constant",
        "field",
        "defined",
        "declared",
        "implemented",
        "located",
        "lives",
        "live",
        "exist",
        "exists",
    ]
)
CLASS_LIKE = frozenset({"class", "interface", "struct", "trait", "enum", "implementation", "type"})
MAX_NAMES = 8


def symbol_mode(query: Query) -> str:
    """definitions | references | subclasses, from the question's words first, then its class."""
    if SUBCLASS_WORDS.search(query.question):
        return "subclasses"
    if REFERENCE_WORDS.search(query.question) or query.klass == "cross-repo-impact":
        return "references"
    return "definitions"


def symbol_names(query: Query) -> tuple[list[str], bool]:
    """The names asked about, and whether they were guessed from plain words.

    Identifiers the classifier found (camelCase, snake_case, dotted, "where is X") come first.
    Without any, capitalised words (``Expert`` in "what subclasses Expert"), else the remaining
    content words, are tried — matched only on whole names, never on qualified-name suffixes.
    """
    names = [i for i in query.features.identifiers if _WORD.fullmatch(last_component(i))]
    if names:
        return list(dict.fromkeys(names))[:MAX_NAMES], False
    words = [
        w
        for w in _WORD.findall(query.question)
        if len(w) >= 3
        and w.lower() not in STOP_WORDS
        and w.lower() not in _NOT_NAMES
        and not SUBCLASS_WORDS.fullmatch(w)
        and not REFERENCE_WORDS.fullmatch(w)
    ]
    capital = [w for i, w in enumerate(words) if w[0].isupper() and not (i == 0 and query.question.startswith(w))]
    return list(dict.fromkeys(capital or words))[:MAX_NAMES], True


def symbol_plan(query: Query, expert: str) -> dict[str, Any]:
    names, guessed = symbol_names(query)
    if not names:
        raise ExpertUnconfigured("the question names no symbol to look up", expert=expert)
    return {
        "mode": symbol_mode(query),
        "names": names,
        "guessed": guessed,
        "projects": [p.name for p in query.projects],
        "path": normalize_scope_path(query.scope.path),
        "language": query.scope.language,
    }


def module_of(path: str) -> str:
    """``src/pkg/mod.py`` → ``src.pkg.mod``; a package's ``__init__`` is the package itself."""
    parts = list(PurePosixPath(path).with_suffix("").parts)
    if parts and parts[-1] in ("__init__", "index", "mod"):
        parts.pop()
    return ".".join(parts)


def _module_fits(prefix: str, path: str) -> bool:
    module = module_of(path).lower()
    prefix = prefix.lower()
    return module == prefix or module.endswith("." + prefix)


def definition_score(ident: str, qname: str, path: str, guessed: bool = False) -> float:
    """How well a definition ``qname`` in ``path`` matches the name asked; 0 when it does not.

    exact (1.0, also when the question adds the module: ``pkg.mod.Cls``) > case-insensitive (0.8)
    > the question is a suffix of the qualified name (0.7 / 0.5 ignoring case) > a qualifier we
    cannot place (0.6) > only the last component agrees (0.3 / 0.2).
    """
    li, lq = ident.lower(), qname.lower()
    if guessed:
        last = last_component(qname)
        return 0.8 if last == ident else 0.6 if last.lower() == li else 0.0
    if qname == ident or (ident.endswith("." + qname) and _module_fits(ident[: -len(qname) - 1], path)):
        return 1.0
    if lq == li or (li.endswith("." + lq) and _module_fits(li[: -len(lq) - 1], path)):
        return 0.8
    if qname.endswith("." + ident):
        return 0.7
    if ident.endswith("." + qname):
        return 0.6
    if lq.endswith("." + li):
        return 0.5
    if last_component(qname) == last_component(ident):
        return 0.3
    return 0.2 if last_component(qname).lower() == last_component(ident).lower() else 0.0


T = TypeVar("T")
#: a definition matched this well by a *qualified* name (``Parser.use_args``) leaves out the
#: definitions that share only its last component (0.3) ...
QUALIFIED_HIT = 0.8
LAST_NAME_ONLY = 0.3
#: ... and, when the qualifier is a class (CapWords), those where the name has no such qualifier
#: (0.6: a module-level ``use_args = parser.use_args``). A module qualifier keeps them: packages
#: re-export (``attrs.define`` is implemented as ``attr._next_gen.define``).
NO_SUCH_QUALIFIER = 0.6


def without_namesakes(scored: list[tuple[float, T]], names: list[str]) -> list[tuple[float, T]]:
    """When the question qualifies the name and some definition matches that qualified name, the
    definitions that merely share its last component are namesakes, not answers: each of them
    otherwise counts as a definition the other experts "agree" on (a module-level
    ``use_args = parser.use_args`` in every webargs parser outranked ``Parser.use_args`` itself)."""
    qualified = [n for n in names if "." in n]
    if not qualified or not scored or max(s for s, _ in scored) < QUALIFIED_HIT:
        return scored
    by_class = any(n.split(".")[-2][:1].isupper() for n in qualified)
    floor = NO_SUCH_QUALIFIER if by_class else LAST_NAME_ONLY
    return [(s, r) for s, r in scored if s > floor]


def reference_score(ident: str, written: str) -> float:
    """How well a reference written as ``written`` (``self.save``, ``os.path.join``) matches."""
    if written == ident:
        return 1.0
    if written.endswith("." + ident) or ident.endswith("." + written):
        return 0.8
    if last_component(written) == last_component(ident):
        return 0.5
    return 0.3 if last_component(written).lower() == last_component(ident).lower() else 0.0


def base_score(ident: str, bases: tuple[str, ...]) -> float:
    best = 0.0
    for b in bases:
        if b == ident or b.endswith("." + ident) or ident.endswith("." + b):
            best = max(best, 1.0)
        elif last_component(b) == last_component(ident):
            best = max(best, 0.9)
        elif last_component(b).lower() == last_component(ident).lower():
            best = max(best, 0.6)
    return best


def _kind_rank(kind: str) -> int:
    return 0 if kind in CLASS_LIKE else 1 if kind in ("function", "method") else 2


class SymbolsExpert(IndexedExpert):
    adapter = "symbols"
    settings_schema = settings({"snippet_lines": {"type": "integer", "minimum": 0}})
    #: grammar languages this expert indexes (None: every supported code language)
    languages: tuple[str, ...] | None = None
    _store: SymbolStore | None = None

    def indexer(self) -> SymbolIndexer:
        return SymbolIndexer(
            self._dir,
            languages=self.languages,
            snippet_lines=int(self.settings.get("snippet_lines", 8)),
        )

    def accepts(self, f: SourceFile) -> bool:
        """Only files a grammar can tag are indexed (called by ``engine index``)."""
        return taggable(f.path, self.languages)

    def store(self) -> SymbolStore:
        """The read side, kept per expert instance (its sqlite connections are per thread)."""
        if self._store is None:
            store = SymbolStore(self._dir)
            if not store.exists():
                raise ExpertUnavailable(f"no symbols index in {self._dir}: run `engine index`", expert=self.name)
            self._store = store
        return self._store

    def plan(self, query: Query) -> dict[str, Any]:
        return symbol_plan(query, self.name)

    def ranked_rows(self, store: SymbolStore, plan: dict[str, Any]) -> list[tuple[float, int, SymbolRow]]:
        """(score, group, row) best first; ``group`` orders result kinds within a mode."""
        names, guessed, projects = plan["names"], plan["guessed"], plan["projects"]
        if plan["mode"] == "references":
            scored = self._reference_rows(store, names, guessed, projects)
        elif plan["mode"] == "subclasses":
            scored = self._subclass_rows(store, names, projects)
        else:
            scored = [(s, 0, row) for s, row in self._definition_rows(store, names, guessed, projects)]
        scored.sort(key=lambda t: (t[1], -t[0], _kind_rank(t[2].kind), t[2].project, t[2].path, t[2].start_line))
        return scored

    @staticmethod
    def _definition_rows(
        store: SymbolStore, names: list[str], guessed: bool, projects: list[str]
    ) -> list[tuple[float, SymbolRow]]:
        rows = store.by_name([last_component(n) for n in names], "definition", projects)
        scored = [(max(definition_score(n, r.qualified_name, r.path, guessed) for n in names), r) for r in rows]
        return without_namesakes([(s, r) for s, r in scored if s > 0], names)

    def _reference_rows(
        self, store: SymbolStore, names: list[str], guessed: bool, projects: list[str]
    ) -> list[tuple[float, int, SymbolRow]]:
        """Reference tags, then classes inheriting from the name, then (halved) its definitions."""
        scored: list[tuple[float, int, SymbolRow]] = []
        for row in store.by_name([last_component(n) for n in names], "reference", projects):
            s = max(reference_score(n, row.qualified_name) for n in names)
            if s >= (0.5 if guessed else 0.01):
                scored.append((s, 0, row))
        for row in store.subclasses(names, projects):
            s = base_score_any(names, row.bases)
            if s > 0:
                scored.append((s * 0.9, 1, row))
        scored += [(s * 0.5, 2, row) for s, row in self._definition_rows(store, names, guessed, projects) if s >= 0.7]
        return scored

    @staticmethod
    def _subclass_rows(store: SymbolStore, names: list[str], projects: list[str]) -> list[tuple[float, int, SymbolRow]]:
        """Direct subclasses, then theirs one level down — within the project of the subclass found
        first: an unresolved name alone would also match an unrelated class of that name elsewhere."""
        scored: list[tuple[float, int, SymbolRow]] = []
        seen: set[tuple[str, str, int]] = set()
        frontier: dict[str, set[str]] = {n: set() for n in names}  # name → projects it counts in (∅: all)
        factor = 1.0
        for depth in range(2):
            found: dict[str, set[str]] = {}
            for row in store.subclasses(list(frontier), projects):
                fits = [n for n, allowed in frontier.items() if not allowed or row.project in allowed]
                s = base_score_any(fits, row.bases) * factor
                place = (row.project, row.path, row.start_line)
                if s > 0 and place not in seen:
                    seen.add(place)
                    scored.append((s, depth, row))
                    found.setdefault(row.qualified_name, set()).add(row.project)
            frontier, factor = found, factor * 0.8
            if not frontier:
                break
        return scored

    def _search_sync(self, query: Query, plan: dict[str, Any]) -> list[Evidence]:
        store = self.store()
        by_name = {p.name: p for p in query.projects}
        scoped = bool(plan.get("path") or plan.get("language"))
        out: list[Evidence] = []
        for score, _, row in self.ranked_rows(store, plan):
            if scoped and not in_scope(row.path, query.scope):
                continue
            project = by_name.get(row.project)
            if project is None:
                continue
            out.append(row_evidence(row, score, self.stale_flags(project, row.path)))
            if len(out) >= query.limit:
                break
        return out


def base_score_any(names: list[str], bases: tuple[str, ...]) -> float:
    return max((base_score(n, bases) for n in names), default=0.0)


def row_evidence(row: SymbolRow, score: float, flags: tuple[str, ...] = ()) -> Evidence:
    """One index row as an item: a definition names itself, a reference names its caller."""
    meta: dict[str, Any] = {"kind": row.kind, "role": row.role}
    if row.bases:
        meta["bases"] = list(row.bases)
    if row.role == "reference":
        meta["target"] = row.qualified_name
        symbol = row.enclosing or row.qualified_name
    else:
        symbol = row.qualified_name
    if row.enclosing:
        meta["enclosing"] = row.enclosing
    return symbol_item((row.project, row.path, row.start_line, row.end_line), row.snippet, score, symbol, meta, flags)


def symbol_item(
    where: tuple[str, str, int, int],
    content: str,
    score: float,
    symbol: str | None,
    meta: dict[str, Any],
    flags: tuple[str, ...] = (),
) -> Evidence:
    """A ``kind: symbol`` item at (project, path, start line, end line): the structural and typed
    experts' one shape."""
    project, path, start, end = where
    return Evidence(
        project=project,
        path=path,
        kind="symbol",
        start_line=start,
        end_line=end,
        content=content,
        score=round(score, 4),
        symbol=symbol,
        meta=meta,
        flags=flags,
    )
