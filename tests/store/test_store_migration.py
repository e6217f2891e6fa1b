"""A store written by schema 2 (before config snapshots and not-useful feedback) opens as schema 3
with every row kept."""

from __future__ import annotations

from pathlib import Path

import duckdb

from engine.store import ConfigSnapshot, DuckDBStore, Feedback
from tests.store.store_contract import body, ts


def test_a_schema_2_store_migrates_in_place(tmp_path: Path) -> None:
    store = DuckDBStore(tmp_path / "data")
    store.put_receipt(body(1))
    store.put_feedback(Feedback("f1", body(1)["receipt_id"], ("a",), created_at=ts(1)))
    store.sync()
    store.close()
    con = duckdb.connect(str(tmp_path / "data" / "engine.duckdb"))  # make it look like schema 2
    con.execute("ALTER TABLE feedback DROP COLUMN not_useful_item_ids")
    con.execute("DROP TABLE config_snapshots")
    con.execute("UPDATE store_meta SET value = '2' WHERE key = 'schema_version'")
    con.close()
    again = DuckDBStore(tmp_path / "data")
    again.put_feedback(Feedback("f2", body(1)["receipt_id"], (), created_at=ts(2), not_useful_item_ids=("b",)))
    again.put_config_snapshot(ConfigSnapshot("v1", {"priors": {}}, ts(3)))
    assert [(f.feedback_id, f.useful_item_ids, f.not_useful_item_ids) for f in again.list_feedback()] == [
        ("f1", ("a",), ()),
        ("f2", (), ("b",)),
    ]
    assert [s.config_version for s in again.list_config_snapshots()] == ["v1"]
    assert again.health().ok
