"""The vector store on pgvector: :class:`engine.vectors.VectorStore`'s interface over one
PostgreSQL table, so many replicas (and machines) search one copy of an index (docs/scale.md).

    store = PgVectorStore(dir, model_id=embedder.model_id, url="postgresql://…")
    store.load()                        # False (and empty) if absent or made by another model
    store.add(["a", "b"], matrix)       # buffered, like the numpy store
    store.save()                        # one transaction: the buffered upserts and deletes
    store.search(query_vec, k=10)       # [("b", 0.83), ("a", 0.41)] — cosine, best first

The index's identity lives beside the semantic index's metadata, in ``<dir>/vectors.pg.json``
(table name, model id, dimension, count), written after each commit; its mtime is what the
semantic expert's reader cache keys on, as it does on ``vectors.npz``. ``search`` sees what is
committed. ``exact=True`` scans every row (the numpy store's answer); otherwise an HNSW index
(cosine) answers, with ``hnsw.ef_search`` = :attr:`ef_search` (recall measured in docs/scale.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import tempfile
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from psycopg_pool import ConnectionPool

STAMP = "vectors.pg.json"


def _literal(v: np.ndarray) -> str:
    """pgvector's text form: ``[0.1,0.2,…]`` (repr of float32 round-trips exactly)."""
    return "[" + ",".join(repr(float(x)) for x in v) + "]"


class PgVectorStore:
    """Cosine search over vectors keyed by string ids, in one pgvector table. Thread-safe."""

    def __init__(
        self, dir: str | os.PathLike[str], *, model_id: str | None = None, url: str, exact: bool = False
    ) -> None:
        self.dir = Path(dir)
        self.model_id = model_id
        self.url = url
        self.exact = exact
        self.ef_search = 100
        self._lock = threading.RLock()
        self._table: str | None = None
        self._dim: int | None = None
        self._count = 0
        self._add: dict[str, np.ndarray] = {}
        self._payload: dict[str, Any] = {}  # payloads of the buffered rows (stored as JSONB)
        self._stamp: tuple[int, int] | None = None  # the stamp file's (mtime_ns, size) last read or written
        self._remove: set[str] = set()
        self._cleared = False
        self._pool: ConnectionPool[psycopg.Connection[tuple[Any, ...]]] | None = None

    # -- introspection ------------------------------------------------------------
    @property
    def path(self) -> Path:
        return self.dir / STAMP

    def __len__(self) -> int:
        return self._count

    def __contains__(self, id: object) -> bool:
        return isinstance(id, str) and id in set(self.ids)

    @property
    def ids(self) -> list[str]:
        if self._table is None:
            return []
        with self._cursor() as con:
            return [r[0] for r in con.execute(f"SELECT id FROM {self._table} ORDER BY id").fetchall()]

    @property
    def dim(self) -> int | None:
        return self._dim

    @property
    def dirty(self) -> bool:
        return bool(self._add or self._remove or self._cleared)

    def get(self, id: str) -> np.ndarray | None:
        if id in self._add:
            return self._add[id].copy()
        if self._table is None:
            return None
        with self._cursor() as con:
            row = con.execute(f"SELECT embedding::text FROM {self._table} WHERE id = %s", [id]).fetchone()
        return None if row is None else np.asarray(json.loads(row[0]), dtype=np.float32)

    # -- mutation (buffered until save) -------------------------------------------
    def add(self, ids: Sequence[str], matrix: np.ndarray, payloads: Sequence[Any] | None = None) -> None:
        m = np.asarray(matrix, dtype=np.float32)
        if payloads is not None and len(payloads) != len(ids):
            raise ValueError(f"{len(payloads)} payloads for {len(ids)} ids")
        if m.ndim == 1 and len(ids) == 1:
            m = m[None, :]
        if m.ndim != 2 or m.shape[0] != len(ids):
            raise ValueError(f"matrix shape {m.shape} does not match {len(ids)} ids")
        if not ids:
            return
        m = m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)
        with self._lock:
            if self._dim is None:
                self._dim = int(m.shape[1])
            elif m.shape[1] != self._dim:
                raise ValueError(f"dim {m.shape[1]} != store dim {self._dim}")
            for i, (id, row) in enumerate(zip(ids, m, strict=True)):
                self._add[id] = row.astype(np.float32)
                self._payload[id] = None if payloads is None else payloads[i]
                self._remove.discard(id)

    def remove(self, ids: Iterable[str]) -> int:
        with self._lock:
            gone = set(ids)
            for id in gone:
                self._add.pop(id, None)
                self._payload.pop(id, None)
            self._remove |= gone
            return len(gone)

    def clear(self) -> None:
        with self._lock:
            self._add, self._payload, self._remove, self._cleared = {}, {}, set(), True

    def payloads(self, ids: Iterable[str]) -> dict[str, Any]:
        """The payloads stored with these ids (ids without one, or unknown, are left out)."""
        wanted = list(dict.fromkeys(ids))
        out = {i: self._payload[i] for i in wanted if self._payload.get(i) is not None}
        rest = [i for i in wanted if i not in out]
        if rest and self._table is not None:
            with self._cursor() as con:
                rows = con.execute(
                    f"SELECT id, payload::text FROM {self._table} WHERE id = ANY(%s) AND payload IS NOT NULL", [rest]
                ).fetchall()
            out.update({r[0]: json.loads(r[1]) for r in rows})
        return out

    # -- search -------------------------------------------------------------------
    def search(self, query_vec: np.ndarray, k: int = 10) -> list[tuple[str, float]]:
        q = np.asarray(query_vec, dtype=np.float32).reshape(-1)
        if self._table is None or k <= 0 or self._count == 0:
            return []
        if q.shape[0] != self._dim:
            raise ValueError(f"query dim {q.shape[0]} != store dim {self._dim}")
        norm = float(np.linalg.norm(q))
        if norm == 0.0:
            return []
        lit = _literal(q / norm)
        # exact: every row compared, ties broken by id (the numpy store's answer); else the HNSW
        # index, which can only order by the distance itself (a tie-breaker would force a scan)
        order = "embedding <=> %s::vector, id" if self.exact else "embedding <=> %s::vector"
        with self._cursor() as con, con.transaction():
            if self.exact:
                con.execute("SET LOCAL enable_indexscan = off")
            else:  # the planner would scan a small table; an index-backed store means the index
                con.execute("SET LOCAL enable_seqscan = off")
                con.execute(f"SET LOCAL hnsw.ef_search = {int(self.ef_search)}")
            rows = con.execute(
                f"SELECT id, 1 - (embedding <=> %s::vector) FROM {self._table} ORDER BY {order} LIMIT %s",
                [lit, lit, k],
            ).fetchall()
        return [(r[0], float(r[1])) for r in rows]

    # -- persistence --------------------------------------------------------------
    @contextlib.contextmanager
    def _cursor(self) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
        """A pooled autocommit connection: concurrent searches of one replica run side by side."""
        with self._lock:
            if self._pool is None:
                self._pool = ConnectionPool(
                    self.url,
                    min_size=1,
                    max_size=4,
                    open=True,
                    kwargs={"autocommit": True, "connect_timeout": 5},
                    check=ConnectionPool.check_connection,
                    name="engine-vectors",
                )
            pool = self._pool
        with pool.connection(timeout=10) as con:
            yield con

    def _read_stamp(self) -> dict[str, Any] | None:
        try:
            stamp = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        return stamp if isinstance(stamp, dict) else None

    def save(self) -> Path:
        """Apply the buffered changes in one transaction (creating the table and its HNSW index on
        first use), then write the stamp file; returns its path."""
        with self._lock:
            if self._table is None and self._dim is None:  # nothing stored yet: no table (its width is unknown)
                self._add, self._payload, self._remove, self._cleared = {}, {}, set(), False
                self._count = 0
                return self._write_stamp()
        with self._lock, self._cursor() as con:
            if self._table is None:
                self._table = f"engine_vectors_{secrets.token_hex(6)}"
            dim = self._dim or 1
            with con.transaction():
                con.execute("CREATE EXTENSION IF NOT EXISTS vector")
                con.execute(
                    f'CREATE TABLE IF NOT EXISTS {self._table} (id TEXT COLLATE "C" PRIMARY KEY, '
                    f"embedding vector({dim}) NOT NULL, payload JSONB)"
                )
                con.execute(f"ALTER TABLE {self._table} ADD COLUMN IF NOT EXISTS payload JSONB")
                if self._cleared:
                    con.execute(f"TRUNCATE {self._table}")
                if self._remove:
                    con.execute(f"DELETE FROM {self._table} WHERE id = ANY(%s)", [list(self._remove)])
                if self._add:
                    con.execute(f"DELETE FROM {self._table} WHERE id = ANY(%s)", [list(self._add)])
                    with con.cursor().copy(f"COPY {self._table} (id, embedding, payload) FROM STDIN") as cp:
                        for id, v in self._add.items():
                            payload = self._payload.get(id)
                            cp.write_row((id, _literal(v), None if payload is None else json.dumps(payload)))
                con.execute(
                    f"CREATE INDEX IF NOT EXISTS {self._table}_hnsw ON {self._table} "
                    "USING hnsw (embedding vector_cosine_ops)"
                )
                row = con.execute(f"SELECT count(*) FROM {self._table}").fetchone()
            self._count = int(row[0]) if row else 0
            self._add, self._payload, self._remove, self._cleared = {}, {}, set(), False
            return self._write_stamp()

    def _write_stamp(self) -> Path:
        self.dir.mkdir(parents=True, exist_ok=True)
        stamp = {"table": self._table, "model_id": self.model_id, "dim": self._dim, "count": self._count}
        fd, tmp = tempfile.mkstemp(prefix=".vectors-pg-", dir=self.dir)
        with os.fdopen(fd, "w") as fh:
            json.dump(stamp, fh)
        os.replace(tmp, self.path)
        self._stamp = self._stat()
        return self.path

    def _stat(self) -> tuple[int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size

    def refresh(self) -> bool:
        """Re-attach if the stamp file changed since this store last read or wrote it (one stat
        when nothing changed). Returns whether the store holds a loaded index."""
        with self._lock:
            stamp = self._stat()
            if stamp is not None and stamp == self._stamp and self._table is not None:
                return True
            return self.load()

    def load(self) -> bool:
        """Attach to the table the stamp names. False (and empty) when there is none, it was made
        for another ``model_id``, or the table is gone (the caller re-embeds)."""
        with self._lock:
            self._table, self._dim, self._count = None, None, 0
            self._add, self._payload, self._remove, self._cleared = {}, {}, set(), False
            self._stamp = self._stat()
            stamp = self._read_stamp()
            if stamp is None or (self.model_id is not None and stamp.get("model_id") != self.model_id):
                return False
            if stamp.get("table") is None:  # saved before anything was added: an empty index
                self.model_id = stamp.get("model_id")
                return True
            table = str(stamp.get("table"))
            if not table.startswith("engine_vectors_") or not table[15:].isalnum():
                return False
            with self._cursor() as con:
                if con.execute("SELECT to_regclass(%s)", [table]).fetchone() == (None,):
                    return False
                row = con.execute(f"SELECT count(*) FROM {table}").fetchone()
            self._table, self._dim = table, stamp.get("dim")
            self.model_id = stamp.get("model_id")
            self._count = int(row[0]) if row else 0
            return True

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None
