"""The tamper-evident receipt log (issue 8 item 5, DESIGN §5): pinned keys, indexed columns equal
to the signed body, and per-writer hash chains; plus keys, compaction and the legacy store.

Tampering is done the way an attacker with file access would: straight into the DuckDB file and
the spool files, never through the engine."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import duckdb
import pytest
from nacl.signing import SigningKey

from engine.audit import AuditReport, audit
from engine.errors import ReceiptError
from engine.keys import KeyRing
from engine.receipts import ReceiptLog, receipt_hash, sign
from engine.store import DuckDBStore, ReceiptQuery
from engine.store import ingest as ingest_mod
from engine.store.spool import encode, segment_files, spool_files

from ..helpers import plain_pynacl_verify
from .store_contract import body


def make_log(data: Path, n: int) -> tuple[DuckDBStore, KeyRing, list[dict[str, Any]]]:
    store, keys = DuckDBStore(data), KeyRing(data)
    log = ReceiptLog(store, keys)
    receipts = [log.append(body(i, minute=i)) for i in range(n)]
    store.sync()
    return store, keys, receipts


def check(store: DuckDBStore, keys: KeyRing) -> AuditReport:
    return audit(store, keys.verification_keys())


def problems(report: AuditReport) -> dict[str, list[str]]:
    return {r["receipt_id"]: r["problems"] for r in report.invalid}


def sql(store: DuckDBStore, text: str, params: list[Any]) -> None:
    con = duckdb.connect(str(store.db_path))
    try:
        con.execute(text, params)
    finally:
        con.close()


def rewrite_spool(store: DuckDBStore, fn: Any) -> None:
    """Rewrite every receipt line of the spool through ``fn(body) -> body | None`` (None deletes)."""
    for f in spool_files(store.spool_dir):
        out = []
        for line in f.read_bytes().splitlines():
            rec = json.loads(line)
            if rec["table"] == "receipts":
                new = fn(rec["row"]["body"])
                if new is None:
                    continue
                rec["row"]["body"] = new
            out.append(encode(rec["table"], rec["row"]))
        f.write_bytes(b"".join(out))


def test_chain_fields_are_signed_and_verify_with_plain_pynacl(tmp_path: Path) -> None:
    store, keys, rs = make_log(tmp_path / "d", 3)
    assert [r["chain"]["seq"] for r in rs] == [0, 1, 2]
    assert rs[0]["chain"]["prev"] is None
    assert rs[1]["chain"]["prev"] == receipt_hash(rs[0]) and rs[2]["chain"]["prev"] == receipt_hash(rs[1])
    assert all(plain_pynacl_verify(r) for r in rs)
    forged = {**rs[1], "chain": {**rs[1]["chain"], "seq": 7}}
    assert not plain_pynacl_verify(forged)  # the chain is inside the signed body
    report = check(store, keys)
    assert report.ok and (report.checked, report.chains, report.breaks) == (3, 1, [])


def test_a_receipt_re_signed_with_another_key_is_detected(tmp_path: Path) -> None:
    store, keys, rs = make_log(tmp_path / "d", 3)
    forged = sign({**rs[1], "status": "ok", "result_count": 42}, SigningKey.generate())
    assert plain_pynacl_verify(forged)  # it verifies under the key it names …
    sql(
        store,
        "UPDATE receipts SET body = ?, result_count = 42 WHERE receipt_id = ?",
        [json.dumps(forged), rs[1]["receipt_id"]],
    )
    rewrite_spool(store, lambda b: forged if b["receipt_id"] == rs[1]["receipt_id"] else b)
    report = check(store, keys)  # … but not under a pinned one
    assert not report.ok
    found = problems(report)[rs[1]["receipt_id"]]
    assert any("not pinned" in p for p in found)
    assert report.breaks and report.breaks[0]["seq"] == 2  # and its successor's prev no longer matches


def test_an_edited_indexed_column_is_detected(tmp_path: Path) -> None:
    store, keys, rs = make_log(tmp_path / "d", 3)
    sql(
        store,
        "UPDATE receipts SET status = 'ok', class = 'docs', result_count = 9 WHERE receipt_id = ?",
        [rs[0]["receipt_id"]],
    )
    sql(store, "UPDATE receipts SET created_at = '2030-01-01' WHERE receipt_id = ?", [rs[2]["receipt_id"]])  # reordered
    found = problems(check(store, keys))
    assert {p.split(" is ")[0] for p in found[rs[0]["receipt_id"]]} == {"column class", "column result_count"}
    assert found[rs[2]["receipt_id"]] == [
        f"column created_at is '2030-01-01' but the signed body says '{rs[2]['created_at']}'"
    ]


def test_a_deleted_receipt_is_detected_and_repair_restores_it(tmp_path: Path) -> None:
    store, keys, rs = make_log(tmp_path / "d", 4)
    sql(store, "DELETE FROM receipts WHERE receipt_id = ?", [rs[3]["receipt_id"]])  # the chain's tail
    found = problems(check(store, keys))
    assert list(found) == [rs[3]["receipt_id"]] and "missing from the store" in found[rs[3]["receipt_id"]][0]
    store.repair()
    assert check(store, keys).ok and len(store.list_receipts(ReceiptQuery(limit=None))) == 4


def test_a_receipt_deleted_from_store_and_log_breaks_its_chain(tmp_path: Path) -> None:
    store, keys, rs = make_log(tmp_path / "d", 4)
    sql(store, "DELETE FROM receipts WHERE receipt_id = ?", [rs[1]["receipt_id"]])
    rewrite_spool(store, lambda b: None if b["receipt_id"] == rs[1]["receipt_id"] else b)
    report = check(store, keys)
    assert report.breaks == [
        {
            "writer": rs[0]["chain"]["writer"],
            "seq": 2,
            "receipt_id": rs[2]["receipt_id"],
            "reason": "seq 1 missing before this receipt (deleted?)",
        }
    ]
    single = audit(store, [p.public_key for p in keys.pinned()], rs[3]["receipt_id"])
    assert single.breaks and single.invalid == []  # one receipt: its chain up to it is checked too


def test_a_replayed_receipt_is_a_fork(tmp_path: Path) -> None:
    store, keys, rs = make_log(tmp_path / "d", 3)
    key = keys.load()
    assert key is not None
    twin = sign({**rs[1], "receipt_id": "f" * 32}, key)  # an insider with the key re-uses seq 1
    store.put_receipt(twin)
    report = check(store, keys)
    assert report.breaks and "appears twice" in report.breaks[0]["reason"]


def test_missing_key_with_receipts_is_an_error_not_a_new_key(tmp_path: Path) -> None:
    data = tmp_path / "d"
    store, keys, rs = make_log(data, 2)
    old = rs[0]["public_key"]
    keys.key_path.unlink()
    with pytest.raises(ReceiptError, match="missing but receipts exist"):
        ReceiptLog(DuckDBStore(data), KeyRing(data)).append(body(9))
    assert not keys.key_path.exists()
    report = check(store, keys)
    assert report.pinned_keys == 0 and len(report.invalid) == 2
    keys.create()  # what `engine keys init --force` does
    keys.trust(old)  # the lost key's public half, from a client's receipt
    assert check(store, keys).ok


def test_rotation_keeps_old_receipts_verifying(tmp_path: Path) -> None:
    data = tmp_path / "d"
    store, keys, rs = make_log(data, 2)
    old, new = keys.rotate()
    assert old == rs[0]["public_key"] and new != old
    fresh = ReceiptLog(DuckDBStore(data), KeyRing(data)).append(body(5))
    assert fresh["public_key"] == new
    assert [(p.public_key, p.role) for p in keys.pinned()] == [(new, "current"), (old, "retired")]
    assert check(store, keys).ok
    assert keys.pinned_path.stat().st_mode & 0o777 == 0o600


def test_a_retired_key_verifies_nothing_made_after_its_retirement_and_a_revoked_key_nothing(tmp_path: Path) -> None:
    """Found by an exploratory run: after `keys rotate` (the remedy for a leaked key) a receipt forged
    *now* with the old key verified. A running log switches to the new key by itself."""
    from datetime import UTC, datetime, timedelta

    data = tmp_path / "d"
    store, keys, rs = make_log(data, 2)
    running = ReceiptLog(store, keys)
    running.append(body(3, minute=3))
    old_seed = keys.key_path.read_text()
    keys.rotate()
    assert running.append(body(4, minute=4))["public_key"] != rs[0]["public_key"]  # reloaded the key file
    later = datetime.now(UTC) + timedelta(seconds=30)  # made after the retirement (and its 5 s grace)
    forged = {**body(9), "created_at": later.isoformat(timespec="milliseconds")}
    forged = sign(
        {**forged, "chain": {"writer": "forged", "seq": 0, "prev": None}}, SigningKey(bytes.fromhex(old_seed))
    )
    store.put_receipt(forged)
    store.sync()
    report = check(store, keys)
    assert list(problems(report)) == [forged["receipt_id"]]
    assert any("retired before it was made" in p for p in problems(report)[forged["receipt_id"]])
    keys.rotate(revoke=True)  # the newer key leaked too: everything it signed stops verifying
    assert [p.role for p in keys.pinned()][1:] == ["retired", "revoked"]
    assert any("not pinned" in p for p in problems(check(store, keys))[f"{4:032x}"])
    keys.trust(keys.pinned()[2].public_key)  # the user decides otherwise
    assert f"{4:032x}" not in problems(check(store, keys))


def test_rotate_refuses_a_missing_key_when_receipts_exist(tmp_path: Path) -> None:
    """Found by an exploratory run: `engine keys rotate` with the key file gone made a new key
    (`retired: null`) and the lost key's receipts stopped verifying; `init` already refused this."""
    import subprocess
    import sys

    data = tmp_path / "d"
    store, keys, _ = make_log(data, 2)
    store.make_durable()
    keys.key_path.unlink()
    env = {**os.environ, "ENGINE_HOME": str(data)}
    res = subprocess.run(
        [sys.executable, "-m", "engine.cli", "keys", "rotate"], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert res.returncode != 0 and "signing key is missing" in res.stderr, res.stderr
    assert not keys.key_path.exists()


def test_one_chain_under_concurrent_appends(tmp_path: Path) -> None:
    store, keys = DuckDBStore(tmp_path / "d"), KeyRing(tmp_path / "d")
    log = ReceiptLog(store, keys)
    threads = [
        threading.Thread(target=lambda t=t: [log.append(body(t * 1000 + i)) for i in range(40)]) for t in range(6)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    report = check(store, keys)
    assert report.ok and (report.checked, report.chains) == (240, 1)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX fork")
def test_a_forked_child_starts_its_own_chain(tmp_path: Path) -> None:
    store, keys = DuckDBStore(tmp_path / "d"), KeyRing(tmp_path / "d")
    log = ReceiptLog(store, keys)
    log.append(body(1))
    pid = os.fork()
    if pid == 0:  # the child: same log object, must not continue the parent's chain
        try:
            log.append(body(2))
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    log.append(body(3))
    report = check(store, keys)
    assert report.ok and report.chains == 2


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX fork")
def test_dead_writers_spools_are_compacted_into_a_segment_and_still_repair(tmp_path: Path) -> None:
    data = tmp_path / "d"
    keys = KeyRing(data)
    n = ingest_mod.COMPACT_AT + 2
    for i in range(n):  # one short-lived writer per receipt, as `engine run` is
        pid = os.fork()
        if pid == 0:
            try:
                ReceiptLog(DuckDBStore(data), keys).append(body(i))
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
    store = DuckDBStore(data)
    store.sync()
    assert not spool_files(store.spool_dir) and len(segment_files(store.log_dir)) == 1
    assert {oct(f.stat().st_mode & 0o777) for f in segment_files(store.log_dir)} == {"0o600"}
    assert check(store, keys).ok and check(store, keys).checked == n
    os.truncate(store.db_path, 0)
    assert store.repair().tables["receipts"] == n
    assert check(store, keys).ok


def test_a_store_from_before_the_log_keeps_its_receipts(tmp_path: Path) -> None:
    """Schema 1 deleted ingested spools: its rows exist only in DuckDB. Opening it copies them
    into the log first, so a repair never loses them."""
    data = tmp_path / "d"
    data.mkdir()
    key = SigningKey.generate()
    legacy = sign(body(1), key)
    con = duckdb.connect(str(data / "engine.duckdb"))
    con.execute(
        "CREATE TABLE receipts (receipt_id VARCHAR PRIMARY KEY, created_at VARCHAR, pipeline VARCHAR, "
        "config_version VARCHAR, request_hash VARCHAR, class VARCHAR, result_count INTEGER, status VARCHAR, body JSON)"
    )
    con.execute(
        "INSERT INTO receipts VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [legacy["receipt_id"], legacy["created_at"], legacy["pipeline"], legacy["config_version"],
         legacy["request_hash"], "identifier", legacy["result_count"], "ok", json.dumps(legacy)],
    )  # fmt: skip
    con.close()
    (data / "signing_key.ed25519").write_text(key.encode().hex())
    store = DuckDBStore(data)
    ReceiptLog(store, KeyRing(data)).append(body(2))
    store.sync()
    assert len(segment_files(store.log_dir)) == 1  # the legacy row, copied into the log
    report = check(store, KeyRing(data))
    assert report.ok and report.unchained == 1 and report.checked == 2
    os.truncate(store.db_path, 0)
    assert store.repair().tables["receipts"] == 2
