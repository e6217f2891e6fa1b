"""The ``engine bench --load`` run: set up one workspace, one data dir and one PostgreSQL store
(a throwaway cluster unless ``--store URL``), then the ladder, the soak and the chaos slice of
:mod:`.load`, each cell's receipts checked, and the whole log audited at the end."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

from ..config import load_config
from ..errors import EvalError
from ..indexing import index_workspace
from ..keys import KeyRing
from ..store.pgcluster import PgCluster, start_cluster
from ..workspace import Workspace
from .bench import generate_questions, load_questions
from .load import Cell, check_receipts, drive, final_audit, p95_drift, pinned_keys, set_stall, stall_config
from .metrics import percentiles
from .replicas import Replica, start_replicas


@dataclass
class LoadOptions:
    workspaces: list[Path]
    config_dir: Path
    store: str | None = None  # a postgresql:// URL; None: a throwaway cluster (needed for the restart chaos)
    data_dir: Path | None = None
    replicas: list[int] = field(default_factory=lambda: [1, 3])
    concurrency: list[int] = field(default_factory=lambda: [1, 10, 50])
    duration_s: float = 60.0
    soak_s: float = 0.0
    soak_concurrency: int = 10
    chaos_s: float = 0.0  # 0: no chaos slice
    questions_file: Path | None = None
    n_questions: int = 30
    index: bool = True
    log: Callable[[str], None] = lambda _msg: None


class _Run:
    def __init__(self, opts: LoadOptions, url: str, cluster: PgCluster | None, config: Path, ws: Workspace) -> None:
        from ..store.postgres_store import PostgresStore

        self.opts, self.url, self.cluster, self.config, self.ws = opts, url, cluster, config, ws
        self.store = PostgresStore(url)
        self.next_index = 0
        self.logs = ws.data_dir / "replica-logs"
        self.questions: list[dict[str, Any]] = []

    def replicas(self, n: int) -> list[Replica]:
        reps = start_replicas(
            n,
            workspaces=self.opts.workspaces,
            config_dir=self.config,
            data_dir=self.ws.data_dir,
            store_url=self.url,
            log_dir=self.logs,
            first_index=self.next_index,
        )
        self.next_index += n
        anyio.run(lambda: drive(reps, n, 3.0, self.questions))  # warm-up: models, index readers
        return reps

    def cell(
        self, name: str, reps: list[Replica], c: int, seconds: float, chaos: Callable[[float], None] | None = None
    ) -> tuple[Cell, dict[str, Any]]:
        cell = Cell(name, len(reps), c, seconds)
        load0 = os.getloadavg()[0]
        cell.samples = anyio.run(lambda: drive(reps, c, seconds, self.questions, chaos=chaos))
        out = cell.summary() | {"load_avg_1m": [round(load0, 2), round(os.getloadavg()[0], 2)]}
        out["receipts"] = check_receipts(self.store, cell.samples, pinned_keys(self.ws.data_dir))
        self.opts.log(f"{name}: {out['answered']} answered, {out['errors']} errors, p99 {out['latency_ms']['p99']} ms")
        return cell, out


def _once(events: dict[str, float], name: str, at: float, action: Callable[[], None]) -> Callable[[float], None]:
    """A chaos callback running ``action`` once, in a thread, when ``at`` seconds have passed."""

    t0 = time.monotonic()

    def run() -> None:
        try:
            action()
            events[f"{name}_done"] = round(time.monotonic() - t0, 2)
        except Exception:  # noqa: BLE001 - recorded: a chaos step that did not happen must show
            events[f"{name}_failed"] = round(time.monotonic() - t0, 2)

    def tick(elapsed: float) -> None:
        if elapsed >= at and name not in events:
            nonlocal t0
            t0 = time.monotonic() - elapsed
            events[name] = round(elapsed, 2)
            threading.Thread(target=run, daemon=True).start()

    return tick


def _chaos(run: _Run, seconds: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    c = max(run.opts.concurrency)  # the chaos slice runs at the ladder's top concurrency
    reps = run.replicas(3)
    try:
        events: dict[str, float] = {}
        cell, row = run.cell(
            "chaos: replica killed", reps, c, seconds, _once(events, "killed", seconds / 2, reps[0].kill)
        )
        cell.events = events
        after = [s for s in cell.samples if s.started >= events.get("killed", seconds)]
        row |= {
            "events": events,
            "errors_on_survivors": sum(1 for s in cell.samples if not s.ok and s.replica != reps[0].index),
            "answered_after_kill": sum(1 for s in after if s.ok),
        }
        out["replica_killed"] = row
        live = [r for r in reps if r.alive()]
        ev2: dict[str, float] = {}
        on = _once(ev2, "stall_on", seconds / 3, lambda: set_stall(run.config, True))
        off = _once(ev2, "stall_off", 2 * seconds / 3, lambda: set_stall(run.config, False))

        def stall(elapsed: float) -> None:
            on(elapsed)
            off(elapsed)

        cell, row = run.cell("chaos: expert stalled", live, c, seconds, stall)
        lo, hi = ev2.get("stall_on", seconds), ev2.get("stall_off", seconds)
        row["events"] = ev2
        row["p95_ms_before_during_after"] = [
            percentiles([s.ms for s in cell.samples if s.ok and a <= s.started < b])["p95"]
            for a, b in ((0, lo), (lo + 1, hi), (hi + 1, seconds))  # 1 s for the hot reload to reach every replica
        ]
        out["expert_stalled"] = row
        if run.cluster is not None:
            ev3: dict[str, float] = {}
            cell, row = run.cell(
                "chaos: PostgreSQL restarted",
                live,
                c,
                seconds,
                _once(ev3, "pg_restart", seconds / 2, run.cluster.restart),
            )
            failed = [s.started for s in cell.samples if not s.ok]
            back = max([ev3.get("pg_restart_done", seconds), *failed])  # the server is up and answering again
            row["events"] = ev3
            row["failed_window_s"] = [round(min(failed), 2), round(max(failed), 2)] if failed else None
            row["answered_after_restart"] = sum(1 for s in cell.samples if s.ok and s.started > back)
            out["postgres_restarted"] = row
    finally:
        set_stall(run.config, False)
        for r in reps:
            r.stop()
    return out


def run_load(opts: LoadOptions) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="engine-load-"))
    cluster = start_cluster() if opts.store is None else None
    url = cluster.url if cluster is not None else str(opts.store)
    try:
        config = stall_config(opts.config_dir, tmp / "config")  # a copy: the stall chaos edits its priors
        data_dir = opts.data_dir or tmp / "data"
        ws = Workspace.open(opts.workspaces, data_dir=data_dir)
        if opts.index:
            opts.log("indexing…")
            index_workspace(ws, load_config(config), progress=False)
        KeyRing(data_dir).signing_key(fresh=True)  # one key, made before any replica starts
        run = _Run(opts, url, cluster, config, ws)
        run.questions = (
            load_questions(opts.questions_file) if opts.questions_file else generate_questions(ws, opts.n_questions)
        )
        if not run.questions:
            raise EvalError("no questions: pass --questions FILE")
        ladder = []
        for n in opts.replicas:
            reps = run.replicas(n)
            try:
                for c in opts.concurrency:
                    ladder.append(run.cell(f"{n} replicas, c={c}", reps, c, opts.duration_s)[1])
            finally:
                for r in reps:
                    r.stop()
        result: dict[str, Any] = {
            "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "workspace": [str(p) for p in ws.roots],
            "store": "throwaway PostgreSQL cluster" if cluster else "PostgreSQL (given)",
            "server": str(cluster.bin_dir) if cluster else None,
            "questions": len(run.questions),
            "cpus": os.cpu_count(),
            "ladder": ladder,
        }
        if opts.soak_s:
            reps = run.replicas(3)
            try:
                cell, row = run.cell("soak", reps, opts.soak_concurrency, opts.soak_s)
                row["p95_drift"] = p95_drift(cell.samples, max(opts.soak_s / 10, 10.0))
                result["soak"] = row
            finally:
                for r in reps:
                    r.stop()
        if opts.chaos_s:
            result["chaos"] = _chaos(run, opts.chaos_s)
        result["audit"] = final_audit(run.store, data_dir)
        result["replica_processes"] = run.next_index
        run.store.close()
        return result
    finally:
        if cluster is not None:
            cluster.close()
        shutil.rmtree(tmp, ignore_errors=True)


def load_table(r: dict[str, Any]) -> str:
    """The ladder (and soak, chaos) as a markdown table (what docs/scale.md shows)."""
    rows = [
        "| cell | requests | answered/s | errors | p50 / p95 / p99 ms | receipts ok (answered) | load avg 1m |",
        "|---|---|---|---|---|---|---|",
    ]
    cells = [*r["ladder"], *([r["soak"]] if "soak" in r else []), *r.get("chaos", {}).values()]
    for c in cells:
        lat, rc, la = c["latency_ms"], c["receipts"], c["load_avg_1m"]
        rows.append(
            f"| {c['cell']} | {c['requests']} | {c['rps']} | {c['errors']} | {lat['p50']} / {lat['p95']} / "
            f"{lat['p99']} | {rc['ok']} ({rc['answered']}) | {la[0]} → {la[1]} |"
        )
    notes = {
        "replica_killed": ("events", "errors_on_survivors", "answered_after_kill"),
        "expert_stalled": ("events", "p95_ms_before_during_after"),
        "postgres_restarted": ("events", "failed_window_s", "answered_after_restart"),
    }
    for name, keys in notes.items():
        if name in r.get("chaos", {}):
            rows.append(f"\n{name}: " + ", ".join(f"{k} {r['chaos'][name].get(k)}" for k in keys))
    if "soak" in r:
        rows.append(f"\nsoak p95 per window: {r['soak']['p95_drift']}")
    a = r["audit"]
    rows.append(f"\naudit of the whole log: {a['checked']} receipts, {a['chains']} chains, ok={a['ok']}")
    return "\n".join(rows)
