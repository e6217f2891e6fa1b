"""``engine index``: bring every index-backed expert up to date, incrementally.

An index-backed expert returns an :class:`Indexer` from ``indexer()``::

    class Indexer(Protocol):
        indexer_id: str                 # changes when the index format/model changes → full rebuild
        manifest_path: Path
        def open(self) -> None          # heavy set-up (model load, index open)
        def add(self, files: list[tuple[SourceFile, bytes]]) -> int   # idempotent per file key; returns units added
        def remove(self, keys: list[str]) -> None
        def commit(self) -> None        # durable after this returns
        def close(self) -> None

One scan of the workspace (hashes reused when size+mtime are unchanged) is diffed against each
index's own manifest: only added or changed files are processed, deleted ones dropped. Work
goes in batches; after each batch the index commits and then its manifest is saved, so an
interrupted run loses at most one batch and the next run resumes from there (``add`` is
idempotent per file key, so a batch committed but not yet in the manifest is simply redone).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from ..datadir import ensure_data_dir
from ..secrets import SecretsPolicy
from ..types import Project
from ..workspace import Workspace
from .files import SourceFile, read_indexable, scan
from .manifest import Manifest


class Indexer(Protocol):
    indexer_id: str
    manifest_path: Path

    def open(self) -> None: ...
    def add(self, files: list[tuple[SourceFile, bytes]]) -> int: ...
    def remove(self, keys: list[str]) -> None: ...
    def commit(self) -> None: ...
    def close(self) -> None: ...


#: progress(indexer_name, done_files, total_files, units_done)
Progress = Callable[[str, int, int, int], None]


@dataclass
class IndexReport:
    name: str
    added: int = 0
    removed: int = 0
    unchanged: int = 0
    units: int = 0
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.name,
            "added_or_changed": self.added,
            "removed": self.removed,
            "unchanged": self.unchanged,
            "units": self.units,
            "seconds": round(self.seconds, 2),
            "files_per_s": round(self.added / self.seconds, 1) if self.seconds and self.added else None,
            **self.extra,
        }


@contextlib.contextmanager
def index_lock(data_dir: Path) -> Iterator[None]:
    """One indexing run per data dir at a time (readers never take this lock)."""
    ensure_data_dir(data_dir)  # 0700 with a .gitignore of `*`, whoever creates it first
    with open(data_dir / "index.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def read_head(root: Path) -> str | None:
    """HEAD's sha read from the .git files directly (no subprocess: it runs on the query path)."""
    git = root / ".git"
    try:
        if git.is_file():  # worktree / submodule: "gitdir: <path>"
            git = (root / git.read_text().split(":", 1)[1].strip()).resolve()
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref:"):
            return head or None
        ref = head[4:].strip()
        ref_file = git / ref
        if ref_file.is_file():
            return ref_file.read_text().strip() or None
        common = git
        if (git / "commondir").is_file():
            common = (git / (git / "commondir").read_text().strip()).resolve()
            if (common / ref).is_file():
                return (common / ref).read_text().strip() or None
        packed = common / "packed-refs"
        if packed.is_file():
            for line in packed.read_text().splitlines():
                if line.endswith(" " + ref):
                    return line.split(" ", 1)[0]
    except OSError:
        return None
    return None


def _scan_cache_path(data_dir: Path) -> Path:
    return data_dir / "index" / "scan.json"


def scan_workspace(workspace: Workspace, policy: SecretsPolicy | None = None) -> dict[str, SourceFile]:
    cache_path = _scan_cache_path(workspace.data_dir)
    previous: dict[str, SourceFile] = {}
    with contextlib.suppress(OSError, ValueError, TypeError):
        previous = {k: SourceFile(**v) for k, v in json.loads(cache_path.read_text()).items()}
    current = scan(workspace.projects, previous, policy)
    if policy is not None:
        policy.save()  # the verdicts of the whole walk: live experts find them cached
    cache_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache_path.with_suffix(".tmp")
    tmp.write_text(json.dumps({k: vars_of(v) for k, v in current.items()}))
    tmp.replace(cache_path)
    return current


def vars_of(f: SourceFile) -> dict[str, Any]:
    return {"project": f.project, "path": f.path, "size": f.size, "mtime_ns": f.mtime_ns, "sha256": f.sha256}


def update_index(
    name: str,
    indexer: Indexer,
    workspace: Workspace,
    current: dict[str, SourceFile],
    *,
    batch_files: int = 200,
    progress: Progress | None = None,
    accept: Callable[[SourceFile], bool] | None = None,
    policy: SecretsPolicy | None = None,
) -> IndexReport:
    """Bring one index up to date with ``current``; commits and saves its manifest per batch."""
    started = time.perf_counter()
    manifest = Manifest.load(indexer.manifest_path)
    if manifest.indexer_id != indexer.indexer_id:  # new model / format: everything is redone
        manifest = Manifest(indexer.manifest_path, indexer.indexer_id)
    wanted = {k: f for k, f in current.items() if accept is None or accept(f)}
    todo = [f for k, f in sorted(wanted.items()) if manifest.files.get(k, {}).get("sha256") != f.sha256]
    gone = sorted(k for k in manifest.files if k not in wanted)
    report = IndexReport(name, unchanged=len(wanted) - len(todo))
    roots: dict[str, Project] = {p.name: p for p in workspace.projects}
    indexer.open()
    try:
        manifest.pending = len(todo)
        if gone:
            indexer.remove(gone)
            indexer.commit()
            for k in gone:
                manifest.files.pop(k, None)
            report.removed = len(gone)
            _save(manifest, workspace)
        for start in range(0, len(todo), batch_files):
            batch = todo[start : start + batch_files]
            payload: list[tuple[SourceFile, bytes]] = []
            unreadable: list[str] = []
            for f in batch:
                data = read_indexable(roots[f.project].root, f.path, policy)
                if data is None:
                    unreadable.append(f.key)
                else:
                    payload.append((f, data))
            if unreadable:
                indexer.remove(unreadable)
            report.units += indexer.add(payload) if payload else 0
            indexer.commit()
            for f, _ in payload:
                manifest.files[f.key] = {"sha256": f.sha256, "size": f.size, "mtime_ns": f.mtime_ns}
            for k in unreadable:
                manifest.files.pop(k, None)
            report.added += len(payload)
            manifest.pending = len(todo) - start - len(batch)
            _save(manifest, workspace)
            if progress:
                progress(name, start + len(batch), len(todo), report.units)
        manifest.pending = 0
        _save(manifest, workspace, final=True)
    finally:
        indexer.close()
    report.seconds = time.perf_counter() - started
    return report


def _save(manifest: Manifest, workspace: Workspace, *, final: bool = False) -> None:
    """Save after a batch (a new random generation: the index changed) or at the end of a run (the
    content digest: a run that changed nothing leaves the generation, and so the answer cache, as it was)."""
    manifest.heads = {p.name: read_head(p.root) for p in workspace.projects if p.is_git}
    manifest.updated_at = datetime.now(UTC).isoformat(timespec="seconds")
    manifest.generation = manifest.content_digest() if final else f"partial-{uuid.uuid4().hex}"
    manifest.save()


def current_heads(projects: Iterable[Project]) -> dict[str, str | None]:
    """HEAD's sha of every git project."""
    return {p.name: read_head(p.root) for p in projects if p.is_git}


class Heads(Mapping[str, str | None]):
    """The git projects' HEADs for one request, read on first use (by the first index-backed
    expert's freshness, in its worker thread: ~30 µs a project, off the router's own path), then
    shared by every expert and stated once in the receipt."""

    def __init__(self, projects: Iterable[Project]) -> None:
        self._projects = tuple(projects)
        self._map: dict[str, str | None] | None = None
        self._lock = threading.Lock()

    def _read(self) -> dict[str, str | None]:
        with self._lock:
            if self._map is None:
                self._map = current_heads(self._projects)
            return self._map

    def read(self) -> dict[str, str | None] | None:
        """The HEADs if something asked for them, else None (nothing is read here)."""
        return self._map

    def __getitem__(self, key: str) -> str | None:
        return self._read()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._read())

    def __len__(self) -> int:
        return len(self._read())


def freshness(
    manifest_path: Path,
    projects: tuple[Project, ...] | list[Project],
    heads: Mapping[str, str | None] | None = None,
) -> dict[str, Any]:
    """The receipt's view of one index: when it was built, files pending, and the projects whose
    indexed sha is not their HEAD (``stale``: project → indexed sha; empty when all are current).

    ``heads`` are the projects' current HEADs as the request read them once
    (:func:`current_heads`, stated once in the receipt); read here when not given. The receipt
    stays bounded: nothing is repeated per expert and project unless it is stale."""
    m = Manifest.load(manifest_path)
    if heads is None:
        heads = current_heads(projects)
    stale = {
        p.name: m.heads.get(p.name)
        for p in projects
        if p.is_git and p.name in heads and m.heads.get(p.name) != heads[p.name]
    }
    return {
        "indexed_at": m.updated_at or None,
        "files_indexed": len(m.files),
        "files_pending": m.pending,
        "partial": m.pending > 0,
        "stale": stale,
    }


def changed_since_indexed(manifest_path: Path, project: Project, path: str) -> bool | None:
    """Has this file changed since it was indexed? None when the index does not know the file."""
    m = Manifest.load(manifest_path)
    rec = m.files.get(f"{project.name}:{path}")
    if rec is None:
        return None
    try:
        st = (project.root / path).stat()
    except OSError:
        return True  # deleted since
    if st.st_size == rec.get("size") and st.st_mtime_ns == rec.get("mtime_ns"):
        return False
    data = read_indexable(project.root, path)
    return data is None or hashlib.sha256(data).hexdigest() != rec.get("sha256")
