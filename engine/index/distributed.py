"""One index brought up to date with its batches prepared on an executor (Ray; docs/scale.md).

An indexer that splits ``add`` into a picklable ``task(files)``, a pure ``prepare(task)`` and an
``apply(prepared)`` can have the heavy middle step (chunking and embedding) run in other
processes or machines (:mod:`engine.index.executor`). The driver reads the files, applies the
prepared batches in input order, commits and saves the manifest batch by batch, exactly as the
local path does, so the index that results is the same whichever executor ran it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from ..secrets import SecretsPolicy
from ..types import Project
from ..workspace import Workspace
from .build import CATCHUP_FILE, IndexJob, IndexReport, Progress, _save, plan_update
from .executor import Executor
from .files import SourceFile, read_indexable
from .manifest import CatchUp, Manifest


def update_distributed(
    job: IndexJob,
    workspace: Workspace,
    current: dict[str, SourceFile],
    executor: Executor,
    *,
    batch_files: int = 200,
    progress: Progress | None = None,
    policy: SecretsPolicy | None = None,
) -> IndexReport:
    started = time.perf_counter()
    indexer: Any = job.indexer  # offers task / prepare / apply (checked by the caller)
    manifest = Manifest.load(indexer.manifest_path)
    if manifest.indexer_id != indexer.indexer_id:  # new model / format: everything is redone
        manifest = Manifest(indexer.manifest_path, indexer.indexer_id)
    todo, gone, unchanged = plan_update(indexer.indexer_id, manifest, current, job.accept)
    req = CatchUp.load(indexer.manifest_path.parent / CATCHUP_FILE).generation
    manifest.catchup = req if job.generation is None else job.generation
    report = IndexReport(job.name, unchanged=unchanged)
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
        _save(manifest, workspace)  # readers see "partial" from now on
        batches: deque[tuple[int, list[tuple[SourceFile, bytes]], list[str]]] = deque()

        def tasks() -> Iterator[Any]:
            for start in range(0, len(todo), batch_files):
                payload, unreadable = _read_batch(todo[start : start + batch_files], roots, policy)
                batches.append((start + batch_files, payload, unreadable))
                yield indexer.task(payload)

        prepare: Callable[[Any], Any] = indexer.prepare
        for prepared in executor.map(prepare, tasks()):
            end, payload, unreadable = batches.popleft()
            if unreadable:
                indexer.remove(unreadable)
            report.units += indexer.apply(prepared) if payload else 0
            indexer.commit()
            for f, _ in payload:
                manifest.files[f.key] = {"sha256": f.sha256, "size": f.size, "mtime_ns": f.mtime_ns}
            for k in unreadable:
                manifest.files.pop(k, None)
            report.added += len(payload)
            manifest.pending = max(len(todo) - end, 0)
            _save(manifest, workspace)
            if progress:
                progress(job.name, min(end, len(todo)), len(todo), report.units)
        manifest.pending = 0
        _save(manifest, workspace, final=True)
    finally:
        indexer.close()
    report.seconds = time.perf_counter() - started
    return report


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
