"""Index throughput and query latency of the symbols, typed and docs experts on a real corpus.

    python benchmarks/symbols_bench.py --workspace DIR [--workspace DIR2 ...] [--queries 200]

Builds the indexes in a temporary data dir (never the workspace's own ``.engine``), then asks
each expert sampled questions about names that exist in the index (fixed seed), timing
``search`` end to end as the fan-out would (thread hop, sqlite look-up, evidence). The typed
index runs jedi over every Python file, so its build is the slow part of this benchmark.
Prints one JSON document; docs/experts-index.md records the numbers.
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from engine.classifier import classify
from engine.experts import ExpertEnv, adapter_class
from engine.indexing import index_workspace
from engine.spec import load_config
from engine.types import Query, Scope
from engine.workspace import Workspace

ROOT = Path(__file__).resolve().parent.parent


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q * len(values)))], 2) if values else 0.0


def sample_names(db: Path, n: int, kinds: tuple[str, ...], seed: int = 7) -> list[str]:
    """Distinct definition names of ``kinds`` from a symbols index (``tags``) or the typed index (``defs``)."""
    conn = sqlite3.connect(db)
    typed = db.name == "typed.sqlite3"
    table, kind = ("defs", "type") if typed else ("tags", "role='definition' AND kind")
    sql = f"SELECT DISTINCT name FROM {table} WHERE {kind} IN ({{}}) AND length(name) > 3 ORDER BY name"
    rows = conn.execute(sql.format(",".join("?" * len(kinds))), kinds).fetchall()
    if typed:
        counts = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("defs", "refs", "bases")}
    else:
        counts = dict(conn.execute("SELECT role, count(*) FROM tags GROUP BY role").fetchall())
    print(
        json.dumps(
            {
                "index": str(db),
                "rows": counts,
                "distinct_names": len(rows),
                "size_mb": round(db.stat().st_size / 1e6, 1),
            }
        )
    )
    random.Random(seed).shuffle(rows)
    return [r[0] for r in rows[:n]]


def timed(workspace: Workspace, name: str, questions: list[str], limit: int = 30) -> dict[str, Any]:
    cfg = load_config(ROOT)
    expert = adapter_class(cfg.experts[name].adapter)(cfg.experts[name], ExpertEnv(workspace))
    lat: list[float] = []
    hits = 0

    async def go() -> None:
        nonlocal hits
        for q in questions:
            c = classify(q, cfg.classifier, 0.5)
            query = Query(
                question=q, klass=c.klass, features=c.features, scope=Scope(), projects=workspace.projects, limit=limit
            )
            started = time.perf_counter()
            items = await expert.search(query, expert.plan(query))
            lat.append((time.perf_counter() - started) * 1000)
            hits += bool(items)

    anyio.run(go)
    return {
        "expert": name,
        "queries": len(questions),
        "with_results": hits,
        "first_ms": round(lat[0], 2),
        "p50_ms": pct(lat, 0.5),
        "p95_ms": pct(lat, 0.95),
        "max_ms": round(max(lat), 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workspace", action="append", required=True, type=Path)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--typed-queries", type=int, default=200)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as data:
        ws = Workspace.open(args.workspace, data_dir=Path(data))
        cfg = load_config(ROOT)
        for name in ("symbols", "typed", "docs"):
            for r in index_workspace(ws, cfg, only=[name], progress=False):
                print(json.dumps(r.to_dict()))
        index_dir = Path(data) / "index"
        names = sample_names(
            index_dir / "symbols" / "symbols.sqlite3",
            args.queries,
            ("class", "function", "method", "interface", "struct"),
        )
        classes = sample_names(index_dir / "symbols" / "symbols.sqlite3", args.queries, ("class",))
        for mode, qs in (
            ("definitions", [f"where is {n} defined" for n in names]),
            ("references", [f"who calls {n}" for n in names]),
            ("subclasses", [f"what subclasses {n}" for n in classes]),
        ):
            print(json.dumps({"mode": mode, **timed(ws, "symbols", qs)}))
        typed_db = index_dir / "typed" / "typed.sqlite3"
        py = sample_names(typed_db, args.typed_queries, ("class", "function"))
        py_classes = sample_names(typed_db, args.typed_queries, ("class",))
        for mode, qs in (
            ("definitions", [f"where is {n} defined" for n in py]),
            ("references", [f"who calls {n}" for n in py]),
            ("subclasses", [f"what subclasses {n}" for n in py_classes]),
        ):
            print(json.dumps({"mode": mode, **timed(ws, "typed", qs)}))
        print(json.dumps({"mode": "docs", **timed(ws, "docs", [f"how do I configure {n}" for n in names[:50]])}))


if __name__ == "__main__":
    main()
