"""The store contract (tests/store_contract.py) run over every implementation of the port."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from engine.store import DuckDBStore, MemoryStore, Store
from tests.pg_support import pg_cluster, pg_url  # noqa: F401 - fixtures
from tests.store.store_contract import StoreContract


class TestDuckDBStore(StoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Store:
        return DuckDBStore(tmp_path / "data")

    @pytest.fixture
    def reopen(self, tmp_path: Path) -> Callable[[], Store]:
        return lambda: DuckDBStore(tmp_path / "data")

    @pytest.fixture
    def damage(self) -> Callable[[Store], None]:
        def truncate(store: Store) -> None:
            assert isinstance(store, DuckDBStore)
            os.truncate(store.db_path, 0)  # `truncate -s 0 engine.duckdb`

        return truncate


class TestMemoryStore(StoreContract):
    @pytest.fixture
    def store(self) -> Store:
        return MemoryStore()

    @pytest.fixture
    def reopen(self, store: Store) -> Callable[[], Store]:
        return lambda: store

    @pytest.fixture
    def damage(self) -> Callable[[Store], None]:
        def wipe(store: Store) -> None:
            assert isinstance(store, MemoryStore)
            store.receipts.clear()

        return wipe


class TestPostgresStore(StoreContract):
    """The same contract against a real PostgreSQL server (tests/pg_support.py)."""

    @pytest.fixture
    def store(self, pg_url: str) -> Iterator[Store]:
        from engine.store.postgres_store import PostgresStore

        s = PostgresStore(pg_url)
        yield s
        s.close()

    @pytest.fixture
    def reopen(self, pg_url: str) -> Callable[[], Store]:
        from engine.store.postgres_store import PostgresStore

        return lambda: PostgresStore(pg_url)

    @pytest.fixture
    def damage(self, pg_url: str) -> Callable[[Store], None]:
        def drop(store: Store) -> None:
            import psycopg

            with psycopg.connect(pg_url, autocommit=True) as con:  # `DROP TABLE receipts` by someone
                con.execute("DROP TABLE receipts")

        return drop
