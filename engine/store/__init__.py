"""The store port (:class:`Store`) and its implementations; the only package that speaks SQL.

Callers type against :class:`Store` and get one from :func:`open_store`; records are the frozen
dataclasses of :mod:`.records`. See :mod:`.port` for the promises every backend keeps and
``tests/store/store_contract.py`` for the suite that holds them to it.
"""

from __future__ import annotations

from pathlib import Path

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


def open_store(data_dir: Path) -> Store:
    """The default store for a data dir (DuckDB + spool files)."""
    return DuckDBStore(data_dir)


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
]
