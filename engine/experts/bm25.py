"""Ranked keyword search (BM25) over syntax chunks, on tantivy (docs/adr/0002-bm25-engine.md).

Documents are chunks (function / class / section / window) with their path and enclosing
symbol; text goes through the code-aware tokenizer (:mod:`engine.index.tokenize`) before it
reaches tantivy's whitespace tokenizer, so ``getUserName`` matches ``user name`` and itself.
The index lives in ``<data>/index/<expert>/`` and is updated incrementally by ``engine index``
(delete-by-file-key + add, so re-adding a file is idempotent).
"""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

from ..errors import ExpertUnavailable, ExpertUnconfigured
from ..index.build import UnitProgress
from ..index.chunking import chunk_file
from ..index.files import SourceFile
from ..index.manifest import Manifest
from ..index.tokenize import code_tokens, code_tokens_by_line
from ..types import Evidence, Query
from ..workspace import in_scope, normalize_scope_path
from .base import POSITIVE_INT, settings
from .indexed import IndexedExpert

INDEX_FORMAT = "bm25-tantivy-v2"  # v2: the chunk text is stored only (v1 also indexed it as one raw term)
MAX_QUERY_TERMS = 96

_OPEN: dict[Path, Any] = {}
_OPEN_LOCK = threading.Lock()


def _schema() -> Any:
    import tantivy

    sb = tantivy.SchemaBuilder()
    sb.add_text_field("key", stored=True, tokenizer_name="raw")
    sb.add_text_field("project", stored=True, tokenizer_name="raw")
    sb.add_text_field("path", stored=True, tokenizer_name="raw")
    sb.add_text_field("symbol", stored=True, tokenizer_name="raw", index_option="basic")
    sb.add_text_field("kind", stored=True, tokenizer_name="raw", index_option="basic")
    # Stored for the answer, never searched: a raw-indexed text field made every chunk one giant
    # term and was ~85% of the index build CPU (15.3 s → 2.2 s for sqlalchemy's 44k chunks).
    sb.add_bytes_field("text", stored=True, indexed=False)
    sb.add_text_field("body", stored=False, tokenizer_name="whitespace")
    sb.add_integer_field("start", stored=True)
    sb.add_integer_field("end", stored=True)
    return sb.build()


def query_terms(question: str, emphasis: tuple[str, ...] = ()) -> list[tuple[str, int]]:
    """Distinct query tokens with their counts, most frequent first, capped.

    Tokens of ``emphasis`` (identifiers and quoted literals the classifier found) count twice:
    in "where is Console defined" the name matters more than the words around it.
    """
    counts = Counter(code_tokens(question, stop_words=True))
    for tok in code_tokens(" ".join(emphasis), stop_words=True):
        counts[tok] += 1
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_QUERY_TERMS]


class TantivyIndexer:
    """``symbol_weight`` repeats a chunk's symbol (qualified name, heading path) in the searchable
    body, so a title match outweighs the same word in running text; it is part of ``indexer_id``."""

    def __init__(self, directory: Path, snippet_chars: int, *, symbol_weight: int = 1) -> None:
        self.dir = directory
        self.symbol_weight = max(1, symbol_weight)
        self.indexer_id = INDEX_FORMAT if self.symbol_weight == 1 else f"{INDEX_FORMAT}:symbol-x{self.symbol_weight}"
        self.manifest_path = directory / "manifest.json"
        self.snippet_chars = snippet_chars
        self._index: Any = None
        self._writer: Any = None

    def open(self) -> None:
        import tantivy

        tdir = self.dir / "tantivy"
        # no manifest, or one of another format ⇒ the index content is unknown or has another schema
        fresh = not tdir.exists() or Manifest.load(self.manifest_path).indexer_id != self.indexer_id
        tdir.mkdir(parents=True, exist_ok=True)
        if fresh:  # no manifest ⇒ the index content is unknown: start clean
            for f in tdir.iterdir():
                f.unlink()
        self._index = tantivy.Index(_schema(), path=str(tdir))
        self._writer = self._index.writer(heap_size=128_000_000, num_threads=1)

    def add(self, files: list[tuple[SourceFile, bytes]], progress: UnitProgress | None = None) -> int:
        import tantivy

        n = 0
        for f, data in files:
            before = n
            self._writer.delete_documents_by_term("key", f.key)
            seen: dict[str, tuple[str, ...]] = {}  # per file: its chunks overlap
            for c in chunk_file(f.path, data):
                symbol = " ".join([c.symbol or ""] * self.symbol_weight)
                body = " ".join(code_tokens(f"{f.path} {symbol}") + code_tokens_by_line(c.text, seen))
                self._writer.add_document(
                    tantivy.Document(
                        key=f.key,
                        project=f.project,
                        path=f.path,
                        symbol=c.symbol or "",
                        kind=c.kind,
                        text=c.text[: self.snippet_chars * 4].encode("utf-8"),
                        body=body,
                        start=c.start_line,
                        end=c.end_line,
                    )
                )
                n += 1
            if progress:
                progress(n - before)
        return n

    def remove(self, keys: list[str]) -> None:
        for k in keys:
            self._writer.delete_documents_by_term("key", k)

    def commit(self) -> None:
        self._writer.commit()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.wait_merging_threads()
        self._writer = self._index = None
        with _OPEN_LOCK:
            _OPEN.pop(self.dir, None)


class BM25Expert(IndexedExpert):
    adapter = "bm25"
    settings_schema = settings({"stored_chars": POSITIVE_INT, "symbol_weight": POSITIVE_INT})
    #: the ``kind`` of the items it returns (the docs expert, a configured subclass, says ``doc``)
    item_kind: ClassVar[str] = "chunk"

    def indexer(self) -> TantivyIndexer:
        return TantivyIndexer(
            self._dir,
            int(self.settings.get("stored_chars", 1200)),
            symbol_weight=int(self.settings.get("symbol_weight", 1)),
        )

    def plan(self, query: Query) -> dict[str, Any]:
        terms = query_terms(query.question, query.features.identifiers + query.features.literals)
        if not terms:
            raise ExpertUnconfigured("the question has no searchable terms", expert=self.name)
        return {
            "terms": [t for t, _ in terms],
            "boosted": {t: c for t, c in terms if c > 1},
            "projects": [p.name for p in query.projects],
            "path": normalize_scope_path(query.scope.path),
            "language": query.scope.language,
        }

    def _indexed_nothing(self) -> bool:
        """``engine index`` ran and found no file for this index (it then opens no writer at all)."""
        if not self.manifest_path.exists():
            return False
        m = Manifest.load(self.manifest_path)
        return not m.files and m.pending == 0

    def _searcher(self) -> Any:
        import tantivy

        tdir = self._dir / "tantivy"
        if not (tdir / "meta.json").exists():
            raise ExpertUnavailable(f"no BM25 index in {self._dir}: run `engine index`", expert=self.name)
        with _OPEN_LOCK:
            index = _OPEN.get(self._dir)
            if index is None:
                index = _OPEN[self._dir] = tantivy.Index.open(str(tdir))
        index.reload()
        return index

    def _search_sync(self, query: Query, plan: dict[str, Any]) -> list[Evidence]:
        import tantivy

        if not (self._dir / "tantivy" / "meta.json").exists() and self._indexed_nothing():
            return []  # indexed, and no file was for this index (a repo without docs): an empty answer
        index = self._searcher()
        schema = index.schema
        should = []
        for term in plan["terms"]:
            tq = tantivy.Query.term_query(schema, "body", term)
            boost = plan["boosted"].get(term)
            should.append(
                (
                    tantivy.Occur.Should,
                    tantivy.Query.boost_query(tq, min(3.0, 1.0 + 0.5 * (boost - 1))) if boost else tq,
                )
            )
        q = tantivy.Query.boolean_query(should)
        all_projects = {p.name for p in self.env.workspace.projects}
        if set(plan["projects"]) != all_projects:
            projects = tantivy.Query.boolean_query(
                [(tantivy.Occur.Should, tantivy.Query.term_query(schema, "project", p)) for p in plan["projects"]]
            )
            q = tantivy.Query.boolean_query([(tantivy.Occur.Must, q), (tantivy.Occur.Must, projects)])
        scoped = bool(plan.get("path") or plan.get("language"))
        fetch = query.limit * (8 if scoped else 1)
        searcher = index.searcher()
        by_name = {p.name: p for p in query.projects}
        out: list[Evidence] = []
        for score, addr in searcher.search(q, fetch).hits:
            d = searcher.doc(addr).to_dict()
            project, path = d["project"][0], d["path"][0]
            # a project this workspace names otherwise (indexed with another set of roots: two
            # roots of one name are named by their parent folder too) is not one of the query's
            if project not in by_name or (scoped and not in_scope(path, query.scope)):
                continue
            flags = self.stale_flags(by_name[project], path)
            symbol = d["symbol"][0] or None
            out.append(
                Evidence(
                    project=project,
                    path=path,
                    kind=self.item_kind,
                    start_line=int(d["start"][0]),
                    end_line=int(d["end"][0]),
                    content=bytes(d["text"][0]).decode("utf-8", "replace"),
                    score=round(float(score), 4),
                    symbol=symbol,
                    meta={"chunk_kind": d["kind"][0]},
                    flags=flags,
                )
            )
            if len(out) >= query.limit:
                break
        return out
