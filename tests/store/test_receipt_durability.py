"""When a receipt reaches the disk (issue 10, ADR 0007's update): written to the spool before the
answer — a killed process loses none — and fsync'ed by ``Router.flush`` after it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from engine.runtime import Router
from engine.store import DuckDBStore
from engine.workspace import Workspace

from ..conftest import make_repo
from ..helpers import plain_pynacl_verify
from .store_contract import body

KILLED = r"""
import os, signal, sys, anyio
from pathlib import Path
from engine.runtime import Router
from engine.workspace import Workspace
router = Router(Path(sys.argv[1]), Workspace.open([Path(sys.argv[2])]))
async def main():
    r = await router.run("identifier", {"question": '"needle"', "no_cache": True})
    print(r.response["receipt"]["receipt_id"], flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # no flush, no close: the answer is out, the process is gone
anyio.run(main)
"""


def test_a_process_killed_right_after_its_answer_keeps_the_receipt(tmp_path: Path, config_dir: Path) -> None:
    ws = make_repo(tmp_path / "repo", {"a.py": "needle = 1\n"})
    proc = subprocess.run(
        [sys.executable, "-c", KILLED, str(config_dir), str(ws)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    receipt_id = proc.stdout.strip()
    stored = DuckDBStore(ws / ".engine").get_receipt(receipt_id)
    assert stored is not None and stored["receipt_id"] == receipt_id
    assert plain_pynacl_verify(stored)


def test_the_receipt_fsync_follows_the_answer(
    tmp_path: Path, config_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = make_repo(tmp_path / "repo", {"a.py": "needle = 1\n"})
    router = Router(config_dir, Workspace.open([ws]))
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])

    async def main() -> None:
        await router.run("identifier", {"question": '"needle"', "no_cache": True})
        first = len(synced)  # the spool file's creation fsyncs its folder once; the line is not
        await router.run("identifier", {"question": '"needle" again', "no_cache": True})
        assert len(synced) == first, "the second answer waited for an fsync"
        router.flush(ingest=False)
        spool_fd = router.store._spool._fd  # type: ignore[attr-defined]
        assert synced[first] == spool_fd, "flush must fsync the receipts' spool first"
        await router.aclose()

    anyio.run(main)


def test_make_durable_reports_a_disk_that_refuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.errors import StoreError

    store = DuckDBStore(tmp_path / "data")
    store.put_receipt(body(1))

    def refuse(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", refuse)
    with pytest.raises(StoreError, match="fsync"):
        store.make_durable()
    monkeypatch.undo()
    assert store.get_receipt(body(1)["receipt_id"]) == body(1)  # written all the same
    store.close()
