"""``engine index``: one workspace scan, then every enabled index-backed expert updated in turn.

Progress goes to stderr (files done / total, throughput, ETA). Each index is independent: a
slow one (semantic) never holds back the others, and the query path reads whatever each index
has committed so far (its receipt freshness says ``partial`` until it catches up).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable

from .experts import ExpertEnv, adapter_class
from .experts.indexed import IndexedExpert
from .index.build import IndexReport, index_lock, scan_workspace, update_index
from .index.executor import Executor
from .secrets import policy_for
from .spec import ConfigSet
from .workspace import Workspace


class _Bar:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.t0 = time.perf_counter()
        self.last = 0.0

    def __call__(self, name: str, done: int, total: int, units: int) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - self.last < 0.2 and done < total:
            return
        self.last = now
        rate = done / max(now - self.t0, 1e-6)
        eta = (total - done) / rate if rate else 0
        width = 30
        fill = int(width * done / total) if total else width
        sys.stderr.write(
            f"\r{name:<10} [{'#' * fill}{'.' * (width - fill)}] {done}/{total} files "
            f"{rate:,.0f} files/s {units} chunks ETA {eta:,.0f}s "
        )
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def index_workspace(
    ws: Workspace,
    cfg: ConfigSet,
    *,
    only: Iterable[str] | None = None,
    progress: bool = True,
    executor: Executor | None = None,
    batch_files: int = 200,
) -> list[IndexReport]:
    """Update every enabled index; ``executor`` (engine/index/executor.py) runs the batches of
    indexes that can be distributed (semantic: chunking and embedding) elsewhere, e.g. on Ray."""
    env = ExpertEnv(ws)
    wanted = set(only or ())
    reports: list[IndexReport] = []
    with index_lock(ws.data_dir):
        policy = policy_for(ws.data_dir, cfg.raw_experts)
        current = scan_workspace(ws, policy)
        experts: list[tuple[str, IndexedExpert]] = []
        for name, spec in sorted(cfg.experts.items()):
            if not spec.enabled or (wanted and name not in wanted) or not adapter_class(spec.adapter).needs_index:
                continue
            expert = adapter_class(spec.adapter)(spec, env)
            if isinstance(expert, IndexedExpert):
                experts.append((name, expert))
        # fast indexes first: a slow one (embeddings) must not keep the others stale
        experts.sort(key=lambda ne: (ne[1].slow_index, ne[0]))
        for name, expert in experts:
            reports.append(
                update_index(
                    name,
                    expert.indexer(),
                    ws,
                    current,
                    progress=_Bar(progress),
                    accept=expert.accepts,
                    policy=policy,
                    executor=executor,
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
