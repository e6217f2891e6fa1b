"""The store port's filtered reads, once for both SQL backends (DuckDB and PostgreSQL).

A backend mixes :class:`SqlReads` in and provides ``_read(sql, params)`` (rows, or StoreError)
and its :data:`~.sql.Dialect`; the queries come from :mod:`.sql`, the row shapes from
:mod:`.records`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from .records import (
    BanditArm,
    BenchmarkEvent,
    ConfigSnapshot,
    EventQuery,
    Experiment,
    ExpertStats,
    Feedback,
    Hint,
    ReceiptMix,
    ReceiptQuery,
    ReceiptSummary,
    StoredReceipt,
)
from .schema import JSON_COLUMNS, TABLES, select_sql
from .sql import Dialect, event_where, mix_sql, placeholder, receipt_where, stats_sql


def json_value(value: Any) -> Any:
    """A JSON column's value: DuckDB hands back text, psycopg the decoded value."""
    return json.loads(value) if isinstance(value, str) else value


class SqlReads:
    dialect: Dialect = "duckdb"

    def _read(self, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def stored_receipts(self, receipt_id: str | None = None) -> Iterator[StoredReceipt]:
        sql, params = select_sql("receipts"), []
        if receipt_id is not None:
            sql, params = f"{sql} WHERE receipt_id = {placeholder(self.dialect)}", [receipt_id]
        cols = TABLES["receipts"][1]
        for row in self._read(sql + " ORDER BY receipt_id", params):
            columns = dict(zip(cols, row, strict=True))
            raw = columns.pop("body")
            try:
                body = json_value(raw) if raw is not None else None
            except ValueError as exc:  # a damaged row is reported by the audit, not skipped
                yield StoredReceipt(columns, None, f"stored body is not JSON: {exc}")
                continue
            yield StoredReceipt(columns, body if isinstance(body, dict) else None, None)

    def get_receipt(self, receipt_id: str) -> dict[str, Any] | None:
        rows = self._read(f"SELECT body FROM receipts WHERE receipt_id = {placeholder(self.dialect)}", [receipt_id])
        return json_value(rows[0][0]) if rows else None

    def list_receipts(self, query: ReceiptQuery = ReceiptQuery()) -> list[ReceiptSummary]:
        where, params = receipt_where(query, self.dialect)
        question = (  # the receipt's own question, for `receipts list`
            "json_extract_string(body, '$.request.question')"
            if self.dialect == "duckdb"
            else "(body::json -> 'request' ->> 'question')"
        )
        sql = (
            "SELECT receipt_id, created_at, pipeline, class, status, result_count, config_version, request_hash, "
            f"{question} FROM receipts{where} ORDER BY created_at DESC, receipt_id"
        )
        if query.limit is not None:
            sql, params = f"{sql} LIMIT {placeholder(self.dialect)}", [*params, query.limit]
        return [ReceiptSummary(*r) for r in self._read(sql, params)]

    def receipt_mix(self, query: ReceiptQuery = ReceiptQuery()) -> ReceiptMix:
        sql, params = mix_sql(query, self.dialect)
        by_class: dict[str | None, int] = {}
        by_status: dict[str, int] = {}
        total = hits = 0
        for klass, status, hit, n in self._read(sql, params):
            total += n
            hits += n if hit else 0
            by_class[klass] = by_class.get(klass, 0) + n
            by_status[status] = by_status.get(status, 0) + n
        return ReceiptMix(total, by_class, by_status, hits)

    def list_events(self, query: EventQuery = EventQuery()) -> list[BenchmarkEvent]:
        where, params = event_where(query, self.dialect)
        sql = f"{select_sql('tool_benchmark_events')}{where} ORDER BY created_at, event_id"
        if query.limit is not None:
            sql, params = f"{sql} LIMIT {placeholder(self.dialect)}", [*params, query.limit]
        cols = TABLES["tool_benchmark_events"][1]
        return [BenchmarkEvent(**dict(zip(cols, r, strict=True))) for r in self._read(sql, params)]

    def expert_stats(self, query: EventQuery = EventQuery()) -> list[ExpertStats]:
        sql, params = stats_sql(query, self.dialect)
        return [
            ExpertStats(
                expert_id=eid,
                count=n,
                p50_ms=round(p50, 3),
                p95_ms=round(p95, 3),
                timeout_rate=round(timeouts / n, 4),
                error_rate=round(errors / n, 4),
                labelled=labelled,
                hit_rate=round(hits / labelled, 4) if labelled else None,
            )
            for eid, n, p50, p95, timeouts, errors, labelled, hits in self._read(sql, params)
        ]

    def _rows(self, table: str, column: str, value: str | None, order: str) -> list[dict[str, Any]]:
        sql, params = select_sql(table), []
        if value is not None:
            sql, params = f"{sql} WHERE {column} = {placeholder(self.dialect)}", [value]
        cols = TABLES[table][1]
        out = []
        for r in self._read(f"{sql} ORDER BY {order}", params):
            d = dict(zip(cols, r, strict=True))
            out.append({c: (json_value(v) if c in JSON_COLUMNS and v is not None else v) for c, v in d.items()})
        return out

    def list_feedback(self, receipt_id: str | None = None) -> list[Feedback]:
        return [
            Feedback(
                **{
                    **r,
                    "useful_item_ids": tuple(r["useful_item_ids"] or ()),
                    "not_useful_item_ids": tuple(r["not_useful_item_ids"] or ()),
                }
            )
            for r in self._rows("feedback", "receipt_id", receipt_id, "created_at, feedback_id")
        ]

    def get_config_snapshot(self, config_version: str) -> ConfigSnapshot | None:
        rows = self._rows("config_snapshots", "config_version", config_version, "config_version")
        return ConfigSnapshot(**rows[0]) if rows else None

    def list_config_snapshots(self) -> list[ConfigSnapshot]:
        rows = self._rows("config_snapshots", "config_version", None, "created_at, config_version")
        return [ConfigSnapshot(**r) for r in rows]

    def list_experiments(self, suite: str | None = None) -> list[Experiment]:
        return [Experiment(**r) for r in self._rows("experiments", "suite", suite, "created_at, experiment_id")]

    def list_hints(self, project: str | None = None) -> list[Hint]:
        rows = self._rows("hints", "project", project, "created_at, hint_id")
        return [Hint(**{**r, "keys": tuple(r["keys"] or ()), "weight": r["weight"] or 0.0}) for r in rows]

    def get_bandit(self, arm_id: str) -> BanditArm | None:
        rows = self._rows("bandit_state", "arm_id", arm_id, "arm_id")
        return BanditArm(**rows[0]) if rows else None

    def list_bandit(self, task_class: str | None = None) -> list[BanditArm]:
        return [BanditArm(**r) for r in self._rows("bandit_state", "task_class", task_class, "arm_id")]
