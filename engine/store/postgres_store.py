"""The PostgreSQL store: one server shared by many router replicas (docs/adr/0016-postgresql.md).

Chosen with ``ENGINE_STORE=postgresql://…`` or a ``store.url`` file in the data dir
(:func:`engine.store.open_store`); needs the ``postgres`` extra (psycopg 3 + its pool).

* **Write path:** one transaction per write appends the record to ``record_log`` (the log of
  record, insert-only) and applies it to its queryable table (the first copy of a key wins;
  cache and bandit rows keep the newest). A receipt is committed with ``synchronous_commit`` on,
  so it is durable on the server (WAL flushed) before :meth:`put_receipt` returns; events and
  cache rows commit without waiting for the flush (the port lets them be lost to a crash).
  Several replicas write at once without any lock of ours: each is its own chain writer.
* **Read path:** plain queries; every committed write of every replica is visible (``sync`` is
  a no-op). Text columns compare bytewise (``COLLATE "C"``), so ordering matches DuckDB's.
* **Damage:** a dropped or emptied table is rebuilt by :meth:`repair` from ``record_log``;
  rows only the old tables hold are salvaged into the log first. Writers take a shared advisory
  lock and repair an exclusive one, so a repair never races a write.
* **Hot path:** :meth:`cache_get` waits at most 50 ms for a connection and 200 ms for the query,
  and is a miss on any failure; :meth:`put_receipt` never reads a table.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from ..errors import StoreError
from .records import (
    CacheEntry,
    RepairReport,
    StoreHealth,
)
from .schema import PG_DDL, PG_MIGRATIONS, SCHEMA_VERSION, TABLES, insert_sql, row_values
from .spool import EPHEMERAL
from .sql_reads import SqlReads
from .writes import RowWrites

LOG_DDL = (
    "CREATE TABLE IF NOT EXISTS record_log (seq BIGSERIAL PRIMARY KEY, tbl TEXT NOT NULL, row JSON NOT NULL, "
    "logged_at TIMESTAMPTZ NOT NULL DEFAULT now())"
)
#: advisory lock key: writers hold it shared, schema set-up and repair exclusively
LOCK_KEY = 0x656E67696E65  # "engine"
REPAIR_FIX = "run `engine store repair` (rebuilds the tables from record_log, the log of record)"
REACH_FIX = "start the PostgreSQL server or fix ENGINE_STORE / <data dir>/store.url (libpq URL)"
BATCH = 500


def redact(url: str) -> str:
    """The URL without its password, for messages."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "<unparseable store URL>"
    info.pop("password", None)
    return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in info.items() if v is not None})


class PostgresStore(SqlReads, RowWrites):
    """A :class:`~engine.store.port.Store` on one PostgreSQL database (its default schema, or the
    one ``options=-csearch_path=…`` in the URL names)."""

    dialect = "postgres"

    def __init__(self, url: str, *, max_connections: int = 8) -> None:
        self.url = url
        self._max = max_connections
        self._pool: ConnectionPool[psycopg.Connection[tuple[Any, ...]]] | None = None
        self._ready = False

    # ------------------------------------------------------------------ connections
    def _get_pool(self) -> ConnectionPool[psycopg.Connection[tuple[Any, ...]]]:
        if self._pool is None:
            self._pool = ConnectionPool(
                self.url,
                min_size=1,
                max_size=self._max,
                open=False,
                check=ConnectionPool.check_connection,  # a server restart costs one failed check, not a request
                kwargs={"connect_timeout": 5},
                name="engine-store",
            )
            self._pool.open(wait=False)
        return self._pool

    @contextmanager
    def _conn(self, timeout: float = 10.0, *, schema: bool = True) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
        """A pooled connection inside one transaction (committed on success), as StoreError on failure."""
        try:
            with self._get_pool().connection(timeout=timeout) as con:
                if schema and not self._ready:
                    self._ensure_schema(con)
                yield con
        except StoreError:
            raise
        except PoolTimeout as exc:
            raise StoreError(f"cannot reach PostgreSQL at {redact(self.url)}: {exc}", fix=REACH_FIX) from exc
        except psycopg.errors.UndefinedTable as exc:
            raise StoreError(f"the store is damaged: {exc}", fix=REPAIR_FIX, state="damaged") from exc
        except psycopg.OperationalError as exc:
            raise StoreError(f"PostgreSQL at {redact(self.url)} failed: {exc}", fix=REACH_FIX) from exc
        except psycopg.Error as exc:
            raise StoreError(f"PostgreSQL error: {exc}", fix=REPAIR_FIX) from exc

    def _ensure_schema(self, con: psycopg.Connection[tuple[Any, ...]]) -> None:
        with con.transaction():
            con.execute("SELECT pg_advisory_xact_lock(%s)", [LOCK_KEY])  # concurrent CREATE IF NOT EXISTS races
            con.execute(LOG_DDL)
            con.execute(PG_DDL)
            for stmt in PG_MIGRATIONS:  # columns added since an older engine created the tables
                con.execute(stmt)
            con.execute(
                "INSERT INTO store_meta VALUES ('schema_version', %s) ON CONFLICT (key) DO UPDATE SET value = %s",
                [SCHEMA_VERSION, SCHEMA_VERSION],
            )
        self._ready = True

    # ------------------------------------------------------------------ write path
    def _append(self, table: str, rows: Iterable[dict[str, Any]], *, durable: bool) -> None:
        rows = list(rows)
        values = [v for v in (row_values(table, r) for r in rows) if v is not None]
        if not values:
            return
        with self._conn() as con, con.transaction():
            if not durable:  # the port lets these be lost to a crash: do not wait for the WAL flush
                con.execute("SET LOCAL synchronous_commit = off")
            con.execute("SELECT pg_advisory_xact_lock_shared(%s)", [LOCK_KEY])
            with con.cursor() as cur:
                if table not in EPHEMERAL:
                    logged = [(table, json.dumps(r, ensure_ascii=False)) for r in rows]
                    cur.executemany("INSERT INTO record_log (tbl, row) VALUES (%s, %s)", logged)
                cur.executemany(insert_sql(table, 1, "%s"), values)

    def holds_data(self) -> bool:
        rows = self._read("SELECT EXISTS (SELECT 1 FROM record_log)")
        return bool(rows and rows[0][0])

    # ------------------------------------------------------------------ read path
    def _read(self, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
        with self._conn() as con:
            return con.execute(sql, params or []).fetchall()

    def logged_receipts(self) -> Iterator[dict[str, Any]]:
        for (row,) in self._read("SELECT row FROM record_log WHERE tbl = 'receipts' ORDER BY seq"):
            if isinstance(row, dict) and isinstance(row.get("body"), dict):
                yield row["body"]

    def cache_get(self, key: str, *, now: float | None = None) -> CacheEntry | None:
        try:
            with self._get_pool().connection(timeout=0.05) as con:  # a busy pool is a miss, never a stall
                con.execute("SET LOCAL statement_timeout = 200")
                row = con.execute(
                    "SELECT response, negative, created_at, expires_at FROM cache WHERE cache_key = %s "
                    "AND expires_at > %s",
                    [key, time.time() if now is None else now],
                ).fetchone()
        except Exception:  # noqa: BLE001 - unreachable, damaged or slow: the answer must not wait for it
            return None
        if row is None:
            return None
        return CacheEntry(key, row[0], bool(row[1]), row[2], row[3])

    # ------------------------------------------------------------------ upkeep
    def sync(self, timeout_s: float = 30.0) -> int:
        return 0  # every write is in the tables when it returns

    def health(self) -> StoreHealth:
        try:
            with self._conn(timeout=5.0, schema=False) as con:
                if con.execute("SELECT to_regclass('record_log')").fetchone() == (None,):
                    return StoreHealth(True, "fresh", f"nothing stored yet ({redact(self.url)})")
                counts = {t: (con.execute(f"SELECT count(*) FROM {t}").fetchone() or (0,))[0] for t in TABLES}
                con.execute("SELECT sum(length(body::text)) FROM receipts").fetchone()
        except StoreError as exc:
            state = str(exc.context.get("state", "unavailable"))
            return StoreHealth(False, state, exc.message, exc.fix)
        n = int(counts["receipts"])
        return StoreHealth(True, "ok", f"{n} receipts (PostgreSQL {redact(self.url)})", receipts=n)

    def repair(self) -> RepairReport:
        from .pg_repair import rebuild

        with self._conn(timeout=60.0, schema=False) as con:
            report = rebuild(con, LOG_DDL, LOCK_KEY)
        self._ready = False  # the next write re-checks the schema
        return report

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
