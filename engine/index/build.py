"""``engine index``: bring every index-backed expert up to date, incrementally.

An index-backed expert returns an :class:`Indexer` from ``indexer()``::

    class Indexer(Protocol):
        indexer_id: str                 # changes when the index format/model changes → full rebuild
        manifest_path: Path
        def open(self) -> None          # heavy set-up (model load, index open)
        def add(self, files: list[tuple[SourceFile, bytes]], progress: UnitProgress | None = None) -> int
                                        # idempotent per file key; returns units added; may call
                                        # progress(units_just_done) while it works (slow indexes do)
        def remove(self, keys: list[str]) -> None
        def commit(self) -> None        # durable after this returns
        def close(self) -> None

One scan of the workspace (hashes reused when size+mtime are unchanged) is diffed against each
index's own manifest: only added or changed files are processed, deleted ones dropped. Files go
to ``add`` in small groups (so progress moves), and the index commits every ``batch_files`` files
or ``commit_s`` seconds, whichever comes first, then its manifest is saved: an interrupted run
loses at most one commit's worth and the next run resumes from there (``add`` is idempotent per
file key, so files committed but not yet in the manifest are simply redone).

Locks: one indexing run per data dir holds ``index.lock`` for the scan and the fast indexes; a
slow index (embeddings) has its own lock, ``index.<name>.lock``, held by whoever writes it (a
foreground run or the background catch-up, :mod:`engine.index.background`). Readers take none.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from ..types import Project
from ..workspace import Workspace
from .files import SourceFile, read_indexable, scan
from .manifest import CatchUp, Manifest

CATCHUP_FILE = "catchup.json"  # <index dir>/catchup.json: the pending background request


class Indexer(Protocol):
    indexer_id: str
    manifest_path: Path

    def open(self) -> None: ...
    def add(self, files: list[tuple[SourceFile, bytes]], progress: UnitProgress | None = None) -> int: ...
    def remove(self, keys: list[str]) -> None: ...
    def commit(self) -> None: ...
    def close(self) -> None: ...


#: progress(indexer_name, done_files, total_files, units_done)
Progress = Callable[[str, int, int, int], None]
#: progress(units_just_done), called by an indexer inside ``add``
UnitProgress = Callable[[int], None]
ADD_FILES = 16  # files per ``add`` call: small enough that progress moves, big enough to batch embeddings
COMMIT_S = 10.0  # a slow index commits at least this often, so readers see it grow


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
def index_lock(data_dir: Path, name: str | None = None, *, blocking: bool = True) -> Iterator[bool]:
    """Hold ``index.lock`` (scan + fast indexes) or, with ``name``, ``index.<name>.lock`` (one slow
    index). Yields False without waiting when ``blocking`` is off and another process holds it.
    The holder's pid is written into the file (``lock_holder`` reads it). Readers never lock."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / (f"index.{name}.lock" if name else "index.lock")
    with open(path, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            fh.seek(0)
            fh.truncate()
            fh.write(f"{os.getpid()}\n")
            fh.flush()
            yield True
        finally:
            fh.seek(0)
            fh.truncate()
            fcntl.flock(fh, fcntl.LOCK_UN)


def lock_holder(data_dir: Path, name: str | None = None) -> int | None:
    """Pid of the live process holding that index lock, or None. Reads the pid the holder wrote
    (never probes with flock: a probe could make a real writer's non-blocking attempt fail)."""
    path = data_dir / (f"index.{name}.lock" if name else "index.lock")
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if not text.isdigit():
        return None
    pid = int(text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None  # killed while holding it: the kernel released the lock, the pid stayed
    except PermissionError:
        pass  # alive, another user's
    return pid


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


def scan_workspace(workspace: Workspace) -> dict[str, SourceFile]:
    cache_path = _scan_cache_path(workspace.data_dir)
    previous: dict[str, SourceFile] = {}
    with contextlib.suppress(OSError, ValueError, TypeError):
        previous = {k: SourceFile(**v) for k, v in json.loads(cache_path.read_text()).items()}
    current = scan(workspace.projects, previous)
    cache_path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=cache_path.parent, prefix=".scan-")  # unique: a background run scans too
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump({k: vars_of(v) for k, v in current.items()}, fh)
    os.replace(tmp, cache_path)
    return current


def vars_of(f: SourceFile) -> dict[str, Any]:
    return {"project": f.project, "path": f.path, "size": f.size, "mtime_ns": f.mtime_ns, "sha256": f.sha256}


def plan_update(
    indexer_id: str, manifest: Manifest, current: dict[str, SourceFile], accept: Callable[[SourceFile], bool] | None
) -> tuple[list[SourceFile], list[str], int]:
    """(files to (re)index, keys to drop, files unchanged) for one index."""
    if manifest.indexer_id != indexer_id:  # new model / format: everything is redone
        manifest = Manifest(manifest.path, indexer_id)
    wanted = {k: f for k, f in current.items() if accept is None or accept(f)}
    todo = [f for k, f in sorted(wanted.items()) if manifest.files.get(k, {}).get("sha256") != f.sha256]
    gone = sorted(k for k in manifest.files if k not in wanted)
    return todo, gone, len(wanted) - len(todo)


def update_index(
    name: str,
    indexer: Indexer,
    workspace: Workspace,
    current: dict[str, SourceFile],
    *,
    batch_files: int = 200,
    commit_s: float = COMMIT_S,
    progress: Progress | None = None,
    live: Progress | None = None,
    accept: Callable[[SourceFile], bool] | None = None,
    generation: int | None = None,
) -> IndexReport:
    """Bring one index up to date with ``current``; commits and saves its manifest as it goes.

    ``progress`` is called after each commit (the index is durable up to ``done`` files), ``live``
    whenever there is news (also from inside ``add``); ``generation`` is the catch-up request this
    run serves (recorded in the manifest, see :class:`~engine.index.manifest.CatchUp`).
    """
    started = time.perf_counter()
    manifest = Manifest.load(indexer.manifest_path)
    if manifest.indexer_id != indexer.indexer_id:
        manifest = Manifest(indexer.manifest_path, indexer.indexer_id)
    todo, gone, unchanged = plan_update(indexer.indexer_id, manifest, current, accept)
    report = IndexReport(name, unchanged=unchanged)
    roots: dict[str, Project] = {p.name: p for p in workspace.projects}
    # the catch-up request this run serves; callers that scanned earlier pass the one read before
    manifest.generation = (
        CatchUp.load(indexer.manifest_path.parent / CATCHUP_FILE).generation if generation is None else generation
    )
    manifest.pending = len(todo)
    if todo:
        _save(manifest, workspace)  # readers see "partial" from now on, not after the first commit
    done = 0

    def tick(units: int) -> None:
        report.units += units
        if live:
            live(name, done, len(todo), report.units)

    indexer.open()
    try:
        if gone:
            indexer.remove(gone)
            indexer.commit()
            for k in gone:
                manifest.files.pop(k, None)
            report.removed = len(gone)
            _save(manifest, workspace)
        staged: list[SourceFile] = []
        dropped: list[str] = []
        last_commit = time.monotonic()
        step = max(1, min(ADD_FILES, batch_files))
        for start in range(0, len(todo), step):
            payload: list[tuple[SourceFile, bytes]] = []
            for f in todo[start : start + step]:
                data = read_indexable(roots[f.project].root, f.path)
                if data is None:
                    dropped.append(f.key)
                else:
                    payload.append((f, data))
            if dropped:
                indexer.remove(dropped)
            if payload:
                units_before = report.units
                added = indexer.add(payload, progress=tick)
                report.units = units_before + added  # what add() says it added is the truth
            staged += [f for f, _ in payload]
            done = start + step if start + step < len(todo) else len(todo)
            if live:
                live(name, done, len(todo), report.units)
            if (
                len(staged) + len(dropped) >= batch_files
                or time.monotonic() - last_commit >= commit_s
                or done == len(todo)
            ):
                indexer.commit()
                for f in staged:
                    manifest.files[f.key] = {"sha256": f.sha256, "size": f.size, "mtime_ns": f.mtime_ns}
                for k in dropped:
                    manifest.files.pop(k, None)
                report.added += len(staged)
                manifest.pending = len(todo) - done
                _save(manifest, workspace)
                staged, dropped, last_commit = [], [], time.monotonic()
                if progress:
                    progress(name, done, len(todo), report.units)
        manifest.pending = 0
        _save(manifest, workspace)
    finally:
        indexer.close()
    report.seconds = time.perf_counter() - started
    return report


def _save(manifest: Manifest, workspace: Workspace) -> None:
    manifest.heads = {p.name: read_head(p.root) for p in workspace.projects if p.is_git}
    manifest.updated_at = datetime.now(UTC).isoformat(timespec="seconds")
    manifest.save()


def _pending(manifest_path: Path) -> tuple[Manifest, int]:
    """The manifest and how many files it still lacks, counting a catch-up request it has not
    started on yet (``engine index`` handed the work to a background process a moment ago)."""
    m = Manifest.load(manifest_path)
    req = CatchUp.load(manifest_path.parent / CATCHUP_FILE)
    if req.generation > m.generation:
        return m, max(m.pending, req.files_pending)
    return m, m.pending


def catching_up(manifest_path: Path) -> bool:
    """Is this index partial (files seen by ``engine index`` but not in it yet)? Two cached stats."""
    return _pending(manifest_path)[1] > 0


def freshness(manifest_path: Path, projects: tuple[Project, ...] | list[Project]) -> dict[str, Any]:
    """The receipt's view of one index: indexed sha vs HEAD per project, and how far it got."""
    m, pending = _pending(manifest_path)
    per_project = {}
    for p in projects:
        if not p.is_git:
            continue
        indexed, head = m.heads.get(p.name), read_head(p.root)
        per_project[p.name] = {"indexed_sha": indexed, "head_sha": head, "stale": indexed != head}
    out: dict[str, Any] = {
        "indexed_at": m.updated_at or None,
        "files_indexed": len(m.files),
        "files_pending": pending,
        "partial": pending > 0,
        "projects": per_project,
    }
    if pending:  # how far a catching-up index got: share of the files it knows of
        out["progress"] = round(len(m.files) / (len(m.files) + pending), 3)
    return out


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
