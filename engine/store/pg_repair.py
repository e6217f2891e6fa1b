"""Rebuilding the PostgreSQL store's tables from ``record_log``, its log of record.

One transaction under the exclusive advisory lock (writers hold it shared, so none lands
mid-rebuild): rows only the old tables hold are salvaged into the log (never re-signed: a
salvaged receipt verifies only if it was genuine), the tables are dropped and re-created, and the
log is replayed in order with the same first-copy-wins / newest-wins rules as every write.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg

from .records import RepairReport
from .schema import PG_DDL, TABLES, insert_sql, row_values
from .spool import EPHEMERAL

Conn = psycopg.Connection[tuple[Any, ...]]
CHUNK = 1000


def salvage(con: Conn) -> int:
    """Copy rows only the queryable tables hold (no log record has their key) into the log."""
    known: dict[str, set[Any]] = {t: set() for t in TABLES}
    for table, row in con.execute("SELECT tbl, row FROM record_log").fetchall():
        if table in known and isinstance(row, dict):
            key = row.get("body", {}).get("receipt_id") if table == "receipts" else row.get(TABLES[table][0])
            known[table].add(key)
    found: list[tuple[str, str]] = []
    for table, (key_col, cols) in TABLES.items():
        if table in EPHEMERAL:
            continue
        try:
            with con.transaction():  # a savepoint: a table the damage took must not abort the repair
                rows = con.execute(f"SELECT {', '.join(cols)} FROM {table}").fetchall()
        except psycopg.errors.UndefinedTable:
            continue
        for r in rows:
            d = dict(zip(cols, r, strict=True))
            if d[key_col] in known[table]:
                continue
            record = {"body": d["body"]} if table == "receipts" else d
            found.append((table, json.dumps(record, ensure_ascii=False)))
    if found:
        with con.cursor() as cur:
            cur.executemany("INSERT INTO record_log (tbl, row) VALUES (%s, %s)", found)
    return len(found)


def _apply(con: Conn, table: str, rows: list[list[Any]]) -> None:
    if rows:
        with con.cursor() as cur:
            cur.executemany(insert_sql(table, 1, "%s"), rows)


def rebuild(con: Conn, log_ddl: str, lock_key: int) -> RepairReport:
    with con.transaction():
        con.execute("SELECT pg_advisory_xact_lock(%s)", [lock_key])
        con.execute(log_ddl)
        salvaged = salvage(con)
        for table in TABLES:
            con.execute(f"DROP TABLE IF EXISTS {table}")
        con.execute(PG_DDL)
        pending: list[list[Any]] = []
        current = ""
        with con.cursor(name="engine_replay") as cur:  # server-side: the log need not fit in memory
            cur.itersize = CHUNK
            cur.execute("SELECT tbl, row FROM record_log ORDER BY seq")
            for table, row in cur:
                values = row_values(table, row) if table in TABLES and isinstance(row, dict) else None
                if values is None:
                    continue
                if table != current or len(pending) >= CHUNK:
                    _apply(con, current, pending)
                    pending, current = [], table
                pending.append(values)
        _apply(con, current, pending)
        tables = {t: int((con.execute(f"SELECT count(*) FROM {t}").fetchone() or (0,))[0]) for t in TABLES}
        row = con.execute(
            "SELECT count(DISTINCT row -> 'body' ->> 'receipt_id') FROM record_log WHERE tbl = 'receipts'"
        ).fetchone()
    return RepairReport(tables=tables, log_receipts=int(row[0]) if row else 0, salvaged=salvaged)
