"""The in-memory twin of the DuckDB store: same port, same contract suite, no files.

For tests and embedding (a Router whose receipts need not outlive the process). It keeps the
same two layers as the file store, an append-only log of record and queryable tables built from
it, so :meth:`MemoryStore.repair` and the verification reads mean the same thing here.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from .records import (
    PIPELINE_SEP,
    BanditArm,
    BenchmarkEvent,
    CacheEntry,
    ConfigSnapshot,
    EventQuery,
    Experiment,
    ExpertStats,
    Feedback,
    Hint,
    ReceiptMix,
    ReceiptQuery,
    ReceiptSummary,
    RepairReport,
    StoredReceipt,
    StoreHealth,
    check_feedback,
    receipt_columns,
    stats_from,
    timestamp,
)


def _in_window(created_at: str | None, since: Any, until: Any) -> bool:
    lo, hi = timestamp(since), timestamp(until)
    return (lo is None or (created_at or "") >= lo) and (hi is None or (created_at or "") < hi)


class MemoryStore:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._log: list[tuple[str, Any]] = []  # the log of record: (table, record), append-only
        self.receipts: dict[str, StoredReceipt] = {}  # public so tests can damage the tables
        self._events: dict[str, BenchmarkEvent] = {}
        self._cache: dict[str, CacheEntry] = {}
        self._feedback: dict[str, Feedback] = {}
        self._experiments: dict[str, Experiment] = {}
        self._hints: dict[str, Hint] = {}
        self._bandit: dict[str, BanditArm] = {}
        self._snapshots: dict[str, ConfigSnapshot] = {}

    # ------------------------------------------------------------------ writes: log, then tables
    def _write(self, table: str, record: Any) -> None:
        with self._lock:
            self._log.append((table, record))
            self._apply(table, record)

    def _apply(self, table: str, record: Any) -> None:
        if table == "receipts":
            body = copy.deepcopy(dict(record))
            rid = str(body.get("receipt_id"))
            if rid not in self.receipts:
                self.receipts[rid] = StoredReceipt(receipt_columns(body), body)
            return
        if table == "cache":
            old = self._cache.get(record.key)
            if old is None or record.created_at >= old.created_at:
                self._cache[record.key] = record
            return
        if table == "bandit":
            prev = self._bandit.get(record.arm_id)
            if prev is None or record.updated_at >= prev.updated_at:
                self._bandit[record.arm_id] = record
            return
        tables: dict[str, dict[str, Any]] = {
            "events": self._events,
            "feedback": self._feedback,
            "experiments": self._experiments,
            "hints": self._hints,
            "config_snapshots": self._snapshots,
        }
        target = tables[table]
        key = {
            "events": "event_id",
            "feedback": "feedback_id",
            "experiments": "experiment_id",
            "hints": "hint_id",
            "config_snapshots": "config_version",
        }
        target.setdefault(getattr(record, key[table]), record)

    def make_durable(self) -> None:
        """Nothing to flush: memory is as durable as it gets."""

    def put_receipt(self, receipt: Mapping[str, Any]) -> None:
        self._write("receipts", copy.deepcopy(dict(receipt)))

    def record_events(self, events: Iterable[BenchmarkEvent]) -> None:
        for e in events:
            self._write("events", e)

    def cache_put(self, entry: CacheEntry) -> None:
        self._write("cache", entry)

    def put_feedback(self, feedback: Feedback) -> None:
        stored = self.receipts.get(feedback.receipt_id)
        check_feedback(feedback, stored.body if stored is not None else None)
        self._write("feedback", feedback)

    def put_config_snapshot(self, snapshot: ConfigSnapshot) -> None:
        self._write("config_snapshots", copy.deepcopy(snapshot))

    def put_experiment(self, experiment: Experiment) -> None:
        self._write("experiments", experiment)

    def put_hint(self, hint: Hint) -> None:
        self._write("hints", hint)

    def put_bandit(self, arm: BanditArm) -> None:
        self._write("bandit", arm)

    def holds_data(self) -> bool:
        return bool(self._log)

    # ------------------------------------------------------------------ reads
    def get_receipt(self, receipt_id: str) -> dict[str, Any] | None:
        stored = self.receipts.get(receipt_id)
        return copy.deepcopy(stored.body) if stored is not None else None

    def list_receipts(self, query: ReceiptQuery = ReceiptQuery()) -> list[ReceiptSummary]:
        return [s for s, _ in self._matching(query)][: query.limit]

    def receipt_mix(self, query: ReceiptQuery = ReceiptQuery()) -> ReceiptMix:
        by_class: dict[str | None, int] = {}
        by_status: dict[str, int] = {}
        hits = 0
        matching = self._matching(query)
        for summary, body in matching:
            by_class[summary.klass] = by_class.get(summary.klass, 0) + 1
            by_status[summary.status] = by_status.get(summary.status, 0) + 1
            cache = body.get("cache")
            hits += isinstance(cache, dict) and cache.get("hit") is True
        return ReceiptMix(len(matching), by_class, by_status, hits)

    def _matching(self, query: ReceiptQuery) -> list[tuple[ReceiptSummary, dict[str, Any]]]:
        """Receipts passing ``query``'s filters (its limit aside), newest first, with their bodies."""
        out = []
        for s in self.receipts.values():
            c = s.columns
            if any(
                v is not None and c[col] != v
                for col, v in (
                    ("class", query.klass),
                    ("status", query.status),
                    ("config_version", query.config_version),
                )
            ):
                continue
            pipeline = str(c["pipeline"])
            if query.pipeline is not None and query.pipeline not in (pipeline, *pipeline.split(PIPELINE_SEP)):
                continue
            if not _in_window(c["created_at"], query.since, query.until):
                continue
            summary = ReceiptSummary(
                c["receipt_id"],
                c["created_at"],
                pipeline,
                c["class"],
                c["status"],
                c["result_count"],
                c["config_version"],
                c["request_hash"],
                _question(s.body),
            )
            out.append((summary, s.body or {}))
        out.sort(key=lambda r: r[0].receipt_id)
        out.sort(key=lambda r: r[0].created_at, reverse=True)
        return out

    def stored_receipts(self, receipt_id: str | None = None) -> Iterator[StoredReceipt]:
        for rid in sorted(self.receipts):
            if receipt_id is None or rid == receipt_id:
                yield copy.deepcopy(self.receipts[rid])

    def logged_receipts(self) -> Iterator[dict[str, Any]]:
        for table, record in list(self._log):
            if table == "receipts":
                yield copy.deepcopy(record)

    def list_events(self, query: EventQuery = EventQuery()) -> list[BenchmarkEvent]:
        out = [
            e
            for e in self._events.values()
            if all(
                v is None or getattr(e, f) == v
                for f, v in (
                    ("arm", query.arm),
                    ("expert_id", query.expert_id),
                    ("config_version", query.config_version),
                    ("run_id", query.run_id),
                )
            )
            and _in_window(e.created_at, query.since, query.until)
        ]
        out.sort(key=lambda e: (e.created_at, e.event_id))
        return out if query.limit is None else out[: query.limit]

    def expert_stats(self, query: EventQuery = EventQuery()) -> list[ExpertStats]:
        by_expert: dict[str, list[BenchmarkEvent]] = {}
        for e in self.list_events(
            EventQuery(query.since, query.until, query.arm, query.expert_id, query.config_version)
        ):
            by_expert.setdefault(e.expert_id, []).append(e)
        return [stats_from(eid, evs) for eid, evs in sorted(by_expert.items())]

    def cache_get(self, key: str, *, now: float | None = None) -> CacheEntry | None:
        entry = self._cache.get(key)
        if entry is None or entry.expires_at <= (time.time() if now is None else now):
            return None
        return entry

    def list_feedback(self, receipt_id: str | None = None) -> list[Feedback]:
        out = [f for f in self._feedback.values() if receipt_id is None or f.receipt_id == receipt_id]
        return sorted(out, key=lambda f: (f.created_at, f.feedback_id))

    def get_config_snapshot(self, config_version: str) -> ConfigSnapshot | None:
        snap = self._snapshots.get(config_version)
        return copy.deepcopy(snap) if snap is not None else None

    def list_config_snapshots(self) -> list[ConfigSnapshot]:
        ordered = sorted(self._snapshots.values(), key=lambda s: (s.created_at, s.config_version))
        return [copy.deepcopy(s) for s in ordered]

    def list_experiments(self, suite: str | None = None) -> list[Experiment]:
        out = [x for x in self._experiments.values() if suite is None or x.suite == suite]
        return sorted(out, key=lambda x: (x.created_at, x.experiment_id))

    def list_hints(self, project: str | None = None) -> list[Hint]:
        out = [h for h in self._hints.values() if project is None or h.project == project]
        return sorted(out, key=lambda h: (h.created_at, h.hint_id))

    def get_bandit(self, arm_id: str) -> BanditArm | None:
        return self._bandit.get(arm_id)

    def list_bandit(self, task_class: str | None = None) -> list[BanditArm]:
        return sorted(
            (a for a in self._bandit.values() if task_class is None or a.task_class == task_class),
            key=lambda a: a.arm_id,
        )

    # ------------------------------------------------------------------ upkeep
    def sync(self, timeout_s: float = 30.0) -> int:
        return 0  # nothing is buffered

    def health(self) -> StoreHealth:
        return StoreHealth(True, "ok", f"{len(self.receipts)} receipts (in memory)", receipts=len(self.receipts))

    def repair(self) -> RepairReport:
        with self._lock:
            salvaged = [s.body for rid, s in self.receipts.items() if s.body is not None]
            logged = {str(r.get("receipt_id")) for t, r in self._log if t == "receipts"}
            extra = [b for b in salvaged if str(b.get("receipt_id")) not in logged]
            self._log += [("receipts", b) for b in extra]
            self.receipts.clear()
            every: tuple[dict[str, Any], ...] = (
                self._events,
                self._cache,
                self._feedback,
                self._experiments,
                self._hints,
                self._bandit,
                self._snapshots,
            )
            for store in every:
                store.clear()
            for table, record in self._log:
                self._apply(table, record)
            tables = {
                "receipts": len(self.receipts),
                "tool_benchmark_events": len(self._events),
                "experiments": len(self._experiments),
                "cache": len(self._cache),
                "feedback": len(self._feedback),
                "hints": len(self._hints),
                "bandit_state": len(self._bandit),
                "config_snapshots": len(self._snapshots),
            }
            return RepairReport(tables=tables, log_receipts=len(logged) + len(extra), salvaged=len(extra))

    def close(self) -> None:
        return None


def _question(body: dict[str, Any] | None) -> str | None:
    request = (body or {}).get("request")
    question = request.get("question") if isinstance(request, dict) else None
    return question if isinstance(question, str) else None
