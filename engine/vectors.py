"""A small persisted exact vector store: brute-force cosine over float32 rows, checkpointed.

Rows are L2-normalised on ``add`` so a dot product is the cosine. Each ``save`` appends the
rows added since the last one as an immutable segment and atomically replaces a small catalog
(:mod:`engine.vector_segments`): a checkpoint costs the new rows, not the whole store, and a
reader in another process — the query path while ``engine index`` embeds — always sees a
complete, consistent set of segments. Each vector may carry a JSON payload, read back only for
the hits a query returns.

    store = VectorStore(path, model_id=embedder.model_id)
    store.load()                        # False (and empty) if absent or made by another model
    store.add(["a", "b"], matrix, payloads=[{...}, {...}])   # upsert
    store.search(query_vec, k=10)       # [("b", 0.83), ("a", 0.41)]
    store.payloads(["b"])               # {"b": {...}}
    store.save()                        # checkpoint
    store.refresh()                     # reader: reload if a writer saved since

100k x 384 float32 is ~154 MB on disk, memory-mapped by readers; a query over it takes a few ms.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .vector_segments import (
    CATALOG,
    FORMAT_VERSION,
    Segment,
    delete_segments,
    new_segment_name,
    read_catalog,
    read_payloads,
    read_segment,
    write_catalog,
    write_segment,
)

__all__ = ["VectorStore"]

MAX_SEGMENTS = 24  # past this many, a save merges them (a query pays one matmul per segment)
MAX_DEAD_FRACTION = 0.25  # past this share of replaced/deleted rows, a save rewrites the live ones
LEGACY_FILE = "vectors.npz"  # format 1: one file rewritten on every save


def _normalise(m: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    out: np.ndarray = m / np.maximum(norms, 1e-12)
    return out


def _top(scores: np.ndarray, k: int) -> np.ndarray:
    k = min(k, len(scores))
    top = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
    return top[np.argsort(-scores[top], kind="stable")]


class VectorStore:
    """Exact (brute-force) cosine search over vectors keyed by string ids. Thread-safe."""

    def __init__(self, dir: str | os.PathLike[str], *, model_id: str | None = None) -> None:
        self.dir = Path(dir)
        self.model_id = model_id
        self._lock = threading.RLock()
        self._dim: int | None = None
        self._segments: list[Segment] = []
        self._home: dict[str, tuple[Segment, int]] = {}  # saved id → (segment, row)
        # rows added since the last save (the "tail"): capacity >= len; rows [:n] live
        self._buf = np.zeros((0, 0), dtype=np.float32)
        self._tail: list[str] = []
        self._tail_pos: dict[str, int] = {}
        self._tail_payload: dict[str, Any] = {}
        self._counter = 0
        self._retire: list[str] = []  # dropped since the last save: listed as retired by the next
        self._retired_on_disk: list[str] = []  # listed as retired by the catalog: deleted by the next save
        self._stamp: tuple[int, int, int] | None = None
        self._dirty = False

    # -- introspection ------------------------------------------------------------
    @property
    def path(self) -> Path:
        """The catalog file; its replacement is the commit point of a save."""
        return self.dir / CATALOG

    def __len__(self) -> int:
        return len(self._home) + len(self._tail)

    def __contains__(self, id: object) -> bool:
        return id in self._home or id in self._tail_pos

    @property
    def ids(self) -> list[str]:
        """Live ids: saved ones in segment order, then the ones added since."""
        with self._lock:
            out = [i for s in self._segments for i, d in zip(s.ids, s.dead, strict=True) if not d]
            return out + list(self._tail)

    @property
    def dim(self) -> int | None:
        return self._dim

    @property
    def dirty(self) -> bool:
        """True when there are changes not yet saved."""
        return self._dirty

    @property
    def segment_files(self) -> list[Path]:
        """The vector files of the live segments (for size reports)."""
        return [self.dir / f"{s.name}.npy" for s in self._segments]

    @property
    def matrix(self) -> np.ndarray:
        """Read-only copy of the live rows (len(self), dim), in ``ids`` order."""
        with self._lock:
            parts = [np.asarray(s.vectors)[~s.dead] for s in self._segments]
            parts.append(self._buf[: len(self._tail)])
            m = np.concatenate(parts) if self._dim else np.zeros((0, 0), np.float32)
            m.flags.writeable = False
            return m

    def get(self, id: str) -> np.ndarray | None:
        with self._lock:
            vec: np.ndarray | None = None
            if id in self._tail_pos:
                vec = self._buf[self._tail_pos[id]].copy()
            elif id in self._home:
                seg, row = self._home[id]
                vec = np.array(seg.vectors[row])
            return vec

    # -- mutation -----------------------------------------------------------------
    def add(self, ids: Sequence[str], matrix: np.ndarray, payloads: Sequence[Any] | None = None) -> None:
        """Insert or replace vectors (and their JSON payloads). ``matrix`` is (len(ids), dim)."""
        ids = list(ids)
        m = np.asarray(matrix, dtype=np.float32)
        if m.ndim == 1 and len(ids) == 1:
            m = m[None, :]
        if m.ndim != 2 or m.shape[0] != len(ids):
            raise ValueError(f"matrix shape {m.shape} does not match {len(ids)} ids")
        if payloads is not None and len(payloads) != len(ids):
            raise ValueError(f"{len(payloads)} payloads for {len(ids)} ids")
        if not ids:
            return
        if not all(isinstance(i, str) for i in ids):
            raise TypeError("ids must be str")
        m = _normalise(m).astype(np.float32, copy=False)
        with self._lock:
            if self._dim is None:
                self._dim = m.shape[1]
                self._buf = np.zeros((0, self._dim), dtype=np.float32)
            elif m.shape[1] != self._dim:
                raise ValueError(f"dim {m.shape[1]} != store dim {self._dim}")
            last = {id: r for r, id in enumerate(ids)}  # last occurrence wins within one call
            self._kill_saved(last)
            new = [id for id in last if id not in self._tail_pos]
            for id, r in last.items():
                if id in self._tail_pos:
                    self._buf[self._tail_pos[id]] = m[r]
            if new:
                n = len(self._tail)
                self._reserve(n + len(new))
                self._buf[n : n + len(new)] = m[[last[id] for id in new]]
                for k, id in enumerate(new):
                    self._tail_pos[id] = n + k
                self._tail.extend(new)
            if payloads is not None:
                for id, r in last.items():
                    self._tail_payload[id] = payloads[r]
            self._dirty = True

    def _kill_saved(self, ids: Iterable[str]) -> int:
        n = 0
        for id in ids:
            home = self._home.pop(id, None)
            if home is not None:
                home[0].dead[home[1]] = True
                n += 1
        return n

    def _reserve(self, need: int) -> None:
        cap = self._buf.shape[0]
        if need <= cap:
            return
        buf = np.zeros((max(need, int(cap * 1.5) + 16), self._buf.shape[1]), dtype=np.float32)
        buf[: len(self._tail)] = self._buf[: len(self._tail)]
        self._buf = buf

    def remove(self, ids: Iterable[str]) -> int:
        """Delete vectors by id (unknown ids are ignored); returns how many were removed."""
        with self._lock:
            wanted = set(ids)
            removed = self._kill_saved(wanted)
            drop = {self._tail_pos[i] for i in wanted if i in self._tail_pos}
            if drop:
                n = len(self._tail)
                keep = np.ones(n, dtype=bool)
                keep[list(drop)] = False
                self._buf[: int(keep.sum())] = self._buf[:n][keep]
                self._tail = [id for id, k in zip(self._tail, keep, strict=True) if k]
                self._tail_pos = {id: i for i, id in enumerate(self._tail)}
                for i in wanted:
                    self._tail_payload.pop(i, None)
            if removed or drop:
                self._dirty = True
            return removed + len(drop)

    def clear(self) -> None:
        with self._lock:
            self._retire += [s.name for s in self._segments]
            self._segments, self._home = [], {}
            self._dim = None
            self._buf = np.zeros((0, 0), dtype=np.float32)
            self._tail, self._tail_pos, self._tail_payload = [], {}, {}
            self._dirty = True

    # -- search -------------------------------------------------------------------
    def search(self, query_vec: np.ndarray, k: int = 10) -> list[tuple[str, float]]:
        """Top-k ids by cosine similarity, best first."""
        q = np.asarray(query_vec, dtype=np.float32).reshape(-1)
        with self._lock:
            if len(self) == 0 or k <= 0:
                return []
            if q.shape[0] != self._dim:
                raise ValueError(f"query dim {q.shape[0]} != store dim {self._dim}")
            qn = float(np.linalg.norm(q))
            if qn == 0.0:
                return []
            q = q / qn
            scores: list[np.ndarray] = []
            names: list[str] = []
            for seg in self._segments:
                if seg.live == 0:
                    continue
                s = np.asarray(seg.vectors) @ q
                s[seg.dead] = -np.inf
                top = _top(s, min(k, seg.live))
                scores.append(s[top])
                names += [seg.ids[i] for i in top]
            if self._tail:
                s = self._buf[: len(self._tail)] @ q
                top = _top(s, k)
                scores.append(s[top])
                names += [self._tail[i] for i in top]
            merged = np.concatenate(scores)
            return [(names[i], float(merged[i])) for i in _top(merged, k)]

    def payloads(self, ids: Iterable[str]) -> dict[str, Any]:
        """The payloads stored with these ids (ids without one, or unknown, are left out)."""
        with self._lock:
            out: dict[str, Any] = {}
            per_segment: dict[str, tuple[Segment, dict[int, str]]] = {}
            for id in ids:
                if id in self._tail_payload:
                    out[id] = self._tail_payload[id]
                elif id in self._home:
                    seg, row = self._home[id]
                    per_segment.setdefault(seg.name, (seg, {}))[1][row] = id
            for seg, rows in per_segment.values():
                try:
                    got = read_payloads(self.dir, seg, rows)
                except FileNotFoundError:  # retired and deleted since we loaded: the caller refreshes
                    continue
                out.update({rows[r]: p for r, p in got.items() if p is not None})
            return out

    # -- persistence --------------------------------------------------------------
    def save(self) -> Path:
        """Checkpoint: write the rows added since the last save as a segment, then the catalog."""
        with self._lock:
            self.dir.mkdir(parents=True, exist_ok=True)
            if self._tail:
                n = len(self._tail)
                payloads = [self._tail_payload.get(i) for i in self._tail]
                self._append_segment(self._tail, self._buf[:n], payloads)
                self._buf = np.zeros((0, self._dim or 0), dtype=np.float32)
                self._tail, self._tail_pos, self._tail_payload = [], {}, {}
            empty = [s for s in self._segments if s.live == 0]
            if empty:
                self._retire += [s.name for s in empty]
                self._segments = [s for s in self._segments if s.live]
            rows = sum(len(s.ids) for s in self._segments)
            dead = rows - len(self._home)
            if len(self._segments) > MAX_SEGMENTS or (dead and dead > MAX_DEAD_FRACTION * rows):
                self._compact()
            delete_segments(self.dir, self._retired_on_disk)  # listed as retired by the catalog we replace
            write_catalog(
                self.dir,
                model_id=self.model_id,
                dim=self._dim,
                counter=self._counter,
                segments=self._segments,
                retired=self._retire,
            )
            self._retired_on_disk, self._retire = self._retire, []
            self._sweep()
            self._stamp = self._stat()
            self._dirty = False
            return self.path

    def _append_segment(self, ids: Sequence[str], vectors: np.ndarray, payloads: Sequence[Any]) -> None:
        self._counter += 1
        seg = write_segment(self.dir, new_segment_name(self._counter), ids, vectors, payloads)
        self._segments.append(seg)
        for row, id in enumerate(seg.ids):
            self._home[id] = (seg, row)

    def _compact(self) -> None:
        """Merge the live rows of every segment into one; the old ones are retired."""
        old = self._segments
        ids = [i for s in old for i, d in zip(s.ids, s.dead, strict=True) if not d]
        vectors = np.concatenate([np.asarray(s.vectors)[~s.dead] for s in old])
        payloads: list[Any] = []
        for s in old:
            got = read_payloads(self.dir, s, np.flatnonzero(~s.dead).tolist())
            payloads += [got[r] for r in sorted(got)]
        self._segments, self._home = [], {}
        self._append_segment(ids, vectors, payloads)
        self._retire += [s.name for s in old]

    def _sweep(self) -> None:
        """Delete files no catalog ever named: leftovers of a writer killed mid-save."""
        keep = {s.name for s in self._segments} | set(self._retired_on_disk)
        for p in self.dir.iterdir():
            stem = p.name.split(".", 1)[0]
            if (
                (p.name.startswith("seg-") and stem not in keep)
                or p.name.startswith((".seg-", f".{CATALOG}-"))
                or p.name == LEGACY_FILE
            ):
                p.unlink(missing_ok=True)

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return (st.st_mtime_ns, st.st_ino, st.st_size)

    def refresh(self) -> bool:
        """Reload if the catalog changed on disk since this store last read or wrote it (one stat
        when nothing changed). Returns whether the store holds a loaded index."""
        with self._lock:
            stamp = self._stat()
            if stamp is not None and stamp == self._stamp:
                return True
            return self.load()

    def load(self) -> bool:
        """Load from disk. Returns False, leaving the store empty, when there is no catalog or it
        was written for a different ``model_id`` or format (the caller should re-embed)."""
        with self._lock:
            cache = {s.name: s for s in self._segments}
            for _attempt in range(5):  # a segment can vanish between catalog read and open: re-read
                stamp = self._stat()
                self._reset()
                try:
                    catalog = read_catalog(self.dir)
                except ValueError:  # not JSON: never a torn write (atomic rename), so a foreign file
                    return False
                if catalog is None or catalog.get("format") != FORMAT_VERSION:
                    return False
                if self.model_id is not None and catalog.get("model_id") != self.model_id:
                    return False
                try:
                    segments = [self._open(s, cache) for s in catalog["segments"]]
                except FileNotFoundError:
                    continue
                self.model_id = catalog.get("model_id")
                self._dim = catalog.get("dim")
                self._buf = np.zeros((0, self._dim or 0), dtype=np.float32)
                self._counter = int(catalog.get("counter", 0))
                self._retired_on_disk = list(catalog.get("retired", []))
                self._segments = segments
                self._home = {id: (s, r) for s in segments for r, id in enumerate(s.ids) if not s.dead[r]}
                self._stamp = stamp
                return True
            return False

    def _open(self, entry: dict[str, Any], cache: dict[str, Segment]) -> Segment:
        name = entry["name"]
        seg = cache.get(name) or read_segment(self.dir, name)  # immutable: safe to reuse by name
        dead = np.zeros(len(seg.ids), dtype=bool)
        dead[entry.get("dead", [])] = True
        return Segment(seg.name, seg.ids, seg.offsets, seg.vectors, dead)

    def _reset(self) -> None:
        self._dim = None
        self._segments, self._home = [], {}
        self._buf = np.zeros((0, 0), dtype=np.float32)
        self._tail, self._tail_pos, self._tail_payload = [], {}, {}
        self._retire, self._retired_on_disk = [], []
        self._dirty = False
