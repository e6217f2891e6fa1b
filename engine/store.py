"""The DuckDB store, safe for several router processes on one data dir (docs/adr/0001-store.md).

DuckDB admits one writer process per file, and opening it costs ~15–50 ms. So:

* **Write path (hot):** a row is appended as one JSON line to this process's own spool file
  ``<data>/spool/p<pid>_<nonce>_<host>.jsonl`` and fsync'ed. That is durable before the answer
  returns, takes ~1 ms, and never contends with another process (each owns its file).
* **Ingest (off the hot path):** under an exclusive ``flock`` on ``store.lock``, spool lines past
  the last ingested byte offset go into DuckDB with ``INSERT OR IGNORE`` on the row's primary
  key, and the offset is recorded in the same transaction. Re-ingesting is harmless, so a crash
  between the two loses nothing and duplicates nothing. Fully ingested files of dead processes
  are deleted.
* **Read:** ingest first (so every reader sees every durable row), then query.

Tables: receipts, tool_benchmark_events, experiments, cache, feedback, hints, bandit_state.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb

from .errors import ReceiptError

SCHEMA = """
CREATE TABLE IF NOT EXISTS receipts (
  receipt_id VARCHAR PRIMARY KEY, created_at VARCHAR, pipeline VARCHAR, config_version VARCHAR,
  request_hash VARCHAR, class VARCHAR, result_count INTEGER, status VARCHAR, body JSON);
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
  session_id VARCHAR, created_at VARCHAR);
CREATE TABLE IF NOT EXISTS hints (
  hint_id VARCHAR PRIMARY KEY, project VARCHAR, path VARCHAR, symbol VARCHAR, source VARCHAR, created_at VARCHAR);
CREATE TABLE IF NOT EXISTS bandit_state (
  arm_id VARCHAR PRIMARY KEY, task_class VARCHAR, expert_id VARCHAR, pulls INTEGER, reward DOUBLE,
  updated_at VARCHAR);
CREATE TABLE IF NOT EXISTS spool_offsets (file VARCHAR PRIMARY KEY, offset_bytes BIGINT);
"""

#: table → primary key column; the spool carries {"table": ..., "row": {...}}
TABLES = {
    "receipts": "receipt_id",
    "tool_benchmark_events": "event_id",
    "experiments": "experiment_id",
    "cache": "cache_key",
    "feedback": "feedback_id",
    "hints": "hint_id",
    "bandit_state": "arm_id",
}
_JSON_COLUMNS = {"body", "metrics", "response", "useful_item_ids"}
# Upserts: these tables keep the newest row per key instead of the first.
_REPLACE = {"cache", "bandit_state"}


class Store:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.db_path = data_dir / "engine.duckdb"
        self.spool_dir = data_dir / "spool"
        self._lock_path = data_dir / "store.lock"
        self._spool_path: Path | None = None
        self._spool_fh: Any = None
        self._spool_pid = -1
        self._mutex = threading.Lock()

    # ------------------------------------------------------------------ write path
    def _spool(self) -> Any:
        if self._spool_fh is None or self._spool_pid != os.getpid():
            self.spool_dir.mkdir(parents=True, exist_ok=True)
            name = f"p{os.getpid()}_{secrets.token_hex(4)}_{socket.gethostname()}.jsonl"
            self._spool_path = self.spool_dir / name
            self._spool_fh = open(self._spool_path, "ab", buffering=0)  # noqa: SIM115 - held for the process lifetime
            self._spool_pid = os.getpid()
        return self._spool_fh

    def append(self, table: str, row: dict[str, Any], *, durable: bool = True) -> None:
        """Durably record one row (receipts need ``durable``; events and cache may skip fsync)."""
        if table not in TABLES:
            raise ValueError(f"unknown table {table!r}")
        line = (json.dumps({"table": table, "row": row}, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
        try:
            with self._mutex:
                fh = self._spool()
                fh.write(line)
                if durable:
                    os.fsync(fh.fileno())
        except OSError as exc:
            raise ReceiptError(f"cannot write to the store spool {self.spool_dir}: {exc}") from exc

    # ------------------------------------------------------------------ ingest
    @contextlib.contextmanager
    def _locked(self, exclusive: bool, timeout_s: float) -> Iterator[bool]:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self._lock_path, "a") as fh:
            mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    fcntl.flock(fh, mode | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        yield False
                        return
                    time.sleep(0.005)
            try:
                yield True
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _connect(self, read_only: bool = False) -> duckdb.DuckDBPyConnection:
        if read_only and self.db_path.exists():
            return duckdb.connect(str(self.db_path), read_only=True)
        con = duckdb.connect(str(self.db_path))
        con.execute(SCHEMA)
        return con

    def ingest(self, timeout_s: float = 30.0) -> int:
        """Move every spooled row into DuckDB. Returns rows read; 0 if the lock was busy past timeout."""
        if self._spool_fh is not None:
            with self._mutex:
                os.fsync(self._spool_fh.fileno())
        with self._locked(True, timeout_s) as got:
            if not got:
                return 0
            return self._ingest_locked()

    def _ingest_locked(self) -> int:
        files = sorted(self.spool_dir.glob("*.jsonl")) if self.spool_dir.exists() else []
        con = self._connect()
        total = 0
        try:
            offsets = dict(con.execute("SELECT file, offset_bytes FROM spool_offsets").fetchall())
            for f in files:
                start = offsets.get(f.name, 0)
                with open(f, "rb") as fh:
                    fh.seek(start)
                    data = fh.read()
                end = start + data.rfind(b"\n") + 1  # only whole lines; a line being written waits
                rows: dict[str, list[dict[str, Any]]] = {}
                for raw in data[: end - start].splitlines():
                    if not raw.strip():
                        continue
                    try:
                        rec = json.loads(raw)
                    except ValueError:
                        continue  # a torn line cannot exist past a newline; skip defensively
                    rows.setdefault(rec["table"], []).append(rec["row"])
                con.execute("BEGIN TRANSACTION")
                for table, batch in rows.items():
                    self._insert(con, table, batch)
                    total += len(batch)
                con.execute("INSERT OR REPLACE INTO spool_offsets VALUES (?, ?)", [f.name, end])
                con.execute("COMMIT")
                if end == f.stat().st_size and f != self._spool_path and not _owner_alive(f.name):
                    f.unlink(missing_ok=True)
                    con.execute("DELETE FROM spool_offsets WHERE file = ?", [f.name])
        finally:
            con.close()
        return total

    @staticmethod
    def _insert(con: duckdb.DuckDBPyConnection, table: str, batch: list[dict[str, Any]]) -> None:
        cols = [c[0] for c in con.execute(f"DESCRIBE {table}").fetchall()]
        verb = "INSERT OR REPLACE" if table in _REPLACE else "INSERT OR IGNORE"
        sql = f"{verb} INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})"
        values = [
            [
                json.dumps(r.get(c), ensure_ascii=False) if c in _JSON_COLUMNS and r.get(c) is not None else r.get(c)
                for c in cols
            ]
            for r in batch
        ]
        # last write wins within a batch for upsert tables; first wins otherwise (primary key)
        con.executemany(sql, values)

    # ------------------------------------------------------------------ read path
    def query(self, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
        self.ingest()
        with self._locked(False, 30.0) as got:
            if not got:
                raise ReceiptError("the store is busy; try again")
            con = self._connect(read_only=True)
            try:
                return con.execute(sql, params or []).fetchall()
            finally:
                con.close()

    def lookup_cache(self, key: str, timeout_s: float = 0.05) -> dict[str, Any] | None:
        """A fresh cache row, or None. Never waits long: a busy store is a cache miss."""
        if not self.db_path.exists():
            return None
        with self._locked(False, timeout_s) as got:
            if not got:
                return None
            try:
                con = duckdb.connect(str(self.db_path), read_only=True)
            except duckdb.Error:
                return None
            try:
                row = con.execute(
                    "SELECT response, negative FROM cache WHERE cache_key = ? AND expires_at > ?", [key, time.time()]
                ).fetchone()
            except duckdb.Error:
                row = None
            finally:
                con.close()
        if row is None:
            return None
        return {"response": json.loads(row[0]), "negative": bool(row[1])}

    def close(self) -> None:
        if self._spool_fh is not None:
            with contextlib.suppress(OSError):
                self._spool_fh.close()
            self._spool_fh = None


def _owner_alive(spool_name: str) -> bool:
    try:
        pid_part, _nonce, host = spool_name.removesuffix(".jsonl").split("_", 2)
        pid = int(pid_part[1:])
    except ValueError:
        return False
    if host != socket.gethostname():
        return True  # another machine's file: not ours to judge
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
