"""Query text for the stores' filtered reads (filters are always bound parameters).

One home for both SQL backends: ``dialect`` is ``duckdb`` (``?`` placeholders, DuckDB's list and
JSON functions) or ``postgres`` (``%s`` placeholders for psycopg, PostgreSQL's own functions).
Parameters come in the same order for both.
"""

from __future__ import annotations

from typing import Any, Literal

from .records import ERROR_STATUSES, PIPELINE_SEP, EventQuery, ReceiptQuery, timestamp

Dialect = Literal["duckdb", "postgres"]
#: the pipeline filter: the whole path, or one pipeline on it (params: pipeline, separator, pipeline)
_ON_PATH = {
    "duckdb": "(pipeline = ? OR list_contains(string_split(pipeline, ?), ?))",
    "postgres": "(pipeline = %s OR string_to_array(pipeline, %s) @> ARRAY[%s::text])",
}
_QUANTILE = {
    "duckdb": "quantile_cont(latency_ms, {q})",
    "postgres": "percentile_cont({q}) WITHIN GROUP (ORDER BY latency_ms)",
}
_CACHE_HIT = {
    "duckdb": "coalesce(json_extract_string(body, '$.cache.hit') = 'true', false)",
    "postgres": "coalesce((body -> 'cache' ->> 'hit') = 'true', false)",
}


def placeholder(dialect: Dialect) -> str:
    return "?" if dialect == "duckdb" else "%s"


def _where(clauses: list[str]) -> str:
    return f" WHERE {' AND '.join(clauses)}" if clauses else ""


def receipt_where(q: ReceiptQuery, dialect: Dialect = "duckdb") -> tuple[str, list[Any]]:
    ph = placeholder(dialect)
    clauses: list[str] = []
    params: list[Any] = []
    for column, value in (("class", q.klass), ("status", q.status), ("config_version", q.config_version)):
        if value is not None:
            clauses.append(f"{column} = {ph}")
            params.append(value)
    if q.pipeline is not None:
        clauses.append(_ON_PATH[dialect])
        params += [q.pipeline, PIPELINE_SEP, q.pipeline]
    _window(clauses, params, q.since, q.until, ph)
    return _where(clauses), params


def event_where(q: EventQuery, dialect: Dialect = "duckdb") -> tuple[str, list[Any]]:
    ph = placeholder(dialect)
    clauses: list[str] = []
    params: list[Any] = []
    for column, value in (
        ("arm", q.arm),
        ("expert_id", q.expert_id),
        ("config_version", q.config_version),
        ("run_id", q.run_id),
    ):
        if value is not None:
            clauses.append(f"{column} = {ph}")
            params.append(value)
    _window(clauses, params, q.since, q.until, ph)
    return _where(clauses), params


def _window(clauses: list[str], params: list[Any], since: Any, until: Any, ph: str) -> None:
    if since is not None:
        clauses.append(f"created_at >= {ph}")
        params.append(timestamp(since))
    if until is not None:
        clauses.append(f"created_at < {ph}")
        params.append(timestamp(until))


def stats_sql(q: EventQuery, dialect: Dialect = "duckdb") -> tuple[str, list[Any]]:
    """Per expert: count, p50, p95, timeouts, errors, labelled, hits (rates are divided in Python,
    the same way the in-memory twin does, so every backend rounds alike)."""
    where, params = event_where(q, dialect)
    errors = ", ".join(placeholder(dialect) for _ in ERROR_STATUSES)
    p50, p95 = (_QUANTILE[dialect].format(q=q) for q in (0.5, 0.95))
    sql = (
        f"SELECT expert_id, count(*), {p50}, {p95}, "
        "count(*) FILTER (WHERE status = 'timeout'), "
        f"count(*) FILTER (WHERE status IN ({errors})), "
        "count(hit), count(*) FILTER (WHERE hit) "
        f"FROM tool_benchmark_events{where} GROUP BY expert_id ORDER BY expert_id"
    )
    return sql, [*ERROR_STATUSES, *params]


def mix_sql(q: ReceiptQuery, dialect: Dialect = "duckdb") -> tuple[str, list[Any]]:
    """Receipts by class, status and whether the cache answered them (from the signed body)."""
    where, params = receipt_where(q, dialect)
    sql = f"SELECT class, status, {_CACHE_HIT[dialect]} AS hit, count(*) FROM receipts{where} GROUP BY 1, 2, 3"
    return sql, params
