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
        # optional, to be distributable (engine/index/executor.py): add(files) == apply(prepare(task(files)))
        def task(self, files) -> T         # a picklable description of the batch
        prepare: (T) -> P                  # a pure, picklable function (runs in any process)
        def apply(self, prepared: P) -> int

One scan of the workspace (hashes reused when size+mtime are unchanged) is diffed against each
index's own manifest: only added or changed files are processed, deleted ones dropped. Files go
to ``add`` in small groups (so progress moves), and each index commits every ``batch_files``
files or ``commit_s`` seconds, whichever comes first, then its manifest is saved: an interrupted
run loses at most one commit's worth and the next run resumes from there (``add`` is idempotent
per file key, so files committed but not yet in the manifest are simply redone).

Several indexes are updated in lockstep (:func:`update_indexes`): each group of files is read
once and handed to every index that wants it, one after the other, so the syntax analysis of a
file (:func:`engine.index.chunking.file_outline`, one parse for chunks and tags) is still cached
when the next index asks for it. Locks and freshness: :mod:`engine.index.state`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from ..secrets import SecretsPolicy
from ..types import Project
from ..workspace import Workspace
from .chunking import OutlinePrefetch
from .files import SourceFile, read_indexable, scan
from .manifest import CatchUp, Manifest
from .state import (  # re-exported: the query path and older callers import them from here
    CATCHUP_FILE,
    Heads,
    catching_up,
    changed_since_indexed,
    current_heads,
    freshness,
    index_lock,
    lock_holder,
    read_head,
)

__all__ = [
    "CATCHUP_FILE",
    "Heads",
    "IndexJob",
    "IndexReport",
    "Indexer",
    "Progress",
    "UnitProgress",
    "catching_up",
    "changed_since_indexed",
    "current_heads",
    "freshness",
    "index_lock",
    "lock_holder",
    "plan_update",
    "read_head",
    "scan_workspace",
    "update_index",
    "update_indexes",
]


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
PREFETCH_MIN_FILES = 300  # below this a worker process costs more than it saves
PREFETCH_GROUPS = 2  # how many groups ahead the worker parses
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


@dataclass
class IndexJob:
    """One index to bring up to date: its writer, which files it wants, the request it serves."""

    name: str
    indexer: Indexer
    accept: Callable[[SourceFile], bool] | None = None
    generation: int | None = None  # None: the catch-up request current when the run starts


class _Run:
    """The state of one index during an update: its manifest, what is staged, when it committed."""

    def __init__(self, job: IndexJob, workspace: Workspace, current: dict[str, SourceFile]) -> None:
        self.job, self.workspace = job, workspace
        ix = job.indexer
        # never built: opened even with nothing to index, so an empty project has an (empty) index
        # and its experts answer "nothing found", not "no index: run engine index" after one ran
        self.first = not ix.manifest_path.exists()
        manifest = Manifest.load(ix.manifest_path)
        if manifest.indexer_id != ix.indexer_id:
            manifest = Manifest(ix.manifest_path, ix.indexer_id)
        self.todo, self.gone, unchanged = plan_update(ix.indexer_id, manifest, current, job.accept)
        # before touching an index (a no-op run stays cheap): can its data be read as the manifest
        # says? If not, every file is redone — an index emptied under a manifest listing every file
        # said "complete" for good (an optional method: an index that can tell)
        intact = getattr(ix, "intact", None)
        self.damaged = bool((self.todo or self.gone) and manifest.files and intact is not None and not intact())
        if self.damaged:
            manifest = Manifest(ix.manifest_path, ix.indexer_id)
            self.todo, self.gone, unchanged = plan_update(ix.indexer_id, manifest, current, job.accept)
        self.manifest = manifest
        self.keys = {f.key for f in self.todo}
        self.report = IndexReport(job.name, unchanged=unchanged)
        # the catch-up request served; callers that scanned earlier pass the one read before the scan
        req = CatchUp.load(ix.manifest_path.parent / CATCHUP_FILE).generation
        manifest.catchup = req if job.generation is None else job.generation
        self.staged: list[SourceFile] = []
        self.dropped: list[str] = []
        self.done = 0
        self.last_commit = time.monotonic()

    def start(self) -> None:
        """After ``open()``, which may compare the manifest on disk with its own format."""
        self.manifest.pending = len(self.todo)
        if self.todo:
            _save(self.manifest, self.workspace)  # readers see "partial" from now on
        if self.gone:
            self.job.indexer.remove(self.gone)
            self.job.indexer.commit()
            for k in self.gone:
                self.manifest.files.pop(k, None)
            self.report.removed = len(self.gone)
            _save(self.manifest, self.workspace)

    def feed(self, payload: list[tuple[SourceFile, bytes]], dropped: list[str], tick: UnitProgress) -> None:
        if dropped:
            self.job.indexer.remove(dropped)
            self.dropped += dropped
        if payload:
            before = self.report.units
            added = self.job.indexer.add(payload, progress=tick)
            self.report.units = before + added  # what add() says it added is the truth
            self.staged += [f for f, _ in payload]
        self.done += len(payload) + len(dropped)

    def due(self, batch_files: int, commit_s: float) -> bool:
        return bool(self.staged or self.dropped) and (
            len(self.staged) + len(self.dropped) >= batch_files
            or time.monotonic() - self.last_commit >= commit_s
            or self.done == len(self.todo)
        )

    def commit(self) -> None:
        self.job.indexer.commit()
        for f in self.staged:
            self.manifest.files[f.key] = {"sha256": f.sha256, "size": f.size, "mtime_ns": f.mtime_ns}
        for k in self.dropped:
            self.manifest.files.pop(k, None)
        self.report.added += len(self.staged)
        self.manifest.pending = len(self.todo) - self.done
        _save(self.manifest, self.workspace)
        self.staged, self.dropped, self.last_commit = [], [], time.monotonic()

    def finish(self) -> None:
        if self.staged or self.dropped:
            self.commit()
        self.manifest.pending = 0
        _save(self.manifest, self.workspace, final=True)


def update_indexes(
    jobs: list[IndexJob],
    workspace: Workspace,
    current: dict[str, SourceFile],
    *,
    batch_files: int = 200,
    commit_s: float = COMMIT_S,
    progress: Progress | None = None,
    live: Progress | None = None,
    policy: SecretsPolicy | None = None,
) -> list[IndexReport]:
    """Bring several indexes up to date with ``current`` in lockstep (see the module docstring).

    Reported under the jobs' names joined by ``+``: ``progress`` after each group in which an index
    committed (durable up to ``done`` files), ``live`` whenever there is news (also from inside
    ``add``). Every index is closed however the run ends.
    """
    started = time.perf_counter()
    runs = [_Run(job, workspace, current) for job in jobs]
    label = "+".join(job.name for job in jobs)
    files = {f.key: f for r in runs for f in r.todo}
    keys = sorted(files)
    roots: dict[str, Project] = {p.name: p for p in workspace.projects}
    done = 0

    inflight = [0]  # units an add() in progress has reported so far (it counts them itself at the end)

    def units() -> int:
        return sum(r.report.units for r in runs) + inflight[0]

    def tick(n: int) -> None:
        inflight[0] += n
        if live:
            live(label, done, len(keys), units())

    step = max(1, min(ADD_FILES, batch_files))
    groups = [[files[k] for k in keys[i : i + step]] for i in range(0, len(keys), step)]
    read: dict[int, dict[str, bytes | None]] = {}

    as_read: dict[str, SourceFile] = {}  # files whose bytes changed between the scan and the read

    def read_group(i: int) -> dict[str, bytes | None]:
        if i not in read:
            read[i] = {f.key: read_indexable(roots[f.project].root, f.path, policy) for f in groups[i]}
            for f in groups[i]:
                # edited while indexing: the manifest records the bytes indexed, not the scan's, so
                # the next run sees the difference (it recorded the scan's hash over other content:
                # a function that existed only mid-edit was served as confirmed, for good)
                got = read[i][f.key]
                if got is not None and (digest := hashlib.sha256(got).hexdigest()) != f.sha256:
                    as_read[f.key] = replace(f, sha256=digest, mtime_ns=-1)
        return read[i]

    opened: list[_Run] = []
    prefetch = OutlinePrefetch() if len(keys) >= PREFETCH_MIN_FILES and (os.cpu_count() or 1) > 1 else None
    try:
        for r in runs:
            if r.todo or r.gone or r.first:  # nothing to do: no model load, no writer (a no-op run stays cheap)
                r.job.indexer.open()
                opened.append(r)
            r.start()
        for gi, group in enumerate(groups):
            if prefetch is not None:  # the worker parses the next groups while the indexes take this one
                for ahead in range(1, PREFETCH_GROUPS + 1) if gi == 0 else [gi + PREFETCH_GROUPS]:
                    if ahead < len(groups):
                        prefetch.submit([(f.path, d) for f in groups[ahead] if (d := read_group(ahead)[f.key])])
            data = read_group(gi)
            read.pop(gi, None)
            start = gi * step
            committed = False
            for r in runs:
                mine = [f for f in group if f.key in r.keys]
                if not mine:
                    continue
                r.feed(
                    [(as_read.get(f.key, f), d) for f in mine if (d := data[f.key]) is not None],
                    [f.key for f in mine if data[f.key] is None],
                    tick,
                )
                inflight[0] = 0
                if r.due(batch_files, commit_s):
                    r.commit()
                    committed = True
            done = start + len(group)
            if live:
                live(label, done, len(keys), units())
            if committed and progress:
                progress(label, done, len(keys), units())
        for r in runs:
            r.finish()
    finally:
        for r in opened:
            r.job.indexer.close()
        if prefetch is not None:
            prefetch.close()
    seconds = time.perf_counter() - started
    for r in runs:
        r.report.seconds = seconds
    return [r.report for r in runs]


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
    policy: SecretsPolicy | None = None,
    generation: int | None = None,
) -> IndexReport:
    """Bring one index up to date with ``current`` (:func:`update_indexes` with one job; on an
    executor such as Ray: :func:`engine.index.distributed.update_distributed`)."""
    job = IndexJob(name, indexer, accept, generation)
    (report,) = update_indexes(
        [job],
        workspace,
        current,
        batch_files=batch_files,
        commit_s=commit_s,
        progress=progress,
        live=live,
        policy=policy,
    )
    return report


def record_heads(manifest_path: Path, workspace: Workspace) -> bool:
    """An index with nothing to re-index still records the HEADs it now answers for: a commit that
    changed no indexed file (an empty commit, a branch switch to the same tree) must not leave it
    reported stale for ever. The caller holds the index's lock. Returns whether it saved."""
    manifest = Manifest.load(manifest_path)
    if not manifest.indexer_id or manifest.pending:
        return False  # never built, or a run in progress: that run records them
    if manifest.heads == current_heads(workspace.projects):
        return False
    _save(manifest, workspace, final=True)
    return True


def _save(manifest: Manifest, workspace: Workspace, *, final: bool = False) -> None:
    """Save after a batch (a new random generation: the index changed) or at the end of a run (the
    content digest: a run that changed nothing leaves the generation, and so the answer cache, as it was)."""
    manifest.heads = {p.name: read_head(p.root) for p in workspace.projects if p.is_git}
    manifest.updated_at = datetime.now(UTC).isoformat(timespec="seconds")
    manifest.generation = manifest.content_digest() if final else f"partial-{uuid.uuid4().hex}"
    manifest.save()
