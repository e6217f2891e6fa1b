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


def test_a_store_from_a_newer_engine_is_refused_and_left_alone(tmp_path: Path) -> None:
    """Found by an exploratory run: schema 99 was silently "migrated" and stamped back to this version."""
    import pytest

    from engine.errors import StoreError

    store = DuckDBStore(tmp_path / "data")
    store.put_receipt(body(1))
    store.sync()
    store.close()
    con = duckdb.connect(str(tmp_path / "data" / "engine.duckdb"))
    con.execute("UPDATE store_meta SET value = '99' WHERE key = 'schema_version'")
    con.close()
    again = DuckDBStore(tmp_path / "data")
    again.put_receipt(body(2))
    with pytest.raises(StoreError) as err:
        again.sync()
    assert err.value.context.get("state") == "newer" and "newer engine" in err.value.message
    con = duckdb.connect(str(tmp_path / "data" / "engine.duckdb"), read_only=True)
    assert con.execute("SELECT value FROM store_meta WHERE key = 'schema_version'").fetchone() == ("99",)
    con.close()


def test_a_file_the_file_system_refuses_is_not_called_damaged() -> None:
    """`chattr +i` on the store: every verb said "damaged, run engine store repair", and repair failed."""
    from engine.store.duckdb_store import damaged

    err = damaged(Path("/d/engine.duckdb"), OSError("IO Error: Cannot open file: Operation not permitted"))
    assert err.context.get("state") == "permission" and "repair" not in err.message


def test_a_failed_repair_leaves_no_half_built_copy(tmp_path: Path) -> None:
    """Found by an exploratory run: a repair the file system refused left engine.duckdb.rebuild behind."""
    import pytest

    from engine.store import ingest

    store = DuckDBStore(tmp_path / "data")
    store.put_receipt(body(1))
    store.sync()

    def refuse(*args: object, **kwargs: object) -> int:
        raise OSError(28, "No space left on device")

    mp = pytest.MonkeyPatch()
    mp.setattr(ingest, "ingest", refuse)
    try:
        with pytest.raises(OSError):
            store.repair()
    finally:
        mp.undo()
    assert not [p.name for p in (tmp_path / "data").iterdir() if ".rebuild" in p.name]
    assert store.repair().tables["receipts"] == 1  # and a later repair still works
