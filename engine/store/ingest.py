"""Moving the log of record into DuckDB: ingest, compaction, salvage and rebuild.

Every function here runs under the store's exclusive ``flock`` (the caller holds it).
Idempotence is the whole crash story: each file's ingested byte offset is written in the same
transaction as its rows, and the first copy of a key wins, so any step can be repeated after a
crash (even ``kill -9`` mid-transaction) without losing or duplicating a record.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb

from ..datadir import fsync_dir
from ..errors import StoreError
from .records import RepairReport
from .schema import DDL, JSON_COLUMNS, MIGRATIONS, NEWEST_WINS, SCHEMA_VERSION, TABLES, insert_sql, row_values
from .spool import (
    EPHEMERAL,
    Record,
    iter_log,
    owner_alive,
    read_segment,
    read_spool,
    segment_files,
    spool_files,
    write_segment,
)

#: dead writers' spool files are folded into one segment once this many wait (docs/adr/0005)
COMPACT_AT = 16
#: segments under this size are merged once MERGE_AT of them exist (size-tiered: big ones stay)
SEGMENT_TARGET = 8 << 20
MERGE_AT = 16
#: rows per INSERT statement: one multi-row VALUES is ~20× faster than executemany (docs/adr/0005)
BATCH_ROWS = 200


def prepare(con: duckdb.DuckDBPyConnection, spool_dir: Path, log_dir: Path) -> None:
    """Create or migrate the schema. A store from before the log of record (schema 1 deleted
    ingested spools) first has its rows copied into a log segment, so a later repair keeps them."""
    con.execute(DDL)
    row = con.execute("SELECT value FROM store_meta WHERE key = 'schema_version'").fetchone()
    if row is not None and row[0] == SCHEMA_VERSION:
        return
    if row is not None and _newer(str(row[0])):
        # migrating "back" stamped a newer engine's store as this version and left its tables as
        # they were: refuse, and leave the file alone
        raise StoreError(
            f"the store was written by a newer engine (schema {row[0]}; this engine has {SCHEMA_VERSION})",
            fix="upgrade the engine, or point ENGINE_HOME at another data dir",
            state="newer",
        )
    if row is None and con.execute("SELECT count(*) FROM receipts").fetchone() != (0,):
        salvage(con, spool_dir, log_dir)
    for stmt in MIGRATIONS:
        con.execute(stmt)
    con.execute("INSERT OR REPLACE INTO store_meta VALUES ('schema_version', ?)", [SCHEMA_VERSION])


def _newer(version: str) -> bool:
    try:
        return int(version) > int(SCHEMA_VERSION)
    except ValueError:
        return False  # not a number: an old store's marker, migrated as before


def _insert(con: duckdb.DuckDBPyConnection, records: list[Record]) -> int:
    """Insert records, one key once per statement: the first copy of a key, or the newest for
    upsert tables, as the ON CONFLICT clause would across statements."""
    by_table: dict[str, dict[Any, list[Any]]] = {}
    n = 0
    for table, row in records:
        values = row_values(table, row) if table in TABLES else None
        if values is None:
            continue
        n += 1
        key_col, cols = TABLES[table]
        batch = by_table.setdefault(table, {})
        key = values[cols.index(key_col)]
        ts = NEWEST_WINS.get(table)
        if key not in batch or (
            ts is not None and (values[cols.index(ts)] or "") >= (batch[key][cols.index(ts)] or "")
        ):
            batch[key] = values
    for table, batch in by_table.items():
        rows = list(batch.values())
        for i in range(0, len(rows), BATCH_ROWS):
            chunk = rows[i : i + BATCH_ROWS]
            con.execute(insert_sql(table, len(chunk)), [v for r in chunk for v in r])
    return n


def _commit(con: duckdb.DuckDBPyConnection, records: list[Record], done: dict[str, int], gone: list[str]) -> int:
    """Rows and the offsets that say they are in, in one transaction."""
    con.execute("BEGIN TRANSACTION")
    try:
        n = _insert(con, records)
        for name in gone:
            con.execute("DELETE FROM spool_offsets WHERE file = ?", [name])
        for name, offset in done.items():
            con.execute("INSERT OR REPLACE INTO spool_offsets VALUES (?, ?)", [name, offset])
        con.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(duckdb.Error):
            con.execute("ROLLBACK")
        raise
    return n


def ingest(
    con: duckdb.DuckDBPyConnection, spool_dir: Path, log_dir: Path, *, own: Path | None, compact: bool = True
) -> int:
    """Bring every segment and every spool line past its offset in; then compact. Returns rows read."""
    offsets: dict[str, int] = dict(con.execute("SELECT file, offset_bytes FROM spool_offsets").fetchall())
    total = 0
    for seg in segment_files(log_dir):
        if seg.name not in offsets:
            records, _ = read_segment(seg)
            total += _commit(con, records, {seg.name: seg.stat().st_size}, [])
            offsets[seg.name] = seg.stat().st_size
    for f in spool_files(spool_dir):
        start = offsets.get(f.name, 0)
        try:
            if f.stat().st_size <= start:
                continue
            records, end, _ = read_spool(f, start)
        except FileNotFoundError:  # compacted by a repair we cannot see: it holds the lock, not us
            continue
        if end > start:
            total += _commit(con, records, {f.name: end}, [])
            offsets[f.name] = end
    if compact:
        _compact(con, spool_dir, log_dir, offsets, own)
    return total


def _compact(
    con: duckdb.DuckDBPyConnection, spool_dir: Path, log_dir: Path, offsets: dict[str, int], own: Path | None
) -> None:
    dead = []
    for f in spool_files(spool_dir):
        if f == own or owner_alive(f.name):
            continue
        # the owner is gone, so the file is final: a torn last line will never be completed
        if read_spool(f, offsets.get(f.name, 0))[1] == offsets.get(f.name, 0):
            dead.append(f)
    if len(dead) >= COMPACT_AT:
        seg = write_segment(log_dir, [r for f in dead for r in read_spool(f)[0]])
        _commit(con, [], {seg.name: seg.stat().st_size}, [f.name for f in dead])
        _unlink(dead, spool_dir)
    small = [s for s in segment_files(log_dir) if s.stat().st_size < SEGMENT_TARGET]
    if len(small) >= MERGE_AT:
        seg = write_segment(log_dir, [r for s in small for r in read_segment(s)[0]])
        _commit(con, [], {seg.name: seg.stat().st_size}, [s.name for s in small])
        _unlink(small, log_dir)
    present = {f.name for f in (*spool_files(spool_dir), *segment_files(log_dir))}
    stale = [name for name in offsets if name not in present]
    if stale:
        _commit(con, [], {}, stale)


def _unlink(files: list[Path], folder: Path) -> None:
    for f in files:
        f.unlink(missing_ok=True)
    fsync_dir(folder)


def _key(table: str, row: dict[str, Any]) -> Any:
    if table == "receipts":
        body = row.get("body")
        return body.get("receipt_id") if isinstance(body, dict) else row.get("receipt_id")
    return row.get(TABLES[table][0])


def logged_receipts(spool_dir: Path, log_dir: Path) -> Iterator[dict[str, Any]]:
    for table, row in iter_log(spool_dir, log_dir):
        if table == "receipts" and isinstance(row.get("body"), dict):
            yield row["body"]


def salvage(old: duckdb.DuckDBPyConnection, spool_dir: Path, log_dir: Path) -> int:
    """Copy rows only ``old`` holds (none of the log has their key) into a new log segment.
    Nothing is re-signed: a salvaged receipt verifies only if it was genuine."""
    known: dict[str, set[Any]] = {t: set() for t in TABLES}
    for table, row in iter_log(spool_dir, log_dir):
        if table in known:
            known[table].add(_key(table, row))
    records: list[Record] = []
    for table in TABLES:
        if table in EPHEMERAL:
            continue
        try:
            cur = old.execute(f"SELECT * FROM {table}")
            names = [d[0] for d in cur.description or ()]
            rows = cur.fetchall()
        except duckdb.Error:
            continue  # a table the damage took: nothing to read back
        for r in rows:
            d = dict(zip(names, r, strict=True))
            for c in JSON_COLUMNS & d.keys():
                with contextlib.suppress(ValueError, TypeError):
                    d[c] = json.loads(d[c]) if isinstance(d[c], str) else d[c]
            row = {"body": d.get("body")} if table == "receipts" else d
            if _key(table, row) not in known[table]:
                records.append((table, row))
    if records:
        write_segment(log_dir, records)
    return len(records)


def rebuild(
    db_path: Path,
    spool_dir: Path,
    log_dir: Path,
    connect: Callable[[Path], duckdb.DuckDBPyConnection],
    private: Callable[[Path], None],
) -> RepairReport:
    """Build a fresh DuckDB file from the log beside the old one, then swap it in; the old file
    is moved aside (``engine.duckdb.damaged-<time>`` or ``.replaced-<time>``), never deleted."""
    salvaged, state = 0, "replaced"
    if db_path.exists():
        try:
            old = duckdb.connect(str(db_path), read_only=True)
            try:
                salvaged = salvage(old, spool_dir, log_dir)
            finally:
                old.close()
        except duckdb.Error:
            state = "damaged"
    tmp = db_path.with_name(db_path.name + ".rebuild")
    for p in (tmp, tmp.with_name(tmp.name + ".wal")):
        p.unlink(missing_ok=True)
    try:
        con = connect(tmp)
        try:
            ingest(con, spool_dir, log_dir, own=None, compact=False)
            tables = {t: int((con.execute(f"SELECT count(*) FROM {t}").fetchone() or (0,))[0]) for t in TABLES}
        finally:
            con.close()
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f"-{secrets.token_hex(2)}"
        moved = []
        for p in (db_path, db_path.with_name(db_path.name + ".wal")):
            if p.exists():
                dst = p.with_name(f"{p.name}.{state}-{stamp}")
                os.replace(p, dst)
                moved.append(str(dst))
    except BaseException:
        # a failed repair (the file system refused, a full disk) leaves no half-built copy behind
        for p in (tmp, tmp.with_name(tmp.name + ".wal")):
            with contextlib.suppress(OSError):
                p.unlink(missing_ok=True)
        raise
    os.replace(tmp, db_path)
    tmp_wal = tmp.with_name(tmp.name + ".wal")
    if tmp_wal.exists():
        os.replace(tmp_wal, db_path.with_name(db_path.name + ".wal"))
    fsync_dir(db_path.parent)
    private(db_path)
    ids = {r.get("receipt_id") for r in logged_receipts(spool_dir, log_dir)}
    return RepairReport(tables=tables, log_receipts=len(ids), salvaged=salvaged, moved_aside=tuple(moved))
