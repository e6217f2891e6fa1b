"""Query text for the DuckDB store's filtered reads (filters are always bound parameters)."""

from __future__ import annotations

from typing import Any

from .records import ERROR_STATUSES, PIPELINE_SEP, EventQuery, ReceiptQuery, timestamp


def _where(clauses: list[str]) -> str:
    return f" WHERE {' AND '.join(clauses)}" if clauses else ""


def receipt_where(q: ReceiptQuery) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    for column, value in (("class", q.klass), ("status", q.status), ("config_version", q.config_version)):
        if value is not None:
            clauses.append(f"{column} = ?")
            params.append(value)
    if q.pipeline is not None:
        clauses.append("(pipeline = ? OR list_contains(string_split(pipeline, ?), ?))")
        params += [q.pipeline, PIPELINE_SEP, q.pipeline]
    _window(clauses, params, q.since, q.until)
    return _where(clauses), params


def event_where(q: EventQuery) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    for column, value in (
        ("arm", q.arm),
        ("expert_id", q.expert_id),
        ("config_version", q.config_version),
        ("run_id", q.run_id),
    ):
        if value is not None:
            clauses.append(f"{column} = ?")
            params.append(value)
    _window(clauses, params, q.since, q.until)
    return _where(clauses), params


def _window(clauses: list[str], params: list[Any], since: Any, until: Any) -> None:
    if since is not None:
        clauses.append("created_at >= ?")
        params.append(timestamp(since))
    if until is not None:
        clauses.append("created_at < ?")
        params.append(timestamp(until))


def stats_sql(q: EventQuery) -> tuple[str, list[Any]]:
    """Per expert: count, p50, p95, timeouts, errors, labelled, hits (rates are divided in Python,
    the same way the in-memory twin does, so both backends round alike)."""
    where, params = event_where(q)
    errors = ", ".join("?" for _ in ERROR_STATUSES)
    sql = (
        "SELECT expert_id, count(*), quantile_cont(latency_ms, 0.5), quantile_cont(latency_ms, 0.95), "
        "count(*) FILTER (WHERE status = 'timeout'), "
        f"count(*) FILTER (WHERE status IN ({errors})), "
        "count(hit), count(*) FILTER (WHERE hit) "
        f"FROM tool_benchmark_events{where} GROUP BY expert_id ORDER BY expert_id"
    )
    return sql, [*ERROR_STATUSES, *params]


def mix_sql(q: ReceiptQuery) -> tuple[str, list[Any]]:
    """Receipts by class, status and whether the cache answered them (from the signed body)."""
    where, params = receipt_where(q)
    sql = (
        "SELECT class, status, coalesce(json_extract_string(body, '$.cache.hit') = 'true', false) AS hit, "
        f"count(*) FROM receipts{where} GROUP BY ALL"
    )
    return sql, params
