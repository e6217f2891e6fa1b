"""On-disk layout of :class:`engine.vectors.VectorStore`: immutable segments and one catalog.

A store directory holds::

    vectors.json            the catalog: format, model_id, dim, live segments and their dead rows
    seg-<n>-<rand>.npy      float32 (rows, dim), L2-normalised; written once, never modified
    seg-<n>-<rand>.ids      JSON {"ids": [...], "offsets": [...]}: row → id, row → payload offset
    seg-<n>-<rand>.jsonl    one JSON payload per row (what the caller stored with the vector)

Writers add a segment per save (the rows added since the last one) and mark replaced or
deleted rows dead in the catalog; every file is written to a temp name, fsynced and renamed,
segments before the catalog that names them. A reader therefore sees either the old catalog
with its (still present) segments or the new one — never a torn file, never a catalog naming a
segment that is not complete. Compaction writes the live rows into a new segment and *retires*
the old ones: they are deleted by the next save, not this one, so a reader that read the old
catalog a moment ago still finds them (and a reader that misses one anyway re-reads the catalog).
Segments are memory-mapped by readers, so opening a store costs the catalog and the id lists,
not the vectors; several processes share one copy in the page cache.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

CATALOG = "vectors.json"
FORMAT_VERSION = 2


@dataclass
class Segment:
    """One immutable segment: its vectors (memory-mapped), ids, payload offsets and dead rows."""

    name: str
    ids: list[str]
    offsets: list[int]  # byte offset of each row's payload in <name>.jsonl
    vectors: np.ndarray  # (rows, dim) float32, read-only
    dead: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))

    def __post_init__(self) -> None:
        if len(self.dead) != len(self.ids):
            self.dead = np.zeros(len(self.ids), dtype=bool)

    @property
    def live(self) -> int:
        return len(self.ids) - int(self.dead.sum())


def _write_atomic(path: Path, write: Callable[[BinaryIO], object]) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def new_segment_name(counter: int) -> str:
    """Unique even across a catalog that was lost and restarted: readers cache segments by name."""
    return f"seg-{counter:06d}-{secrets.token_hex(4)}"


def write_segment(
    directory: Path, name: str, ids: Sequence[str], vectors: np.ndarray, payloads: Sequence[Any]
) -> Segment:
    """Write one segment's three files (fsynced); returns it memory-mapped."""
    lines = [json.dumps(p, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n" for p in payloads]
    offsets = np.cumsum([0, *map(len, lines)])[:-1].tolist() if lines else []
    _write_atomic(directory / f"{name}.jsonl", lambda f: f.writelines(lines))
    _write_atomic(directory / f"{name}.npy", lambda f: np.save(f, np.ascontiguousarray(vectors, dtype=np.float32)))
    _write_atomic(
        directory / f"{name}.ids",
        lambda f: f.write(json.dumps({"ids": list(ids), "offsets": offsets}).encode("utf-8")),
    )
    return read_segment(directory, name)


def read_segment(directory: Path, name: str) -> Segment:
    """Open a segment; raises FileNotFoundError if it was retired and deleted meanwhile."""
    meta = json.loads((directory / f"{name}.ids").read_bytes())
    vectors = np.load(directory / f"{name}.npy", mmap_mode="r", allow_pickle=False)
    if vectors.ndim != 2 or vectors.shape[0] != len(meta["ids"]):
        raise ValueError(f"{directory / name}: {len(meta['ids'])} ids for vectors of shape {vectors.shape}")
    return Segment(name, meta["ids"], meta["offsets"], vectors)


def read_payloads(directory: Path, segment: Segment, rows: Iterable[int]) -> dict[int, Any]:
    """Payloads of some rows of one segment, by seeking: a query reads only its top hits."""
    out: dict[int, Any] = {}
    with open(directory / f"{segment.name}.jsonl", "rb") as f:
        for row in sorted(set(rows)):
            f.seek(segment.offsets[row])
            out[row] = json.loads(f.readline())
    return out


def write_catalog(
    directory: Path,
    *,
    model_id: str | None,
    dim: int | None,
    counter: int,
    segments: Sequence[Segment],
    retired: Sequence[str],
) -> None:
    catalog = {
        "format": FORMAT_VERSION,
        "model_id": model_id,
        "dim": dim,
        "counter": counter,
        "count": sum(s.live for s in segments),
        "segments": [{"name": s.name, "rows": len(s.ids), "dead": np.flatnonzero(s.dead).tolist()} for s in segments],
        "retired": list(retired),
    }
    _write_atomic(directory / CATALOG, lambda f: f.write(json.dumps(catalog).encode("utf-8")))


def read_catalog(directory: Path) -> dict[str, Any] | None:
    try:
        raw = (directory / CATALOG).read_bytes()
    except FileNotFoundError:
        return None
    catalog: dict[str, Any] = json.loads(raw)
    return catalog


def delete_segments(directory: Path, names: Iterable[str]) -> None:
    for name in names:
        for ext in (".ids", ".npy", ".jsonl"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(directory / f"{name}{ext}")
