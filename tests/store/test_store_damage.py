"""A damaged store never costs an answer (issue 8 item 4, DESIGN §7), through the real CLI.

The reproduction of issue 8: ``truncate -s 0 <data dir>/engine.duckdb`` (or garbage bytes) made
``engine run`` print the answer and then a traceback, and crashed ``doctor`` and ``receipts
verify``. Now: run answers (exit 0) with its receipt safe in the spool, doctor reports FAIL with
the fix, verify reports instead of crashing, and ``engine store repair`` restores every receipt
exactly once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import make_repo
from ..helpers import plain_pynacl_verify

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("ENGINE_HOME", None)
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=120
    )


def ask(ws: Path, config_dir: Path, question: str) -> subprocess.CompletedProcess[str]:
    return cli(
        "run", str(config_dir / "pipelines/identifier.yaml"), "-q", question, "-w", str(ws), "-f", "json", cwd=ws
    )


def truncate_to_zero(db: Path) -> None:
    os.truncate(db, 0)


def garbage(db: Path) -> None:
    db.write_bytes(os.urandom(db.stat().st_size))


def corrupt_block(db: Path) -> None:
    with open(db, "r+b") as fh:  # a checksummed block in the middle of a valid file
        fh.seek(4096)
        fh.write(os.urandom(4096))


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", {"a.py": "needle = 1\nclass RetryPolicy:\n    pass\n"})


@pytest.mark.parametrize("damage", [truncate_to_zero, garbage, corrupt_block])
def test_damaged_store_costs_no_answer_and_repair_restores_everything(
    ws: Path, config_dir: Path, damage: object
) -> None:
    first = ask(ws, config_dir, '"needle"')
    assert first.returncode == 0, first.stderr
    db = ws / ".engine" / "engine.duckdb"
    assert db.exists()
    damage(db)  # type: ignore[operator]

    second = ask(ws, config_dir, '"RetryPolicy"')
    assert second.returncode == 0, second.stderr  # the answer, not a traceback
    assert "Traceback" not in second.stderr and "engine store repair" in second.stderr
    answer = json.loads(second.stdout)
    assert answer["items"] and plain_pynacl_verify(answer["receipt"])
    ids = {json.loads(first.stdout)["receipt"]["receipt_id"], answer["receipt"]["receipt_id"]}

    doctor = cli("doctor", "-w", str(ws), "--config-dir", str(config_dir), "-f", "json", cwd=ws)
    assert doctor.returncode == 1 and "Traceback" not in doctor.stderr
    store_check = next(c for c in json.loads(doctor.stdout) if c["check"] == "store")
    assert not store_check["ok"] and "engine store repair" in store_check["detail"]

    verify = cli("receipts", "verify", "-w", str(ws), cwd=ws)
    assert verify.returncode == 1 and "Traceback" not in verify.stderr
    report = json.loads(verify.stdout)
    assert "damaged" in report["store"] and "engine store repair" in report["store"]
    assert report["checked"] == 2 and report["invalid"] == [] and report["breaks"] == []  # the log still verifies

    listed = cli("receipts", "list", "-w", str(ws), cwd=ws)
    assert listed.returncode == 1 and json.loads(listed.stderr)["error"] == "store_error"

    repair = cli("store", "repair", "-w", str(ws), cwd=ws)
    assert repair.returncode == 0, repair.stderr
    rep = json.loads(repair.stdout)
    assert rep["tables"]["receipts"] == 2 and rep["log_receipts"] == 2 and rep["moved_aside"]

    verify = cli("receipts", "verify", "-w", str(ws), cwd=ws)
    assert verify.returncode == 0, verify.stdout
    assert json.loads(verify.stdout)["checked"] == 2
    listed = cli("receipts", "list", "-w", str(ws), "-f", "json", cwd=ws)
    assert sorted(r["receipt_id"] for r in json.loads(listed.stdout)) == sorted(ids)  # each exactly once
    doctor = cli("doctor", "-w", str(ws), "--config-dir", str(config_dir), "-f", "json", cwd=ws)
    assert next(c for c in json.loads(doctor.stdout) if c["check"] == "store")["ok"]


def test_data_dir_is_private_and_never_in_git(ws: Path, config_dir: Path) -> None:
    res = ask(ws, config_dir, '"needle"')
    assert res.returncode == 0, res.stderr
    data = ws / ".engine"
    assert (data / ".gitignore").read_text() == "*\n"
    status = subprocess.run(["git", "status", "--porcelain"], cwd=ws, capture_output=True, text=True, check=True)
    assert status.stdout == ""  # the key, the store and the spool are all ignored
    assert data.stat().st_mode & 0o777 == 0o700
    files = [data / "signing_key.ed25519", data / "engine.duckdb", data / "store.lock", *(data / "spool").iterdir()]
    assert {oct(f.stat().st_mode & 0o777) for f in files} == {"0o600"}
    assert (data / "spool").stat().st_mode & 0o777 == 0o700
