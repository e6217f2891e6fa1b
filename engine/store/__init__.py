"""The store port (:class:`Store`) and its implementations; the only package that speaks SQL.

Callers type against :class:`Store` and get one from :func:`open_store`; records are the frozen
dataclasses of :mod:`.records`. See :mod:`.port` for the promises every backend keeps and
``tests/store/store_contract.py`` for the suite that holds them to it.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import SpecError
from .duckdb_store import DuckDBStore
from .memory import MemoryStore
from .port import Store
from .records import (
    RECEIPT_COLUMNS,
    BanditArm,
    BenchmarkEvent,
    CacheEntry,
    ConfigSnapshot,
    EventQuery,
    Experiment,
    ExpertStats,
    Feedback,
    Hint,
    ReceiptMix,
    ReceiptQuery,
    ReceiptSummary,
    RepairReport,
    StoredReceipt,
    StoreHealth,
    receipt_columns,
)

#: the environment variable naming the store (a libpq URL, or ``duckdb``); beats the data dir's file
STORE_ENV = "ENGINE_STORE"
#: a data dir's store setting: one line, a libpq URL (shared by every process on that data dir)
STORE_FILE = "store.url"


def store_url(data_dir: Path) -> str | None:
    """The store this data dir uses: ``$ENGINE_STORE``, else ``<data_dir>/store.url``, else None
    (DuckDB). Not in experts.yaml: a URL may carry a password, and experts.yaml is hashed into
    every config version and snapshotted into the store."""
    value = os.environ.get(STORE_ENV, "").strip()
    if not value:
        try:
            lines = (data_dir / STORE_FILE).read_text().splitlines()
        except OSError:
            return None
        value = next((ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")), "")
    return value or None


def open_store(data_dir: Path) -> Store:
    """The store for a data dir: DuckDB + spool files by default, PostgreSQL when
    :func:`store_url` names a ``postgresql://`` URL (docs/adr/0016-postgresql.md).

    Raises:
        SpecError: the setting names no known store, or the ``postgres`` extra is missing.
    """
    url = store_url(data_dir)
    if url is None or url == "duckdb":
        return DuckDBStore(data_dir)
    if url.startswith(("postgresql://", "postgres://")):
        try:
            from .postgres_store import PostgresStore
        except ImportError as exc:
            raise SpecError(f"a PostgreSQL store needs psycopg: pip install -e '.[postgres]' ({exc})") from exc
        return PostgresStore(url)
    raise SpecError(
        f"unknown store {url[:40]!r} in ${STORE_ENV} or {data_dir / STORE_FILE}: use duckdb or postgresql://…"
    )


__all__ = [
    "RECEIPT_COLUMNS",
    "BanditArm",
    "BenchmarkEvent",
    "CacheEntry",
    "ConfigSnapshot",
    "DuckDBStore",
    "EventQuery",
    "Experiment",
    "ExpertStats",
    "Feedback",
    "Hint",
    "MemoryStore",
    "ReceiptMix",
    "ReceiptQuery",
    "ReceiptSummary",
    "RepairReport",
    "Store",
    "StoreHealth",
    "StoredReceipt",
    "open_store",
    "receipt_columns",
    "store_url",
]
