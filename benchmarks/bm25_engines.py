"""Measure the two offline BM25 engines on one real snapshot: build time, query latency, quality.

    python benchmarks/bm25_engines.py ../shared/eval/swebench-lite-files django@3.0

Both engines get the same code-aware tokens (engine.index.tokenize.code_tokens) over whole
files (path + text); quality is Acc@5 / MRR@10 for the snapshot's queries. The numbers go in
docs/adr/0002-bm25-engine.md.
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from engine.index.tokenize import code_tokens


def load(suite: Path, snapshot: str) -> tuple[dict[str, str], list[tuple[str, str]], dict[str, str]]:
    docs = {}
    with gzip.open(suite / "corpus.jsonl.gz", "rt") as fh:
        for line in fh:
            d = json.loads(line)
            if d["metadata"]["snapshot"] == snapshot:
                docs[d["_id"]] = d["title"] + "\n" + d["text"]
    queries = [
        (q["_id"], q["text"])
        for q in map(json.loads, (suite / "queries.jsonl").read_text().splitlines())
        if q["metadata"]["snapshot"] == snapshot
    ]
    gold = {}
    for line in (suite / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        qid, did, _ = line.split("\t")
        gold[qid] = did
    return docs, queries, gold


def metrics(ranked: dict[str, list[str]], gold: dict[str, str]) -> tuple[float, float]:
    acc5 = statistics.mean(gold[q] in r[:5] for q, r in ranked.items())
    mrr = statistics.mean(
        next((1 / (i + 1) for i, d in enumerate(r[:10]) if d == gold[q]), 0.0) for q, r in ranked.items()
    )
    return acc5, mrr


def main() -> None:
    suite, snapshot = Path(sys.argv[1]), sys.argv[2]
    docs, queries, gold = load(suite, snapshot)
    ids = list(docs)
    tokens = [code_tokens(docs[i]) for i in ids]
    print(f"{snapshot}: {len(ids)} files, {len(queries)} queries")

    import tantivy

    t = time.perf_counter()
    sb = tantivy.SchemaBuilder()
    sb.add_text_field("id", stored=True, tokenizer_name="raw")
    sb.add_text_field("body", tokenizer_name="whitespace")
    schema = sb.build()
    index = tantivy.Index(schema, path=tempfile.mkdtemp())
    w = index.writer(heap_size=200_000_000, num_threads=1)
    for i, toks in zip(ids, tokens, strict=False):
        w.add_document(tantivy.Document(id=i, body=" ".join(toks)))
    w.commit()
    w.wait_merging_threads()
    index.reload()
    build_t = time.perf_counter() - t
    searcher = index.searcher()
    ranked, lat = {}, []
    for qid, text in queries:
        qt = sorted(set(code_tokens(text, stop_words=True)))[:96]
        t = time.perf_counter()
        q = tantivy.Query.boolean_query(
            [(tantivy.Occur.Should, tantivy.Query.term_query(schema, "body", x)) for x in qt]
        )
        hits = searcher.search(q, 10).hits
        lat.append((time.perf_counter() - t) * 1000)
        ranked[qid] = [searcher.doc(a)["id"][0] for _, a in hits]
    print(
        f"tantivy  build {build_t:.2f}s  query p50 {statistics.median(lat):.2f} ms  "
        f"Acc@5 {metrics(ranked, gold)[0]:.3f} MRR@10 {metrics(ranked, gold)[1]:.3f}"
    )

    import bm25s

    t = time.perf_counter()
    retriever = bm25s.BM25()
    retriever.index(tokens, show_progress=False)
    build_t = time.perf_counter() - t
    ranked, lat = {}, []
    for qid, text in queries:
        qt = [x for x in set(code_tokens(text, stop_words=True))][:96]
        t = time.perf_counter()
        res, _ = retriever.retrieve([qt], k=10, show_progress=False)
        lat.append((time.perf_counter() - t) * 1000)
        ranked[qid] = [ids[j] for j in res[0]]
    print(
        f"bm25s    build {build_t:.2f}s  query p50 {statistics.median(lat):.2f} ms  "
        f"Acc@5 {metrics(ranked, gold)[0]:.3f} MRR@10 {metrics(ranked, gold)[1]:.3f}"
    )


if __name__ == "__main__":
    main()
