"""Store and receipt-log costs behind docs/adr/0007-receipt-chain-and-log.md.

    .venv/bin/python benchmarks/store_bench.py [N]        # default N = 2000 receipts

Takes one real receipt (a Router run on a small git repo), then measures on a fresh data dir:
the hot-path append (sign + chain + fsync'ed spool line), the alternative of a direct DuckDB
insert per request, bytes per record in the spool and in a compacted segment, ingest, compaction,
verification and repair. Prints a markdown table.
"""

from __future__ import annotations

import gzip
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import duckdb

from engine.audit import audit
from engine.keys import KeyRing
from engine.receipts import ReceiptLog
from engine.runtime import Router
from engine.store import DuckDBStore
from engine.store.spool import encode, read_spool, spool_files, write_segment
from engine.workspace import Workspace

ROOT = Path(__file__).resolve().parent.parent


QUESTIONS = [
    "where is RetryPolicy7 defined",
    '"should_retry"',
    "how are failed requests retried",
    "RetryPolicy12.should_retry",
    "who calls should_retry",
    "when did the retry policy change",
    "docs for retry policies",
    "what breaks if RetryPolicy3 changes",
]


def real_runs(tmp: Path) -> tuple[list[dict[str, Any]], list[tuple[str, dict[str, Any]]]]:
    """Real answers: their receipt bodies and the spool records they produced (receipts, events, cache)."""
    repo = tmp / "repo"
    repo.mkdir()
    for i in range(30):
        (repo / f"m{i}.py").write_text(f"class RetryPolicy{i}:\n    def should_retry(self):\n        return {i}\n")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    router = Router(ROOT, Workspace.open([repo], data_dir=tmp / "real"))
    bodies = []
    for q in QUESTIONS:
        result = anyio.run(router.run, "router", {"question": q})
        bodies.append({k: v for k, v in result.response["receipt"].items() if k not in ("signature", "public_key")})
    router.flush(ingest=False)
    anyio.run(router.aclose)
    records = [r for f in spool_files(tmp / "real" / "spool") for r in read_spool(f)[0]]
    return bodies, records


def ms(values: list[float]) -> str:
    values = sorted(values)
    return f"p50 {statistics.median(values):.2f} ms, p95 {values[int(len(values) * 0.95)]:.2f} ms"


def main(n: int) -> None:
    rows: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        bodies, records = real_runs(tmp)
        sizes: dict[str, list[int]] = {}
        for table, row in records:
            sizes.setdefault(table, []).append(len(encode(table, row)))
        real = b"".join(encode(t, r) for t, r in records)
        packed = len(gzip.compress(real, 6))
        rows.append(
            ("gzip on the real runs' own spool lines", f"{len(real)} B → {packed} B ({len(real) / packed:.1f}×)")
        )
        for table, s in sorted(sizes.items()):
            rows.append((f"spool bytes per `{table}` row", f"{statistics.mean(s):.0f} (mean of {len(s)}, real runs)"))

        data = tmp / "data"
        store, keys = DuckDBStore(data), KeyRing(data)
        log = ReceiptLog(store, keys)
        lat = []
        for i in range(n):
            t0 = time.perf_counter()
            # a real body each time, with what differs between requests made unique again
            b = bodies[i % len(bodies)]
            req = {**b["request"], "question": f"{b['request']['question']} #{i}"}
            log.append({**b, "receipt_id": f"{i:032x}", "request": req, "request_hash": f"{i:064x}"})
            lat.append((time.perf_counter() - t0) * 1000)
        rows.append(("hot path: `ReceiptLog.append` (sign + chain + fsync'ed spool line)", ms(lat)))

        direct = []
        db = tmp / "direct.duckdb"
        con = duckdb.connect(str(db))
        con.execute("CREATE TABLE r (id VARCHAR PRIMARY KEY, body JSON)")
        con.close()
        for i in range(50):
            t0 = time.perf_counter()
            con = duckdb.connect(str(db))
            con.execute("INSERT INTO r VALUES (?, ?)", [f"{i}", "{}"])
            con.close()
            direct.append((time.perf_counter() - t0) * 1000)
        rows.append(("alternative: DuckDB connect + insert + close per request", ms(direct)))

        spool_bytes = sum(f.stat().st_size for f in spool_files(store.spool_dir))
        t0 = time.perf_counter()
        store.sync()
        rows.append((f"ingest {n} receipts into DuckDB", f"{time.perf_counter() - t0:.2f} s"))

        t0 = time.perf_counter()
        report = audit(store, [p.public_key for p in keys.pinned()])
        assert report.ok, report.to_dict()
        rows.append((f"`receipts verify` over {n} receipts", f"{time.perf_counter() - t0:.2f} s"))

        t0 = time.perf_counter()  # what compaction does with a dead writer's spool (ours is alive)
        seg = write_segment(store.log_dir, [r for f in spool_files(store.spool_dir) for r in read_spool(f)[0]])
        rows.append(("compaction of that spool into a gzip segment", f"{time.perf_counter() - t0:.2f} s"))
        raw = len(gzip.decompress(seg.read_bytes()))
        rows.append(
            (
                "log of record on disk",
                f"spool {spool_bytes / n:.0f} B/receipt → segment {seg.stat().st_size / n:.0f} B/receipt "
                f"(gzip {raw / seg.stat().st_size:.1f}×)",
            )
        )
        rows.append(("DuckDB file for those receipts", f"{store.db_path.stat().st_size / 1e6:.1f} MB"))
        t0 = time.perf_counter()
        rep = store.repair()  # reads segment and spool: every receipt twice, kept once
        assert rep.tables["receipts"] == n
        rows.append((f"`store repair` (rebuild from the log) of {n} receipts", f"{time.perf_counter() - t0:.2f} s"))
    print(f"| measured ({n} receipts, {sys.platform}) | value |\n|---|---|")
    for k, v in rows:
        print(f"| {k} | {v} |")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
