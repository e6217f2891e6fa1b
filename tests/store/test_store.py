"""The store under several processes: no receipt lost or corrupted (DESIGN §8, docs/adr/0001-store.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from engine.keys import KeyRing
from engine.receipts import verify
from engine.store import DuckDBStore, Hint

from ..conftest import make_repo
from ..helpers import plain_pynacl_verify

WORKER = r"""
import sys, anyio
from pathlib import Path
from engine.runtime import Router
from engine.workspace import Workspace
cfg, ws, n, tag = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
router = Router(cfg, Workspace.open([ws]))
async def main():
    for i in range(n):
        r = await router.run("identifier", {"question": f'"needle" run {tag}-{i}', "no_cache": True})
        assert r.error is None, r.response
        router.flush(timeout_s=0.05)   # best effort: a busy store is ingested by whoever comes next
    await router.aclose()
anyio.run(main)
"""


def test_four_processes_lose_no_receipt(tmp_path: Path, config_dir: Path) -> None:
    ws = make_repo(tmp_path / "repo", {"a.py": "needle = 1\n", "b.py": "x = 'needle'\n"})
    runs, procs = 200, 4
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(config_dir), str(ws), str(runs), f"p{i}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for i in range(procs)
    ]
    for w in workers:
        _, err = w.communicate(timeout=600)
        assert w.returncode == 0, err.decode()[-2000:]
    store = DuckDBStore(ws / ".engine")
    rows = [(s.receipt_id, s.body) for s in store.stored_receipts()]
    assert len(rows) == runs * procs
    assert len({r[0] for r in rows}) == runs * procs
    bodies = [b for _, b in rows]
    assert all(b is not None and plain_pynacl_verify(b) for b in bodies)
    questions = {b["request"]["question"] for b in bodies if b is not None}
    assert len(questions) == runs * procs
    # the spools are the log of record now (docs/adr/0005): kept, and fully ingested
    assert store.health().pending_bytes == 0
    assert {b["receipt_id"] for b in store.logged_receipts()} == {r[0] for r in rows}


def test_torn_line_waits_and_ingest_is_idempotent(tmp_path: Path) -> None:
    store = DuckDBStore(tmp_path / "data")
    store.put_hint(Hint("h1", "alpha", "a.py", None, "test"))
    assert store.sync() == 1
    assert store.sync() == 0  # nothing new
    spool = next((tmp_path / "data" / "spool").glob("*.jsonl"))
    with open(spool, "ab") as fh:  # a writer died mid-line: the fragment must not be ingested
        fh.write(b'{"table": "hints", "row": {"hint_id": "h2"')
    store.sync()
    assert [h.hint_id for h in store.list_hints()] == ["h1"]
    with open(spool, "ab") as fh:
        fh.write(b', "project": "alpha", "source": "test", "created_at": "9"}}\n')
    store.sync()
    assert [h.hint_id for h in store.list_hints()] == ["h1", "h2"]


def test_signing_key_is_private_and_verifies(tmp_path: Path) -> None:
    from engine.receipts import sign

    key = KeyRing(tmp_path).signing_key(fresh=True)
    assert (tmp_path / "signing_key.ed25519").stat().st_mode & 0o777 == 0o600
    r = sign({"receipt_id": "x" * 32, "question": "é 文"}, key)
    assert verify(r) and plain_pynacl_verify(r)
    assert KeyRing(tmp_path).signing_key(fresh=False).verify_key == key.verify_key


def test_receipt_survives_a_javascript_round_trip(tmp_path: Path) -> None:
    """JSON.stringify prints 1.0 as 1: a receipt re-serialised by a JS client must still verify."""
    from engine.receipts import sign

    r = sign(
        {
            "receipt_id": "y" * 32,
            "budget": {"latency_ms": 120.0, "k": 60},
            "w": {"bm25": 1.0, "x": 0.7},
            "tiny": 1.234567e-05,
        },
        KeyRing(tmp_path).signing_key(fresh=True),
    )

    def js_like(v):  # noqa: ANN001, ANN202 - what JSON.parse + JSON.stringify do to numbers
        if isinstance(v, float) and v.is_integer():
            return int(v)
        if isinstance(v, dict):
            return {k: js_like(x) for k, x in v.items()}
        return v

    assert plain_pynacl_verify(js_like(json.loads(json.dumps(r))))
    assert plain_pynacl_verify(r)
