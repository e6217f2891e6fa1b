"""The sqlite plumbing shared by the symbol indexes (tree-sitter tags, jedi's typed index).

Writers use one WAL-mode connection (``engine run`` keeps reading while ``engine index``
writes); readers keep one read-only connection per thread and reopen it when the file was
replaced (a data dir wiped and rebuilt).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path


def connect_writer(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=30, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


def placeholders(n: int) -> str:
    return ",".join("?" * n)


class SqliteReader:
    """Read side of one sqlite index file: one connection per thread, ``query_only``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()

    def exists(self) -> bool:
        return self.path.is_file()

    def _db(self) -> sqlite3.Connection:
        """This thread's connection, reopened when the file was replaced (a data dir wiped and rebuilt)."""
        inode = self.path.stat().st_ino  # FileNotFoundError when the index is gone: the expert is unavailable
        conn = getattr(self._local, "conn", None)
        if conn is None or getattr(self._local, "inode", None) != inode:
            if conn is not None:
                conn.close()
            conn = self._local.conn = sqlite3.connect(self.path, timeout=5, check_same_thread=False)
            conn.execute("PRAGMA query_only=ON")
            self._local.inode = inode
        return conn

    @staticmethod
    def _projects_sql(projects: Sequence[str] | None, column: str = "f.project") -> tuple[str, list[str]]:
        if projects is None:
            return "", []
        return f" AND {column} IN ({placeholders(len(projects))})", list(projects)

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
