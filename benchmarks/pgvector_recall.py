"""pgvector vs the exact numpy vector store on cosqa (docs/scale.md): recall@10 against the exact
answer, retrieval quality against the qrels, and per-query latency, side by side.

    .venv/bin/python benchmarks/pgvector_recall.py [--suite /work/shared/eval/cosqa] [--url postgresql://…]

The corpus (6,267 functions) and the test queries are embedded once with engine/embedding.py
(all-MiniLM-L6-v2 int8, max_len 128) and cached under ``--cache``; without ``--url`` a throwaway
PostgreSQL cluster with pgvector is started (engine/store/pgcluster.py: the pgserver wheel).
Arms: numpy exact (engine/vectors.py), pgvector exact (sequential scan), pgvector HNSW
(m 16, ef_construction 64) at ef_search 40 and 100.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from engine.embedding import Embedder
from engine.evaluation.metrics import percentiles
from engine.vectors import VectorStore


def load_suite(suite: Path, split: str) -> tuple[list[str], list[str], list[str], list[str], dict[str, set[str]]]:
    docs = [json.loads(line) for line in (suite / "corpus.jsonl").read_text().splitlines() if line.strip()]
    qrels: dict[str, set[str]] = {}
    for line in (suite / "qrels" / f"{split}.tsv").read_text().splitlines()[1:]:
        qid, did, score = line.split("\t")
        if int(score) > 0:
            qrels.setdefault(qid, set()).add(did)
    queries = [json.loads(line) for line in (suite / "queries.jsonl").read_text().splitlines() if line.strip()]
    queries = [q for q in queries if q["_id"] in qrels]
    return (
        [d["_id"] for d in docs],
        [d["text"] for d in docs],
        [q["_id"] for q in queries],
        [q["text"] for q in queries],
        qrels,
    )


def embeddings(cache: Path, doc_texts: list[str], query_texts: list[str]) -> tuple[np.ndarray, np.ndarray, float]:
    """Corpus and query vectors, computed once and cached; returns them and the corpus embed rate."""
    cache.mkdir(parents=True, exist_ok=True)
    emb = Embedder("minilm-l6-int8", max_len=128, threads=2)
    meta = cache / "meta.json"
    if meta.exists() and json.loads(meta.read_text()).get("model_id") == emb.model_id:
        m = json.loads(meta.read_text())
        return np.load(cache / "corpus.npy"), np.load(cache / "queries.npy"), float(m["docs_per_s"])
    t = time.perf_counter()
    docs = emb.embed(doc_texts, batch_size=32)
    rate = len(doc_texts) / (time.perf_counter() - t)
    queries = emb.embed(query_texts, batch_size=32)
    np.save(cache / "corpus.npy", docs)
    np.save(cache / "queries.npy", queries)
    meta.write_text(json.dumps({"model_id": emb.model_id, "docs_per_s": rate, "docs": len(doc_texts)}))
    return docs, queries, rate


def quality(ranked: list[list[str]], qids: list[str], qrels: dict[str, set[str]]) -> dict[str, float]:
    ndcg = mrr = 0.0
    for qid, ids in zip(qids, ranked, strict=True):
        rel = qrels[qid]
        ideal = sum(1 / math.log2(i + 2) for i in range(min(len(rel), 10)))
        ndcg += sum(1 / math.log2(i + 2) for i, d in enumerate(ids[:10]) if d in rel) / ideal
        mrr += next((1 / (i + 1) for i, d in enumerate(ids[:10]) if d in rel), 0.0)
    return {"ndcg@10": round(ndcg / len(qids), 4), "mrr@10": round(mrr / len(qids), 4)}


def plan(url: str, table: str, q: np.ndarray, exact: bool, ef: int) -> str:
    """The plan PostgreSQL picks for one query of an arm: an index scan on the HNSW index, or not."""
    import psycopg

    from engine.vectors_pg import _literal

    lit = _literal(q / np.linalg.norm(q))
    with psycopg.connect(url, autocommit=True) as con, con.transaction():
        if exact:
            con.execute("SET LOCAL enable_indexscan = off")
        else:
            con.execute("SET LOCAL enable_seqscan = off")
            con.execute(f"SET LOCAL hnsw.ef_search = {ef}")
        order = "embedding <=> %s::vector, id" if exact else "embedding <=> %s::vector"
        rows = con.execute(f"EXPLAIN SELECT id FROM {table} ORDER BY {order} LIMIT 10", [lit]).fetchall()
    return " / ".join(r[0].strip() for r in rows if "Scan" in r[0])


def run_arm(search: Any, queries: np.ndarray) -> tuple[list[list[str]], dict[str, Any]]:
    for q in queries[:20]:  # warm-up: caches, plans
        search(q)
    ranked, lat = [], []
    for q in queries:
        t = time.perf_counter()
        ranked.append([i for i, _ in search(q)])
        lat.append((time.perf_counter() - t) * 1000)
    return ranked, percentiles(lat)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", type=Path, default=Path("/work/shared/eval/cosqa"))
    ap.add_argument("--split", default="test")
    ap.add_argument("--url", help="a PostgreSQL with pgvector (default: a throwaway cluster)")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "engine-cosqa-embeddings")
    ap.add_argument("--json", type=Path, help="also write the result here")
    args = ap.parse_args()

    doc_ids, doc_texts, qids, qtexts, qrels = load_suite(args.suite, args.split)
    docs, queries, rate = embeddings(args.cache, doc_texts, qtexts)
    work = Path(tempfile.mkdtemp(prefix="engine-vec-bench-"))
    result: dict[str, Any] = {
        "corpus": len(doc_ids),
        "queries": len(qids),
        "embed_docs_per_s": round(rate, 1),
        "load_avg_1m": os.getloadavg()[0],
    }

    np_store = VectorStore(work / "numpy", model_id="bench")
    t = time.perf_counter()
    np_store.add(doc_ids, docs)
    np_store.save()
    result["numpy_build_s"] = round(time.perf_counter() - t, 2)
    exact, lat = run_arm(lambda q: np_store.search(q, 10), queries)
    arms = {"numpy exact": (exact, lat)}

    from engine.store.pgcluster import start_cluster
    from engine.vectors_pg import PgVectorStore

    cluster = None if args.url else start_cluster(vector=True)
    url = args.url or (cluster.url if cluster else "")
    try:
        pg = PgVectorStore(work / "pg", model_id="bench", url=url)
        t = time.perf_counter()
        pg.add(doc_ids, docs)
        pg.save()  # COPY every row, then build the HNSW index
        result["pgvector_build_s"] = round(time.perf_counter() - t, 2)
        result["server"] = str(cluster.bin_dir) if cluster else "given"
        pg.exact = True
        arms["pgvector exact (scan)"] = run_arm(lambda q: pg.search(q, 10), queries)
        plans = {"pgvector exact (scan)": plan(url, str(pg._table), queries[0], True, 40)}
        pg.exact = False
        for ef in (40, 100):
            pg.ef_search = ef
            name = f"pgvector HNSW ef_search={ef}"
            arms[name] = run_arm(lambda q: pg.search(q, 10), queries)
            plans[name] = plan(url, str(pg._table), queries[0], False, ef)
        result["plans"] = plans
        pg.close()
    finally:
        if cluster is not None:
            cluster.close()

    rows = []
    for name, (ranked, lat) in arms.items():
        recall = float(np.mean([len(set(r) & set(e)) / 10 for r, e in zip(ranked, exact, strict=True)]))
        rows.append({"arm": name, "recall@10_vs_exact": round(recall, 4), **quality(ranked, qids, qrels), "ms": lat})
    result["arms"] = rows
    result["load_avg_1m_after"] = os.getloadavg()[0]
    print("| arm | recall@10 vs exact | nDCG@10 | MRR@10 | p50 / p95 / p99 ms per query |")
    print("|---|---|---|---|---|")
    for r in rows:
        ms = r["ms"]
        print(
            f"| {r['arm']} | {r['recall@10_vs_exact']} | {r['ndcg@10']} | {r['mrr@10']} | "
            f"{ms['p50']} / {ms['p95']} / {ms['p99']} |"
        )
    print(json.dumps({k: v for k, v in result.items() if k != "arms"}))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
