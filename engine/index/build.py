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
        # optional, to be distributable (engine/index/executor.py): add(files) == apply(prepare(task(files)))
        def task(self, files) -> T         # a picklable description of the batch
        prepare: (T) -> P                  # a pure, picklable function (runs in any process)
        def apply(self, prepared: P) -> int

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
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from ..datadir import ensure_data_dir
from ..secrets import SecretsPolicy
from ..types import Project
from ..workspace import Workspace
from .executor import Executor, LocalExecutor
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
    executor: Executor | None = None,
) -> IndexReport:
    """Bring one index up to date with ``current``; commits and saves its manifest per batch. With
    an ``executor``, an indexer offering ``task`` / ``prepare`` / ``apply`` has its batches
    prepared there (the same index results: ``add`` is ``apply(prepare(task(files)))``)."""
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
        # an indexer that splits its work into a pure ``prepare`` and an ``apply`` can have the
        # prepare step run elsewhere (engine/index/executor.py); the driver applies in order
        distributed = executor is not None and callable(getattr(indexer, "apply", None))
        batches: deque[tuple[int, list[tuple[SourceFile, bytes]], list[str]]] = deque()

        def tasks() -> Iterator[Any]:
            for start in range(0, len(todo), batch_files):
                payload, unreadable = _read_batch(todo[start : start + batch_files], roots, policy)
                batches.append((start + batch_files, payload, unreadable))
                yield indexer.task(payload) if distributed else payload  # type: ignore[attr-defined]

        run = executor if distributed and executor is not None else LocalExecutor()
        prepare: Callable[[Any], Any] = indexer.prepare if distributed else _same  # type: ignore[attr-defined]
        apply: Callable[[Any], int] = indexer.apply if distributed else indexer.add  # type: ignore[attr-defined]
        for prepared in run.map(prepare, tasks()):
            end, payload, unreadable = batches.popleft()
            if unreadable:
                indexer.remove(unreadable)
            report.units += apply(prepared) if payload else 0
            indexer.commit()
            for f, _ in payload:
                manifest.files[f.key] = {"sha256": f.sha256, "size": f.size, "mtime_ns": f.mtime_ns}
            for k in unreadable:
                manifest.files.pop(k, None)
            report.added += len(payload)
            manifest.pending = max(len(todo) - end, 0)
            _save(manifest, workspace)
            if progress:
                progress(name, min(end, len(todo)), len(todo), report.units)
        manifest.pending = 0
        _save(manifest, workspace, final=True)
    finally:
        indexer.close()
    report.seconds = time.perf_counter() - started
    return report


def _same(x: Any) -> Any:
    return x


def _read_batch(
    batch: list[SourceFile], roots: dict[str, Project], policy: SecretsPolicy | None
) -> tuple[list[tuple[SourceFile, bytes]], list[str]]:
    """The batch's readable files with their bytes, and the keys of those that are gone or withheld."""
    payload: list[tuple[SourceFile, bytes]] = []
    unreadable: list[str] = []
    for f in batch:
        data = read_indexable(roots[f.project].root, f.path, policy)
        if data is None:
            unreadable.append(f.key)
        else:
            payload.append((f, data))
    return payload, unreadable


def _save(manifest: Manifest, workspace: Workspace, *, final: bool = False) -> None:
    """Save after a batch (a new random generation: the index changed) or at the end of a run (the
    content digest: a run that changed nothing leaves the generation, and so the answer cache, as it was)."""
    manifest.heads = {p.name: read_head(p.root) for p in workspace.projects if p.is_git}
    manifest.updated_at = datetime.now(UTC).isoformat(timespec="seconds")
    manifest.generation = manifest.content_digest() if final else f"partial-{uuid.uuid4().hex}"
    manifest.save()


def freshness(manifest_path: Path, projects: tuple[Project, ...] | list[Project]) -> dict[str, Any]:
    """The receipt's view of one index: indexed sha vs HEAD per project, and files pending."""
    m = Manifest.load(manifest_path)
    per_project = {}
    for p in projects:
        if not p.is_git:
            continue
        indexed, head = m.heads.get(p.name), read_head(p.root)
        per_project[p.name] = {"indexed_sha": indexed, "head_sha": head, "stale": indexed != head}
    return {
        "indexed_at": m.updated_at or None,
        "files_indexed": len(m.files),
        "files_pending": m.pending,
        "partial": m.pending > 0,
        "projects": per_project,
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
