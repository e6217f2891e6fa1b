"""The PostgreSQL store beyond the contract: chosen by config, shared by several router processes
(each its own chain writer), exported to Parquet like every backend (docs/adr/0016-postgresql.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest

from engine.audit import audit
from engine.errors import SpecError
from engine.keys import KeyRing
from engine.receipts import ReceiptLog, verify
from engine.store import DuckDBStore, Feedback, Hint, MemoryStore, Store, open_store
from engine.store.export import export_parquet
from tests.pg_support import pg_cluster, pg_url  # noqa: F401 - fixtures
from tests.store.store_contract import body, event

from ..conftest import make_repo
from .test_store import WORKER  # the same router worker as the DuckDB multi-process test


def test_the_store_is_chosen_by_env_then_by_the_data_dir_file(
    tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.store.postgres_store import PostgresStore

    monkeypatch.delenv("ENGINE_STORE", raising=False)
    assert isinstance(open_store(tmp_path), DuckDBStore)  # the embedded default
    (tmp_path / "store.url").write_text(f"# the team's store\n{pg_url}\n")
    assert isinstance(open_store(tmp_path), PostgresStore)
    monkeypatch.setenv("ENGINE_STORE", "duckdb")  # the environment wins over the file
    assert isinstance(open_store(tmp_path), DuckDBStore)
    monkeypatch.setenv("ENGINE_STORE", "mysql://x")
    with pytest.raises(SpecError, match="unknown store"):
        open_store(tmp_path)


def test_an_unreachable_server_is_a_store_error_with_the_fix(tmp_path: Path) -> None:
    from engine.errors import StoreError
    from engine.store.postgres_store import PostgresStore

    store = PostgresStore(f"postgresql://postgres:secret@/postgres?host={tmp_path}&port=1")
    health = store.health()
    assert not health.ok and health.fix is not None and "secret" not in health.detail
    with pytest.raises(StoreError, match="cannot reach PostgreSQL"):
        store.put_receipt(body(1))
    assert store.cache_get("k") is None  # a miss, never a stall or a crash
    store.close()


@pytest.fixture(params=["memory", "duckdb", "postgres"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "memory":
        return MemoryStore()
    if request.param == "duckdb":
        return DuckDBStore(tmp_path / "data")
    from engine.store.postgres_store import PostgresStore

    return PostgresStore(request.getfixturevalue("pg_url"))


def test_export_writes_every_table_as_parquet_for_every_backend(any_store: Store, tmp_path: Path) -> None:
    log = ReceiptLog(any_store, KeyRing(tmp_path / "keys"))
    signed = [log.append(body(i, minute=i)) for i in range(3)]
    any_store.put_feedback(Feedback("f1", signed[0]["receipt_id"], ("a",), "é 文"))
    any_store.put_hint(Hint("h1", "alpha", "a.py", None, "test"))
    any_store.record_events([event(1, "bm25", 12.5, hit=True)])
    any_store.sync()
    counts = export_parquet(any_store, tmp_path / "out")
    assert counts["receipts"] == 3 and counts["feedback"] == 1 and counts["tool_benchmark_events"] == 1
    con = duckdb.connect()
    rows = con.execute(f"SELECT receipt_id, seq, body FROM '{tmp_path}/out/receipts.parquet' ORDER BY seq").fetchall()
    assert [r[1] for r in rows] == [0, 1, 2]
    assert all(verify(json.loads(r[2])) for r in rows)  # the body is exported as signed
    (note,) = con.execute(f"SELECT note FROM '{tmp_path}/out/feedback.parquet'").fetchone() or ("",)
    assert note == "é 文"
    (lat,) = con.execute(f"SELECT latency_ms FROM '{tmp_path}/out/tool_benchmark_events.parquet'").fetchone() or (0,)
    assert lat == 12.5
    assert con.execute(f"SELECT count(*) FROM '{tmp_path}/out/experiments.parquet'").fetchone() == (0,)


@pytest.mark.slow
def test_three_router_processes_share_one_postgres_store(
    tmp_path: Path, config_dir: Path, pg_url: str, run_env: Callable[[str], dict[str, str]]
) -> None:
    ws = make_repo(tmp_path / "repo", {"a.py": "needle = 1\n", "b.py": "x = 'needle'\n"})
    KeyRing(ws / ".engine").create()  # one key for every replica, made before any of them starts
    runs, procs = 20, 3
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(config_dir), str(ws), str(runs), f"p{i}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=run_env(pg_url),
        )
        for i in range(procs)
    ]
    for w in workers:
        _, err = w.communicate(timeout=600)
        assert w.returncode == 0, err.decode()[-2000:]
    from engine.store.postgres_store import PostgresStore

    store = PostgresStore(pg_url)
    stored = list(store.stored_receipts())
    assert len(stored) == runs * procs
    assert len({s.columns["writer"] for s in stored}) == procs  # one chain each
    report = audit(store, [p.public_key for p in KeyRing(ws / ".engine").pinned()])
    assert report.ok and (report.checked, report.chains) == (runs * procs, procs), report.to_dict()
    assert not (ws / ".engine" / "spool").exists()  # nothing went to the local DuckDB store
    store.close()


@pytest.fixture
def run_env() -> Callable[[str], dict[str, str]]:
    import os

    return lambda url: {**os.environ, "ENGINE_STORE": url}


def test_the_cli_reads_and_exports_the_store_the_data_dir_names(tmp_path: Path, pg_url: str) -> None:
    """`engine receipts list` and `engine store export --parquet` go to PostgreSQL when the data
    dir's store.url says so; a bad setting is a config error (exit 2)."""
    import os

    from engine.store.postgres_store import PostgresStore

    ws = make_repo(tmp_path / "ws", {"a.py": "x = 1\n"})
    data = ws / ".engine"
    data.mkdir()
    (data / "store.url").write_text(pg_url + "\n")
    log = ReceiptLog(PostgresStore(pg_url), KeyRing(data))
    rid = log.append(body(1))["receipt_id"]
    env = {k: v for k, v in os.environ.items() if k != "ENGINE_STORE"}
    cli = [sys.executable, "-m", "engine.cli"]
    listed = subprocess.run([*cli, "receipts", "list", "--workspace", str(ws), "--format", "json"], env=env,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert [r["receipt_id"] for r in json.loads(listed.stdout)] == [rid]
    out = tmp_path / "parquet"
    done = subprocess.run([*cli, "store", "export", str(out), "--parquet", "--workspace", str(ws)], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["rows"]["receipts"] == 1 and (out / "receipts.parquet").exists()
    (data / "store.url").write_text("mysql://nope\n")
    bad = subprocess.run([*cli, "store", "status", "--workspace", str(ws)], env=env, capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert bad.returncode == 2 and json.loads(bad.stderr.strip().splitlines()[-1])["error"] == "invalid_config"
