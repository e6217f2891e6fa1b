"""The DuckDB schema and the columns of each table (DESIGN §8). SQL lives in this package only."""

from __future__ import annotations

import json
from typing import Any

from .records import RECEIPT_COLUMNS, receipt_columns

# 2: receipts carry their writer chain (writer, seq, prev_hash); 3: config snapshots, not-useful feedback;
# 4: hints carry their question keys, class, expert, file content hash and config version (docs/adr/0017)
SCHEMA_VERSION = "4"

DDL = """
CREATE TABLE IF NOT EXISTS receipts (
  receipt_id VARCHAR PRIMARY KEY, created_at VARCHAR, pipeline VARCHAR, config_version VARCHAR,
  request_hash VARCHAR, class VARCHAR, result_count INTEGER, status VARCHAR, writer VARCHAR, seq BIGINT,
  prev_hash VARCHAR, body JSON);
CREATE TABLE IF NOT EXISTS tool_benchmark_events (
  event_id VARCHAR PRIMARY KEY, run_id VARCHAR, expert_id VARCHAR, arm VARCHAR, task_class VARCHAR,
  question_hash VARCHAR, latency_ms DOUBLE, result_count INTEGER, precision_class VARCHAR, status VARCHAR,
  hit BOOLEAN, config_version VARCHAR, created_at VARCHAR);
CREATE TABLE IF NOT EXISTS experiments (
  experiment_id VARCHAR PRIMARY KEY, suite VARCHAR, config_version VARCHAR, git_head VARCHAR,
  created_at VARCHAR, metrics JSON);
CREATE TABLE IF NOT EXISTS cache (
  cache_key VARCHAR PRIMARY KEY, created_at VARCHAR, expires_at DOUBLE, negative BOOLEAN, response JSON);
CREATE TABLE IF NOT EXISTS feedback (
  feedback_id VARCHAR PRIMARY KEY, receipt_id VARCHAR, useful_item_ids JSON, note VARCHAR,
  session_id VARCHAR, created_at VARCHAR, not_useful_item_ids JSON);
CREATE TABLE IF NOT EXISTS config_snapshots (config_version VARCHAR PRIMARY KEY, created_at VARCHAR, content JSON);
CREATE TABLE IF NOT EXISTS hints (
  hint_id VARCHAR PRIMARY KEY, project VARCHAR, path VARCHAR, symbol VARCHAR, source VARCHAR, created_at VARCHAR,
  keys JSON, klass VARCHAR, expert VARCHAR, content_hash VARCHAR, config_version VARCHAR, weight DOUBLE,
  receipt_id VARCHAR);
CREATE TABLE IF NOT EXISTS bandit_state (
  arm_id VARCHAR PRIMARY KEY, task_class VARCHAR, expert_id VARCHAR, pulls INTEGER, reward DOUBLE,
  updated_at VARCHAR);
CREATE TABLE IF NOT EXISTS spool_offsets (file VARCHAR PRIMARY KEY, offset_bytes BIGINT);
CREATE TABLE IF NOT EXISTS store_meta (key VARCHAR PRIMARY KEY, value VARCHAR);
"""
#: columns an older store lacks, added in place (schema 1 → 2 → 3)
MIGRATIONS = (
    "ALTER TABLE receipts ADD COLUMN IF NOT EXISTS writer VARCHAR",
    "ALTER TABLE receipts ADD COLUMN IF NOT EXISTS seq BIGINT",
    "ALTER TABLE receipts ADD COLUMN IF NOT EXISTS prev_hash VARCHAR",
    "ALTER TABLE feedback ADD COLUMN IF NOT EXISTS not_useful_item_ids JSON",
    "ALTER TABLE hints ADD COLUMN IF NOT EXISTS keys JSON",
    "ALTER TABLE hints ADD COLUMN IF NOT EXISTS klass VARCHAR",
    "ALTER TABLE hints ADD COLUMN IF NOT EXISTS expert VARCHAR",
    "ALTER TABLE hints ADD COLUMN IF NOT EXISTS content_hash VARCHAR",
    "ALTER TABLE hints ADD COLUMN IF NOT EXISTS config_version VARCHAR",
    "ALTER TABLE hints ADD COLUMN IF NOT EXISTS weight DOUBLE",
    "ALTER TABLE hints ADD COLUMN IF NOT EXISTS receipt_id VARCHAR",
)

#: table → (primary key, columns in insert order); a spool line names its table
TABLES: dict[str, tuple[str, tuple[str, ...]]] = {
    "receipts": ("receipt_id", (*RECEIPT_COLUMNS, "body")),
    "tool_benchmark_events": (
        "event_id",
        (
            "event_id",
            "run_id",
            "expert_id",
            "arm",
            "task_class",
            "question_hash",
            "latency_ms",
            "result_count",
            "precision_class",
            "status",
            "hit",
            "config_version",
            "created_at",
        ),
    ),
    "experiments": ("experiment_id", ("experiment_id", "suite", "config_version", "git_head", "created_at", "metrics")),
    "cache": ("cache_key", ("cache_key", "created_at", "expires_at", "negative", "response")),
    "feedback": (
        "feedback_id",
        ("feedback_id", "receipt_id", "useful_item_ids", "note", "session_id", "created_at", "not_useful_item_ids"),
    ),
    "config_snapshots": ("config_version", ("config_version", "created_at", "content")),
    "hints": (
        "hint_id",
        (
            "hint_id",
            "project",
            "path",
            "symbol",
            "source",
            "created_at",
            "keys",
            "klass",
            "expert",
            "content_hash",
            "config_version",
            "weight",
            "receipt_id",
        ),
    ),
    "bandit_state": ("arm_id", ("arm_id", "task_class", "expert_id", "pulls", "reward", "updated_at")),
}
#: the same tables in PostgreSQL: text compares bytewise (COLLATE "C") whatever the database's locale,
#: so ordering and time windows match DuckDB and the in-memory store; the spool offsets have no use there
PG_DDL = ";".join(
    stmt.replace("VARCHAR", 'TEXT COLLATE "C"').replace(" DOUBLE", " DOUBLE PRECISION")
    for stmt in DDL.split(";")
    if "spool_offsets" not in stmt
)
#: the same column additions for a PostgreSQL store created by an older engine
PG_MIGRATIONS = tuple(
    m.replace("VARCHAR", 'TEXT COLLATE "C"').replace(" DOUBLE", " DOUBLE PRECISION") for m in MIGRATIONS
)
JSON_COLUMNS = frozenset({"body", "metrics", "response", "useful_item_ids", "not_useful_item_ids", "content", "keys"})
#: upsert tables: the row with the newest value of this column wins, whatever order rows arrive in
NEWEST_WINS = {"cache": "created_at", "bandit_state": "updated_at"}


def insert_sql(table: str, rows: int = 1, placeholder: str = "?") -> str:
    key, cols = TABLES[table]
    one = f"({', '.join(placeholder for _ in cols)})"
    head = f"INSERT INTO {table} ({', '.join(cols)}) VALUES {', '.join(one for _ in range(rows))}"
    if table not in NEWEST_WINS:
        return head + " ON CONFLICT DO NOTHING"  # the first copy of a record wins: re-ingest is harmless
    ts = NEWEST_WINS[table]
    sets = ", ".join(f"{c} = excluded.{c}" for c in cols if c != key)
    return f"{head} ON CONFLICT ({key}) DO UPDATE SET {sets} WHERE excluded.{ts} >= {table}.{ts}"


def select_sql(table: str) -> str:
    return f"SELECT {', '.join(TABLES[table][1])} FROM {table}"


def row_values(table: str, row: dict[str, Any]) -> list[Any] | None:
    """A log record's column values in insert order, JSON columns as text; None for a receipt
    line without a body. Receipt columns always come from the signed body, never from beside it."""
    if table == "receipts":
        body = row.get("body")
        if not isinstance(body, dict) or not isinstance(body.get("receipt_id"), str):
            return None
        cols = receipt_columns(body)
        return [cols[c] for c in RECEIPT_COLUMNS] + [json.dumps(body, ensure_ascii=False)]
    return [
        json.dumps(row.get(c), ensure_ascii=False) if c in JSON_COLUMNS and row.get(c) is not None else row.get(c)
        for c in TABLES[table][1]
    ]
