"""Per-index manifests: what each index holds (file key → content hash) and at which HEAD.

Each index keeps its own manifest so one can lag behind another (the semantic index is the
slow one) and the receipt can say so. Written atomically (temp file + ``os.replace``) after
every committed batch, which is what makes ``engine index`` safe to interrupt and resume.
Reads are cached per process by file mtime, so the hot path parses it once.

``generation`` names what the index holds, for the answer cache's key: the digest of its
indexer id, file hashes, HEADs and pending count (:meth:`Manifest.content_digest`), written by
the indexer when a run ends — so a run that changed nothing writes the same generation again —
and a fresh random token on each batch save in between (an interrupted run's state is new).
It is the file's first field, so the key reads it from the first bytes (:func:`read_generation`),
once per file version: nothing is hashed or parsed per request.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_CACHE: dict[Path, tuple[int, Manifest]] = {}
_GENERATIONS: dict[Path, tuple[tuple[int, int, int], str]] = {}
_GENERATION_HEAD = re.compile(rb'^\{"generation":"([0-9a-z-]{1,100})"')


@dataclass
class Manifest:
    path: Path
    indexer_id: str = ""
    files: dict[str, dict[str, Any]] = field(default_factory=dict)  # key → {sha256, size, mtime_ns}
    heads: dict[str, str | None] = field(default_factory=dict)  # project → HEAD at index time
    pending: int = 0  # files seen by the last run but not yet in this index
    updated_at: str = ""
    generation: str = ""  # what the index holds (module docstring); "" until first computed
    catchup: int = 0  # the catch-up request (CatchUp.generation) the last run started from

    @classmethod
    def load(cls, path: Path) -> Manifest:
        try:
            mtime = path.stat().st_mtime_ns
        except OSError:
            return cls(path)
        cached = _CACHE.get(path)
        if cached and cached[0] == mtime:
            return cached[1]
        try:
            raw = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError):
            return cls(path)  # unreadable: treated as empty, the next index run rebuilds it
        m = cls(
            path,
            raw.get("indexer_id", ""),
            raw.get("files", {}),
            raw.get("heads", {}),
            raw.get("pending", 0),
            raw.get("updated_at", ""),
            raw.get("generation", ""),
            raw.get("catchup", 0),
        )
        if not m.generation:  # written before generations existed: derived once per file version
            m.generation = m.content_digest()
        _CACHE[path] = (mtime, m)
        return m

    def content_digest(self) -> str:
        """sha256 over what decides this index's answers: indexer id, HEADs, pending, every file's hash."""
        h = hashlib.sha256(json.dumps([self.indexer_id, sorted(self.heads.items()), self.pending]).encode())
        for key in sorted(self.files):
            h.update(f"\n{key}\0{self.files[key].get('sha256', '')}".encode())
        return h.hexdigest()

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "generation": self.generation or self.content_digest(),  # first: read_generation reads only the head
            "indexer_id": self.indexer_id,
            "files": self.files,
            "heads": self.heads,
            "pending": self.pending,
            "updated_at": self.updated_at,
            "catchup": self.catchup,
        }
        _write_json(self.path, data)


def read_generation(path: Path) -> str:
    """The manifest's ``generation`` from the file's first bytes (the answer cache's key reads it per
    request: a stat, and a 128-byte read once per file version); "" when there is no manifest."""
    try:
        st = path.stat()
    except OSError:
        return ""
    version = (st.st_ino, st.st_mtime_ns, st.st_size)  # every save is a new file (os.replace)
    cached = _GENERATIONS.get(path)
    if cached is not None and cached[0] == version:
        return cached[1]
    try:
        with open(path, "rb") as fh:
            m = _GENERATION_HEAD.match(fh.read(128))
    except OSError:
        return ""
    generation = m.group(1).decode() if m else Manifest.load(path).generation  # older layout: parse it all
    _GENERATIONS[path] = (version, generation)
    return generation


@dataclass
class CatchUp:
    """A request to bring a slow index up to date, written by ``engine index`` when it hands the
    work to a background process (``<index dir>/catchup.json``). Until a run that started from
    this ``generation`` (or a later one) saves the manifest (its ``catchup``), the index counts as
    partial with ``files_pending`` files to go, even before the background process has started."""

    path: Path
    generation: int = 0
    files_pending: int = 0
    requested_at: str = ""

    @classmethod
    def load(cls, path: Path) -> CatchUp:
        try:
            mtime = path.stat().st_mtime_ns
        except OSError:
            return cls(path)
        cached = _REQUESTS.get(path)
        if cached and cached[0] == mtime:
            return cached[1]
        try:
            raw = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError):
            return cls(path)
        req = cls(path, int(raw.get("generation", 0)), int(raw.get("files_pending", 0)), raw.get("requested_at", ""))
        _REQUESTS[path] = (mtime, req)
        return req

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {"generation": self.generation, "files_pending": self.files_pending, "requested_at": self.requested_at}
        _write_json(self.path, data)


_REQUESTS: dict[Path, tuple[int, CatchUp]] = {}


def _write_json(path: Path, data: dict[str, Any]) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(data, fh, separators=(",", ":"))
    os.replace(tmp, path)
