"""A small persisted exact vector store: brute-force cosine over a float32 matrix.

Rows are L2-normalised on ``add`` so a dot product is the cosine. Everything lives in one
file, ``<dir>/vectors.npz`` (matrix, ids as JSON, metadata as JSON), written atomically
(temp file + fsync + os.replace), so a crash never leaves vectors and ids out of step.

    store = VectorStore(path, model_id=embedder.model_id)
    store.load()                        # False (and empty) if absent or made by another model
    store.add(["a", "b"], matrix)       # upsert
    store.search(query_vec, k=10)       # [("b", 0.83), ("a", 0.41)]
    store.save()

100k x 384 float32 is ~154 MB in memory and on disk; a query over it takes a few ms.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

__all__ = ["VectorStore"]

FILE_NAME = "vectors.npz"
FORMAT_VERSION = 1


def _normalise(m: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    out: np.ndarray = m / np.maximum(norms, 1e-12)
    return out


class VectorStore:
    """Exact (brute-force) cosine search over vectors keyed by string ids. Thread-safe."""

    def __init__(self, dir: str | os.PathLike[str], *, model_id: str | None = None) -> None:
        self.dir = Path(dir)
        self.model_id = model_id
        self._lock = threading.RLock()
        self._buf = np.zeros((0, 0), dtype=np.float32)  # capacity >= len; rows [:n] live
        self._ids: list[str] = []
        self._pos: dict[str, int] = {}
        self._dirty = False

    # -- introspection ------------------------------------------------------------
    @property
    def path(self) -> Path:
        return self.dir / FILE_NAME

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, id: object) -> bool:
        return id in self._pos

    @property
    def ids(self) -> list[str]:
        return list(self._ids)

    @property
    def dim(self) -> int | None:
        return self._buf.shape[1] if self._buf.shape[1] else None

    @property
    def dirty(self) -> bool:
        """True when there are changes not yet saved."""
        return self._dirty

    @property
    def matrix(self) -> np.ndarray:
        """Read-only view of the live rows (len(self), dim)."""
        v = self._buf[: len(self._ids)]
        v = v.view()
        v.flags.writeable = False
        return v

    def get(self, id: str) -> np.ndarray | None:
        with self._lock:
            i = self._pos.get(id)
            return None if i is None else self._buf[i].copy()

    # -- mutation -----------------------------------------------------------------
    def add(self, ids: Sequence[str], matrix: np.ndarray) -> None:
        """Insert or replace vectors. ``matrix`` is (len(ids), dim); rows get L2-normalised."""
        ids = list(ids)
        m = np.asarray(matrix, dtype=np.float32)
        if m.ndim == 1 and len(ids) == 1:
            m = m[None, :]
        if m.ndim != 2 or m.shape[0] != len(ids):
            raise ValueError(f"matrix shape {m.shape} does not match {len(ids)} ids")
        if not ids:
            return
        if not all(isinstance(i, str) for i in ids):
            raise TypeError("ids must be str")
        m = _normalise(m).astype(np.float32, copy=False)
        with self._lock:
            if self.dim is None:
                self._buf = np.zeros((0, m.shape[1]), dtype=np.float32)
            elif m.shape[1] != self.dim:
                raise ValueError(f"dim {m.shape[1]} != store dim {self.dim}")
            # last occurrence wins for ids repeated within one call
            last = {id: r for r, id in enumerate(ids)}
            new = [id for id in last if id not in self._pos]
            for id, r in last.items():
                i = self._pos.get(id)
                if i is not None:
                    self._buf[i] = m[r]
            if new:
                n = len(self._ids)
                self._reserve(n + len(new))
                rows = [last[id] for id in new]
                self._buf[n : n + len(new)] = m[rows]
                for k, id in enumerate(new):
                    self._pos[id] = n + k
                self._ids.extend(new)
            self._dirty = True

    def _reserve(self, need: int) -> None:
        cap = self._buf.shape[0]
        if need <= cap:
            return
        new_cap = max(need, int(cap * 1.5) + 16)
        buf = np.zeros((new_cap, self._buf.shape[1]), dtype=np.float32)
        buf[: len(self._ids)] = self._buf[: len(self._ids)]
        self._buf = buf

    def remove(self, ids: Iterable[str]) -> int:
        """Delete vectors by id (unknown ids are ignored); returns how many were removed."""
        with self._lock:
            drop = {self._pos[i] for i in set(ids) if i in self._pos}
            if not drop:
                return 0
            n = len(self._ids)
            keep = np.ones(n, dtype=bool)
            keep[list(drop)] = False
            m = int(keep.sum())
            self._buf[:m] = self._buf[:n][keep]
            self._ids = [id for id, k in zip(self._ids, keep, strict=True) if k]
            self._pos = {id: i for i, id in enumerate(self._ids)}
            self._dirty = True
            return len(drop)

    def clear(self) -> None:
        with self._lock:
            self._buf = np.zeros((0, 0), dtype=np.float32)
            self._ids, self._pos = [], {}
            self._dirty = True

    # -- search -------------------------------------------------------------------
    def search(self, query_vec: np.ndarray, k: int = 10) -> list[tuple[str, float]]:
        """Top-k ids by cosine similarity, best first."""
        q = np.asarray(query_vec, dtype=np.float32).reshape(-1)
        with self._lock:
            n = len(self._ids)
            if n == 0 or k <= 0:
                return []
            if q.shape[0] != self.dim:
                raise ValueError(f"query dim {q.shape[0]} != store dim {self.dim}")
            qn = float(np.linalg.norm(q))
            if qn == 0.0:
                return []
            scores = self._buf[:n] @ (q / qn)
            k = min(k, n)
            top = np.argpartition(-scores, k - 1)[:k] if k < n else np.arange(n)
            top = top[np.argsort(-scores[top], kind="stable")]
            return [(self._ids[i], float(scores[i])) for i in top]

    # -- persistence --------------------------------------------------------------
    def save(self) -> Path:
        """Write the store atomically to ``<dir>/vectors.npz``; returns the path."""
        with self._lock:
            self.dir.mkdir(parents=True, exist_ok=True)
            n = len(self._ids)
            meta = {"format": FORMAT_VERSION, "model_id": self.model_id, "count": n}
            arrays = {
                "vectors": self._buf[:n] if self.dim else np.zeros((0, 0), np.float32),
                "ids": np.frombuffer(json.dumps(self._ids).encode("utf-8"), dtype=np.uint8),
                "meta": np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8),
            }
            fd, tmp = tempfile.mkstemp(prefix=".vectors-", suffix=".npz.tmp", dir=self.dir)
            try:
                with os.fdopen(fd, "wb") as f:
                    np.savez(f, **arrays)  # type: ignore[arg-type]  # numpy's stub types **kwds too narrowly
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
            self._dirty = False
            return self.path

    def load(self) -> bool:
        """Load from disk. Returns False, leaving the store empty, when there is no file or
        it was written for a different ``model_id`` (the caller should re-embed)."""
        with self._lock:
            self._buf = np.zeros((0, 0), dtype=np.float32)
            self._ids, self._pos = [], {}
            self._dirty = False
            if not self.path.is_file():
                return False
            with np.load(self.path, allow_pickle=False) as z:
                meta = json.loads(z["meta"].tobytes().decode("utf-8"))
                if meta.get("format") != FORMAT_VERSION:
                    return False
                if self.model_id is not None and meta.get("model_id") != self.model_id:
                    return False
                self.model_id = meta.get("model_id")
                ids = json.loads(z["ids"].tobytes().decode("utf-8"))
                vecs = np.ascontiguousarray(z["vectors"], dtype=np.float32)
            if len(ids) != vecs.shape[0]:
                raise ValueError(f"{self.path}: {len(ids)} ids for {vecs.shape[0]} vectors")
            if ids:
                self._buf = vecs
                self._ids = ids
                self._pos = {id: i for i, id in enumerate(ids)}
            return True
