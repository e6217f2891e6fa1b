"""The DuckDB store, safe for several router processes on one data dir (docs/adr/0001-store.md,
docs/adr/0007-receipt-chain-and-log.md).

DuckDB admits one writer process per file, and opening it costs ~15–50 ms. So:

* **Write path (hot):** a record is appended to this process's own spool file
  (:mod:`.spool`), fsync'ed for receipts and feedback. Durable before the answer returns, ~1 ms,
  never contends with another process, never reads ``engine.duckdb`` (so a damaged file cannot
  cost an answer).
* **Ingest (off the hot path, :meth:`DuckDBStore.sync`):** under an exclusive ``flock`` on
  ``store.lock``, spool lines past each file's last ingested byte offset go into DuckDB (the
  first copy of a key wins; cache and bandit rows keep the newest), and the offset is recorded in
  the same transaction: re-ingesting is harmless, so a crash between the two loses nothing and
  duplicates nothing. Spools are the log of record and are kept: those of dead writers are
  compacted into gzip segments under ``log/``.
* **Read:** ingest first (every reader sees every durable row), then query under a shared lock.
* **Damage:** a file DuckDB cannot open raises :class:`~engine.errors.StoreError` naming the
  fix; :meth:`DuckDBStore.repair` rebuilds the file from the log.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import duckdb

from ..datadir import ensure_data_dir, mode_problems
from ..errors import StoreError
from . import ingest
from .records import (
    CacheEntry,
    RepairReport,
    StoreHealth,
)
from .schema import TABLES
from .spool import SpoolWriter, encode, segment_files, spool_files
from .sql_reads import SqlReads, json_value
from .writes import RowWrites

DB_NAME = "engine.duckdb"
REPAIR_FIX = "run `engine store repair` (rebuilds engine.duckdb from the spool log; the damaged file is kept aside)"


class DuckDBStore(SqlReads, RowWrites):
    """The default :class:`~engine.store.port.Store`: spool files + one DuckDB file per data dir."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.db_path = data_dir / DB_NAME
        self.spool_dir = data_dir / "spool"
        self.log_dir = data_dir / "log"
        self._lock_path = data_dir / "store.lock"
        self._spool = SpoolWriter(self.spool_dir, before_create=lambda: ensure_data_dir(data_dir))

    # ------------------------------------------------------------------ write path
    sync_receipts = False  # written before the answer, fsync'ed after it (make_durable)

    def make_durable(self) -> None:
        self._spool.fsync()

    def _append(self, table: str, rows: Iterable[dict[str, Any]], *, durable: bool) -> None:
        self._spool.append((encode(table, r) for r in rows), durable=durable)

    def holds_data(self) -> bool:
        if self.db_path.exists() or segment_files(self.log_dir):
            return True
        for f in spool_files(self.spool_dir):
            with contextlib.suppress(FileNotFoundError):  # compacted while we looked
                if f.stat().st_size > 0:
                    return True
        return False

    # ------------------------------------------------------------------ locking and connections
    @contextlib.contextmanager
    def _locked(self, exclusive: bool, timeout_s: float) -> Iterator[bool]:
        ensure_data_dir(self.data_dir)
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    fcntl.flock(fd, mode | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        yield False
                        return
                    time.sleep(0.005)
            yield True
        finally:
            os.close(fd)  # closing drops the flock

    def _connect(self, path: Path | None = None, *, read_only: bool = False) -> duckdb.DuckDBPyConnection:
        """A connection, or StoreError naming the fix when the file is damaged or held elsewhere."""
        path = path or self.db_path
        try:
            con = duckdb.connect(str(path), read_only=read_only)
            if not read_only:
                try:
                    ingest.prepare(con, self.spool_dir, self.log_dir)
                except StoreError:
                    con.close()
                    raise
        except duckdb.Error as exc:
            raise damaged(path, exc) from exc
        finally:
            self._private(path)
        return con

    @staticmethod
    def _private(path: Path) -> None:
        """DuckDB creates its files with the process umask: narrow them to 0600."""
        for p in (path, path.with_name(path.name + ".wal")):
            with contextlib.suppress(OSError):
                if p.stat().st_mode & 0o077:
                    os.chmod(p, 0o600)

    # ------------------------------------------------------------------ ingest
    def sync(self, timeout_s: float = 30.0) -> int:
        with contextlib.suppress(StoreError):  # a read goes on; Router.flush reports make_durable's failure
            self._spool.fsync()
        if not self.holds_data():  # nothing to ingest: a read must not create an empty store
            return 0
        with self._locked(True, timeout_s) as got:
            if not got:
                return 0
            con = self._connect()
            try:
                return ingest.ingest(con, self.spool_dir, self.log_dir, own=self._spool.path)
            except duckdb.Error as exc:
                raise damaged(self.db_path, exc) from exc
            finally:
                con.close()
                self._private(self.db_path)

    # ------------------------------------------------------------------ read path
    def _read(self, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
        self.sync()
        if not self.db_path.exists():
            return []
        with self._locked(False, 30.0) as got:
            if not got:
                raise StoreError("the store is busy", fix="another engine process holds store.lock", state="busy")
            con = self._connect(read_only=True)
            try:
                return con.execute(sql, params or []).fetchall()
            except duckdb.Error as exc:
                raise damaged(self.db_path, exc) from exc
            finally:
                con.close()

    def logged_receipts(self) -> Iterator[dict[str, Any]]:
        # a shared lock: compaction (exclusive) must not move spools into a segment mid-read
        with self._locked(False, 30.0) as got:
            if not got:
                raise StoreError("the store is busy", fix="another engine process holds store.lock", state="busy")
            yield from ingest.logged_receipts(self.spool_dir, self.log_dir)

    def cache_get(self, key: str, *, now: float | None = None) -> CacheEntry | None:
        if not self.db_path.exists():
            return None
        with self._locked(False, 0.05) as got:  # a busy store is a miss, never a stall
            if not got:
                return None
            try:
                con = duckdb.connect(str(self.db_path), read_only=True)
            except duckdb.Error:
                return None  # damaged: doctor reports it; the answer must not wait for it
            try:
                row = con.execute(
                    "SELECT response, negative, created_at, expires_at FROM cache "
                    "WHERE cache_key = ? AND expires_at > ?",
                    [key, time.time() if now is None else now],
                ).fetchone()
            except duckdb.Error:
                row = None
            finally:
                con.close()
        if row is None:
            return None
        return CacheEntry(key, json_value(row[0]), bool(row[1]), row[2], row[3])

    # ------------------------------------------------------------------ upkeep
    def health(self) -> StoreHealth:
        if not self.data_dir.exists():
            return StoreHealth(True, "fresh", f"nothing stored yet ({self.data_dir} is created on first use)")
        files = [self.data_dir, self.db_path, self.spool_dir, *spool_files(self.spool_dir)]
        files += [self.log_dir, *segment_files(self.log_dir)]
        unsafe = mode_problems([f for f in files if f.exists()])
        try:
            self.sync(timeout_s=2.0)
            with self._locked(False, 0.5) as got:
                if not got:
                    return StoreHealth(
                        False, "busy", "store.lock is held by another engine process", "wait for it, or stop it"
                    )
                if not self.db_path.exists():
                    return StoreHealth(True, "fresh", "nothing stored yet")
                con = self._connect(read_only=True)
                try:
                    counts = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone() for t in TABLES}
                    # read every receipt body: a damaged block anywhere in them fails its checksum here
                    con.execute("SELECT sum(length(CAST(body AS VARCHAR))) FROM receipts").fetchone()
                except duckdb.Error as exc:
                    raise damaged(self.db_path, exc) from exc
                finally:
                    con.close()
        except StoreError as exc:
            state = str(exc.context.get("state", "damaged"))
            return StoreHealth(False, state, exc.message, exc.fix, pending_bytes=self._pending())
        receipts = int((counts["receipts"] or (0,))[0])
        if unsafe:
            return StoreHealth(False, "unsafe", "; ".join(unsafe), "chmod 600 the files, 700 the folders", receipts)
        return StoreHealth(True, "ok", f"{receipts} receipts", receipts=receipts, pending_bytes=self._pending())

    def _pending(self) -> int:
        """Bytes of spool not yet in DuckDB (best effort, for health reports)."""
        try:
            con = duckdb.connect(str(self.db_path), read_only=True)
            try:
                offsets = dict(con.execute("SELECT file, offset_bytes FROM spool_offsets").fetchall())
            finally:
                con.close()
        except duckdb.Error:
            offsets = {}
        total = 0
        for f in spool_files(self.spool_dir):
            with contextlib.suppress(OSError):
                total += max(0, f.stat().st_size - int(offsets.get(f.name, 0)))
        return total

    def repair(self) -> RepairReport:
        with self._locked(True, 60.0) as got:
            if not got:
                raise StoreError("the store is busy", fix="another engine process holds store.lock", state="busy")
            return ingest.rebuild(self.db_path, self.spool_dir, self.log_dir, self._connect, self._private)

    def close(self) -> None:
        with contextlib.suppress(StoreError):  # Router.flush/aclose report it; a bare close still tries
            self._spool.fsync()
        self._spool.close()


def damaged(path: Path, exc: BaseException) -> StoreError:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if re.search(r"\block\b", text, re.IGNORECASE):  # DuckDB's own file lock, held by another program
        return StoreError(f"{path.name} is locked: {text}", fix="close the other program holding it", state="busy")
    if re.search(r"permission denied|operation not permitted|read-only file system", text, re.IGNORECASE):
        # the file is fine, the file system says no (mode, owner, `chattr +i`): a repair cannot help
        return StoreError(
            f"{path} cannot be opened for writing: {text}",
            fix="check the file's owner, mode and attributes (lsattr) and the file system",
            path=str(path),
            state="permission",
        )
    return StoreError(f"{path.name} is damaged: {text}", fix=REPAIR_FIX, path=str(path), state="damaged")
