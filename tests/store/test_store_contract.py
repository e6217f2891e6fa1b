"""The store contract (tests/store_contract.py) run over every implementation of the port."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.store import DuckDBStore, MemoryStore, Store
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
