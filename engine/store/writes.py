"""Records to rows: the store port's writes, once for every backend that appends rows to a log
(DuckDB's spool lines, PostgreSQL's ``record_log`` transaction). A backend provides ``_append``
and ``get_receipt`` (feedback is checked against its receipt first: :func:`.records.check_feedback`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .records import BanditArm, BenchmarkEvent, CacheEntry, ConfigSnapshot, Experiment, Feedback, Hint, check_feedback


class RowWrites:
    #: put_receipt waits for the write to reach the disk. DuckDB's spool says False: the line is
    #: written (in the kernel: it survives the process) before the answer and fsync'ed by
    #: :meth:`make_durable` right after it (ADR 0007's update, issue 10)
    sync_receipts = True

    def make_durable(self) -> None:
        """Make every receipt written so far durable against power loss (no-op when already)."""

    def _append(self, table: str, rows: Iterable[dict[str, Any]], *, durable: bool) -> None:
        """Make ``rows`` of ``table`` stored; with ``durable``, crash-safe before returning."""
        raise NotImplementedError

    def get_receipt(self, receipt_id: str) -> dict[str, Any] | None:
        raise NotImplementedError  # mixed in after the backend's reads (SqlReads), which provide it

    def put_receipt(self, receipt: Mapping[str, Any]) -> None:
        self._append("receipts", [{"body": dict(receipt)}], durable=self.sync_receipts)

    def record_events(self, events: Iterable[BenchmarkEvent]) -> None:
        self._append("tool_benchmark_events", [e.to_dict() for e in events], durable=False)

    def cache_put(self, entry: CacheEntry) -> None:
        row = {
            "cache_key": entry.key,
            "created_at": entry.created_at,
            "expires_at": entry.expires_at,
            "negative": entry.negative,
            "response": entry.response,
        }
        self._append("cache", [row], durable=False)

    def put_feedback(self, feedback: Feedback) -> None:
        check_feedback(feedback, self.get_receipt(feedback.receipt_id))
        row = feedback.to_dict()
        row["useful_item_ids"] = list(feedback.useful_item_ids)
        row["not_useful_item_ids"] = list(feedback.not_useful_item_ids)
        self._append("feedback", [row], durable=True)

    def put_config_snapshot(self, snapshot: ConfigSnapshot) -> None:
        self._append("config_snapshots", [snapshot.to_dict()], durable=True)

    def put_experiment(self, experiment: Experiment) -> None:
        self._append("experiments", [experiment.to_dict()], durable=True)

    def put_hint(self, hint: Hint) -> None:
        # advisory, written after the answer: losing the last few to a crash is acceptable (as events)
        row = hint.to_dict()
        row["keys"] = list(hint.keys)
        self._append("hints", [row], durable=False)

    def put_bandit(self, arm: BanditArm) -> None:
        self._append("bandit_state", [arm.to_dict()], durable=True)
