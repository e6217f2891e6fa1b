"""kill -9 during runs and during ingestion loses no answered receipt (issue 8, "Done when").

4 worker slots each need 100 answered ``Router.run`` calls on one data dir (real ripgrep, real
DuckDB). Workers print each receipt id the moment their answer exists (that is "the client saw
its answer"), then flush and ingest. Meanwhile the supervisor ``SIGKILL``s random workers
mid-run and restarts them, and a dedicated ingester process looping over
``DuckDBStore.sync`` is killed again and again. Afterwards every answered id must be stored
exactly once, verify under the pinned key, and no writer's chain may have a break.
"""

from __future__ import annotations

import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from engine.audit import audit
from engine.keys import KeyRing
from engine.store import DuckDBStore, ReceiptQuery

from ..conftest import make_repo

ROOT = Path(__file__).resolve().parents[2]
RUNS, SLOTS = 100, 4
WORKER_KILLS, INGESTER_KILLS = 6, 5

WORKER = r"""
import sys, anyio
from pathlib import Path
from engine.runtime import Router
from engine.workspace import Workspace
cfg, ws, n, tag = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
router = Router(cfg, Workspace.open([ws]))
async def main():
    for i in range(n):
        r = await router.run("identifier", {"question": f'"needle" {tag}-{i}', "no_cache": True})
        assert r.error is None, r.response
        sys.stdout.write(r.response["receipt"]["receipt_id"] + "\n")
        sys.stdout.flush()
        router.flush(timeout_s=0.05)
    await router.aclose()
anyio.run(main)
"""
INGESTER = r"""
import sys, time
from pathlib import Path
from engine.store import DuckDBStore
store = DuckDBStore(Path(sys.argv[1]))
while True:
    store.sync(timeout_s=1.0)
    time.sleep(0.02)
"""
RECEIPT_ID = re.compile(r"^[0-9a-f]{32}$")


class Slot:
    def __init__(self, name: str) -> None:
        self.name = name
        self.answered: list[str] = []
        self.proc: subprocess.Popen[str] | None = None
        self.starts = 0
        self.stderr = Path()

    def start(self, config_dir: Path, ws: Path, logs: Path) -> None:
        self.starts += 1
        self.stderr = logs / f"{self.name}.{self.starts}.err"
        with open(self.stderr, "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", WORKER, str(config_dir), str(ws), str(RUNS - len(self.answered)),
                 f"{self.name}.{self.starts}"],
                stdout=subprocess.PIPE, stderr=err, text=True, cwd=ROOT,
            )  # fmt: skip
        proc = self.proc
        threading.Thread(target=self._read, args=(proc,), daemon=True).start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:  # a line cut by SIGKILL has no id shape: never counted as answered
            if RECEIPT_ID.match(line.strip()):
                self.answered.append(line.strip())

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def test_kill_9_during_runs_and_ingestion_loses_no_answered_receipt(tmp_path: Path, config_dir: Path) -> None:
    ws = make_repo(tmp_path / "repo", {"a.py": "needle = 1\n", "b.py": "x = 'needle'\n"})
    data = ws / ".engine"
    rng = random.Random(20261201)
    slots = [Slot(f"s{i}") for i in range(SLOTS)]
    ingester: subprocess.Popen[bytes] | None = None
    worker_kills = ingester_kills = 0
    next_kill = time.monotonic() + 2.0
    deadline = time.monotonic() + 300
    while any(len(s.answered) < RUNS for s in slots):
        assert time.monotonic() < deadline, [len(s.answered) for s in slots]
        for s in slots:
            if not s.running():
                if s.proc is not None and s.proc.returncode not in (0, -signal.SIGKILL):
                    raise AssertionError(s.stderr.read_text()[-3000:])
                if len(s.answered) < RUNS:
                    if s.proc is not None:
                        s.proc.wait()
                    s.start(config_dir, ws, tmp_path)
        if ingester is None or ingester.poll() is not None:
            ingester = subprocess.Popen([sys.executable, "-c", INGESTER, str(data)], cwd=ROOT)
        if time.monotonic() >= next_kill:
            busy = [s for s in slots if s.running() and 0 < len(s.answered) < RUNS - 5]
            if worker_kills < WORKER_KILLS and busy:
                victim = rng.choice(busy)
                assert victim.proc is not None
                victim.proc.send_signal(signal.SIGKILL)
                worker_kills += 1
            if ingester_kills < INGESTER_KILLS:
                ingester.send_signal(signal.SIGKILL)
                ingester.wait()
                ingester_kills += 1
            next_kill = time.monotonic() + rng.uniform(0.8, 2.5)
        time.sleep(0.05)
    for s in slots:
        assert s.proc is not None and s.proc.wait(timeout=60) == 0
    assert ingester is not None
    ingester.send_signal(signal.SIGKILL)
    ingester.wait()
    assert worker_kills == WORKER_KILLS and ingester_kills == INGESTER_KILLS

    store = DuckDBStore(data)
    store.sync()
    stored = [r.receipt_id for r in store.list_receipts(ReceiptQuery(limit=None))]
    answered = [rid for s in slots for rid in s.answered]
    assert len(answered) >= RUNS * SLOTS and len(set(answered)) == len(answered)
    assert len(stored) == len(set(stored))  # exactly one stored copy each
    assert set(answered) <= set(stored), set(answered) - set(stored)
    report = audit(store, [p.public_key for p in KeyRing(data).pinned()])
    assert report.ok, report.to_dict()
    assert report.breaks == [] and SLOTS <= report.chains <= sum(s.starts for s in slots)
    assert store.health().ok


STALLED_WRITER = r"""
import sys, time
from pathlib import Path
import duckdb
from engine.store import DuckDBStore
store = DuckDBStore(Path(sys.argv[1]))
with store._locked(True, 10.0):                       # the store lock, as an ingest holds it …
    con = duckdb.connect(str(store.db_path))          # … with DuckDB's own writer lock as well
    print("holding", flush=True)
    time.sleep(600)                                   # then it stalls (SIGSTOP'ed below)
"""


def test_a_stalled_store_writer_costs_no_answer_and_loses_nothing(tmp_path: Path, config_dir: Path) -> None:
    import anyio

    from engine.runtime import Router
    from engine.workspace import Workspace

    ws = make_repo(tmp_path / "repo", {"a.py": "needle = 1\n"})
    data = ws / ".engine"
    router = Router(config_dir, Workspace.open([ws]))
    first = anyio.run(router.run, "identifier", {"question": '"needle" warm'})  # creates the store
    router.flush()
    holder = subprocess.Popen([sys.executable, "-c", STALLED_WRITER, str(data)], stdout=subprocess.PIPE, cwd=ROOT)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"holding"
        holder.send_signal(signal.SIGSTOP)
        answered = [first.response["receipt"]["receipt_id"]]
        for i in range(5):
            t0 = time.perf_counter()
            r = anyio.run(router.run, "identifier", {"question": f'"needle" stalled {i}'})  # cache on: a miss
            assert r.error is None and r.response["items"]
            router.flush(timeout_s=0.1)  # ingest gives up quickly; the receipt waits in the spool
            assert time.perf_counter() - t0 < 5.0
            answered.append(r.response["receipt"]["receipt_id"])
        assert DuckDBStore(data).health().state == "busy"  # what doctor reports
    finally:
        holder.send_signal(signal.SIGKILL)  # the stalled writer dies holding both locks
        holder.wait()
    anyio.run(router.aclose)
    store = DuckDBStore(data)
    store.sync()
    assert {r.receipt_id for r in store.list_receipts(ReceiptQuery(limit=None))} == set(answered)
    assert audit(store, [p.public_key for p in KeyRing(data).pinned()]).ok
