"""``engine index``: one workspace scan, then every enabled index-backed expert updated in turn.

Progress goes to stderr (files done / total, units, rates, ETA; :mod:`engine.index.progress`).
Each index is independent: the fast ones go first, a slow one (semantic) never holds them back —
with ``background`` it catches up in a detached process (:mod:`engine.catchup`) — and the query
path reads whatever each index has committed so far (its receipt freshness says ``partial``,
with how far it got, until it catches up).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from .catchup import log_path, request, request_path, spawn
from .errors import InvalidRequest
from .experts import ExpertEnv, adapter_class
from .experts.indexed import IndexedExpert
from .index.build import (
    IndexJob,
    IndexReport,
    index_lock,
    lock_holder,
    plan_update,
    record_heads,
    scan_workspace,
    update_index,
    update_indexes,
)
from .index.distributed import update_distributed
from .index.executor import Executor
from .index.manifest import CatchUp, Manifest
from .index.progress import ProgressLine
from .secrets import policy_for
from .spec import ConfigSet
from .workspace import Workspace


def _indexed_names(cfg: ConfigSet) -> str:
    names = [n for n, spec in sorted(cfg.experts.items()) if spec.enabled and adapter_class(spec.adapter).needs_index]
    return ", ".join(names)


def index_workspace(
    ws: Workspace,
    cfg: ConfigSet,
    *,
    only: Iterable[str] | None = None,
    progress: bool = True,
    background: bool = False,
    executor: Executor | None = None,
    batch_files: int = 200,
) -> list[IndexReport]:
    """Update the enabled index-backed experts (``only``: these). With ``background``, slow indexes
    (embeddings) are handed to a detached catch-up process (:mod:`engine.catchup`) once the fast
    ones are committed; their reports then say ``background`` with the pid and files pending. A
    distributing ``executor`` (``--executor ray``, :mod:`engine.index.executor`) prepares the slow
    indexes' batches in the foreground instead (chunking and embedding on the cluster)."""
    env = ExpertEnv(ws)
    wanted = set(only or ())
    for name in sorted(wanted):  # a typo must not be a silent no-op
        spec = cfg.experts.get(name)
        if spec is None:
            raise InvalidRequest(f"--only {name}: no such expert; indexed experts: {_indexed_names(cfg)}", field="only")
        if not adapter_class(spec.adapter).needs_index:
            raise InvalidRequest(
                f"--only {name}: it has no index (it searches live); indexed experts: {_indexed_names(cfg)}",
                field="only",
            )
        if not spec.enabled:
            raise InvalidRequest(f"--only {name}: it is disabled in experts.yaml", field="only")
    if executor is not None and executor.name != "local":
        background = False  # the cluster does the slow work; a detached local process would not use it
    experts = [
        (name, adapter_class(spec.adapter)(spec, env))
        for name, spec in sorted(cfg.experts.items())
        if spec.enabled and (not wanted or name in wanted) and adapter_class(spec.adapter).needs_index
    ]
    indexed = [(n, e) for n, e in experts if isinstance(e, IndexedExpert)]
    slow = [(n, e) for n, e in indexed if getattr(e, "slow_index", False)]
    fast = [(n, e) for n, e in indexed if not getattr(e, "slow_index", False)]
    reports: list[IndexReport] = []
    handoff: dict[str, int] = {}
    with ProgressLine(enabled=progress) as bar:
        with index_lock(ws.data_dir):
            # read before the scan: a run serves the requests made before it looked at the files
            generations = {n: CatchUp.load(request_path(e.manifest_path.parent)).generation for n, e in slow}
            bar.stage("scan", "listing and hashing files")
            policy = policy_for(ws.data_dir, cfg.raw_experts)
            current = scan_workspace(ws, policy)
            # fast indexes first, together (one read and one parse per file for all of them); a slow
            # one (embeddings) must not keep them stale
            if fast:
                bar.stage("+".join(n for n, _ in fast), "opening")
                jobs = [IndexJob(n, e.indexer(), getattr(e, "accepts", None)) for n, e in fast]
                reports += update_indexes(
                    jobs, ws, current, progress=bar, live=bar, policy=policy, batch_files=batch_files
                )
            if background:
                for name, expert in slow:
                    indexer = expert.indexer()
                    manifest = Manifest.load(indexer.manifest_path)
                    todo, gone, unchanged = plan_update(
                        indexer.indexer_id, manifest, current, getattr(expert, "accepts", None)
                    )
                    if todo or gone or manifest.pending:
                        request(expert.manifest_path.parent, len(todo))
                        handoff[name] = len(todo)
                    else:
                        with index_lock(ws.data_dir, name, blocking=False) as mine:
                            if mine:  # else a catch-up holds it, and records the HEADs when it ends
                                record_heads(indexer.manifest_path, ws)
                        reports.append(IndexReport(name, unchanged=unchanged))
        if handoff:
            pid = spawn(ws, cfg.root, sorted(handoff))
            holder = pid or next((lock_holder(ws.data_dir, n) for n in handoff), None)
            for name, pending in sorted(handoff.items()):
                extra = {"background": {"pid": holder, "files_pending": pending, "log": str(log_path(ws))}}
                reports.append(IndexReport(name, extra=extra))
        if not background:
            for name, expert in slow:
                holder = lock_holder(ws.data_dir, name)
                bar.stage(name, f"waiting for the background indexer (pid {holder})" if holder else "loading the model")
                with index_lock(ws.data_dir, name):
                    accept = getattr(expert, "accepts", None)
                    indexer = expert.indexer()
                    if executor is not None and executor.name != "local" and callable(getattr(indexer, "apply", None)):
                        # its batches prepared on the cluster (engine/index/distributed.py): the same index
                        job = IndexJob(name, indexer, accept, generations[name])
                        reports.append(
                            update_distributed(
                                job, ws, current, executor, batch_files=batch_files, progress=bar, policy=policy
                            )
                        )
                        continue
                    reports.append(
                        update_index(
                            name,
                            indexer,
                            ws,
                            current,
                            progress=bar,
                            live=bar,
                            accept=accept,
                            policy=policy,
                            generation=generations[name],
                            batch_files=batch_files,
                        )
                    )
    return reports


def watch(
    ws: Workspace,
    cfg_loader: Callable[[], ConfigSet],
    *,
    interval_s: float = 0.5,
    on_change: Callable[[list[IndexReport]], None] | None = None,
    max_rounds: int | None = None,
) -> None:
    """Keep a workspace fresh: re-scan every ``interval_s`` (stat only for unchanged files) and
    re-index what changed. Polling keeps it dependency-free and works on every filesystem."""
    rounds = 0
    while max_rounds is None or rounds < max_rounds:
        reports = index_workspace(ws, cfg_loader(), progress=False)
        if on_change and any(r.added or r.removed for r in reports):
            on_change(reports)
        rounds += 1
        time.sleep(interval_s)
