"""``engine store export --parquet DIR``: every table of any store as Parquet files, for analysis in
any engine (DuckDB, pandas, Spark, PostgreSQL's ``parquet_fdw``…).

Read through the store port only, so it works the same for DuckDB, PostgreSQL and the in-memory
store; written by DuckDB (already a dependency: no pyarrow). JSON columns (a receipt's body,
metrics, feedback ids, snapshot content) are JSON text. The cache is derived data and is not
exported.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import duckdb

from .port import Store
from .records import RECEIPT_COLUMNS, EventQuery
from .schema import JSON_COLUMNS, TABLES

#: the DuckDB type of each non-text column (everything else is VARCHAR; JSON columns are text)
_TYPES = {
    "result_count": "INTEGER",
    "seq": "BIGINT",
    "latency_ms": "DOUBLE",
    "hit": "BOOLEAN",
    "pulls": "INTEGER",
    "reward": "DOUBLE",
}


def _rows(store: Store, table: str) -> Iterator[dict[str, Any]]:
    if table == "receipts":
        for s in store.stored_receipts():
            yield {**{c: s.columns.get(c) for c in RECEIPT_COLUMNS}, "body": s.body}
        return
    readers: dict[str, Callable[[], Iterable[Any]]] = {
        "tool_benchmark_events": lambda: store.list_events(EventQuery()),
        "experiments": store.list_experiments,
        "feedback": store.list_feedback,
        "config_snapshots": store.list_config_snapshots,
        "hints": store.list_hints,
        "bandit_state": store.list_bandit,
    }
    for r in readers[table]():
        yield r.to_dict()


def export_parquet(store: Store, out_dir: Path) -> dict[str, int]:
    """Write ``<out_dir>/<table>.parquet`` for every table but the cache; returns rows per table."""
    out_dir.mkdir(parents=True, exist_ok=True)
    counts: dict[str, int] = {}
    con = duckdb.connect()
    try:
        for table, (_key, cols) in TABLES.items():
            if table == "cache":
                continue
            columns = ", ".join(f"'{c}': '{_TYPES.get(c, 'VARCHAR')}'" for c in cols)
            fd, tmp = tempfile.mkstemp(prefix=f".{table}-", suffix=".jsonl", dir=out_dir)
            n = 0
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    for row in _rows(store, table):
                        flat = {
                            c: json.dumps(row.get(c), ensure_ascii=False)
                            if c in JSON_COLUMNS and row.get(c) is not None
                            else row.get(c)
                            for c in cols
                        }
                        fh.write(json.dumps(flat, ensure_ascii=False) + "\n")
                        n += 1
                target = (out_dir / f"{table}.parquet").as_posix().replace("'", "''")  # a quoted SQL literal
                con.execute(
                    f"COPY (SELECT {', '.join(cols)} FROM read_json(?, format = 'newline_delimited', "
                    f"columns = {{{columns}}})) TO '{target}' (FORMAT parquet)",
                    [tmp],
                )
            finally:
                os.unlink(tmp)
            counts[table] = n
    finally:
        con.close()
    return counts
