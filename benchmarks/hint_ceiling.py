"""How much can hints from replayed feedback buy on held-out questions, at most? (issue 14)

    .venv/bin/python benchmarks/hint_ceiling.py SUITE TRAIN_RUN TEST_RUN [--train dev] [--test test]
    .venv/bin/python benchmarks/hint_ceiling.py SUITE TRAIN_RUN TRAIN_RUN --halves   # dev alone

``TRAIN_RUN`` and ``TEST_RUN`` are ``engine eval`` run folders (router arm, cache off) of the two
splits: their ``per_query.jsonl`` hold each question's ranked files. The replay
(``benchmarks/replay.py``) turns a train question's judgments into feedback on the items of its
first 10, so the only files a hint can ever *confirm* are train gold files the router already
placed in a train answer's first 10; the only files it can mark *not useful* are the others of
those first 10. No hint policy — keys, a lane, a question-embedding neighbour, a bandit — knows
more than that. This script scores, on the test split:

* **promote (oracle)**: every confirmed file that is gold for the test question moved to the top
  of its answer — what a policy that always picks the right hint would reach;
* **promote + demote (oracle)**: the same, and every file marked not useful that is *not* gold
  for the test question moved below the first 10;
* **nearest question** (a policy that could be built): the confirmed files of the train questions
  whose question embedding (the semantic expert's model) has cosine ≥ τ with the test question's,
  inserted at position ``--at`` (1: first), for a few τ.

nDCG@10 with graded qrels (log2 discount, ideal from the qrels), as ``engine eval`` reports it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.evaluation.suite import load_suite  # noqa: E402

K = 10


def ndcg(ranked: Sequence[str], gains: Mapping[str, int]) -> float:
    dcg = sum(gains.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:K]))
    ideal = sorted((g for g in gains.values() if g > 0), reverse=True)[:K]
    best = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / best if best else 0.0


def rankings(run: Path) -> dict[str, list[str]]:
    rows = (json.loads(line) for line in (run / "per_query.jsonl").read_text().splitlines() if line.strip())
    return {r["qid"]: r["ranked"] for r in rows if r.get("arm") == "router"}


def insert(ranked: Sequence[str], files: Sequence[str], at: int) -> list[str]:
    head = list(ranked[: at - 1])
    moved = [f for f in files if f not in head]
    return head + moved + [d for d in ranked[at - 1 :] if d not in moved]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("suite", type=Path)
    ap.add_argument("train_run", type=Path)
    ap.add_argument("test_run", type=Path)
    ap.add_argument("--train", default="dev")
    ap.add_argument("--test", default="test")
    ap.add_argument("--halves", action="store_true", help="train: the even train questions, test: the odd ones")
    ap.add_argument("--at", type=int, default=1, help="where the nearest-question policy inserts its files")
    ap.add_argument("--model", default="minilm-l6-int8", help="the semantic expert's model (experts.yaml)")
    args = ap.parse_args(argv)

    train = load_suite(args.suite, args.train, corpus=False)
    test = load_suite(args.suite, args.test, corpus=False)
    if args.halves:  # choose on dev alone: replay its even questions, score its odd ones
        test = replace(train, queries=train.queries[1::2])
        train = replace(train, queries=train.queries[0::2])
    train_ranked, test_ranked = rankings(args.train_run), rankings(args.test_run)
    # what the replay's feedback can record: per train question, its useful and not-useful files
    useful: dict[str, list[str]] = {}
    not_useful: dict[str, set[str]] = {}
    for q in train.queries:
        top = train_ranked.get(q.id, [])[:K]
        gold = {d for d, g in train.qrels[q.id].items() if g > 0}
        useful[q.id] = [d for d in top if d in gold]
        not_useful[q.id] = {d for d in top if d not in gold}
    confirmed = {d for files in useful.values() for d in files}
    marked_bad = {d for files in not_useful.values() for d in files}

    queries = [q for q in test.queries if q.id in test_ranked]
    base = {q.id: ndcg(test_ranked[q.id], test.qrels[q.id]) for q in queries}
    n = len(queries)
    repeats = sum(1 for q in queries if any(g > 0 and d in confirmed for d, g in test.qrels[q.id].items()))
    gold_of_train = {d for q in train.queries for d, g in train.qrels[q.id].items() if g > 0}
    shares = sum(1 for q in queries if any(g > 0 and d in gold_of_train for d, g in test.qrels[q.id].items()))

    promote = 0.0
    both = 0.0
    for q in queries:
        gains = test.qrels[q.id]
        good = [d for d, g in sorted(gains.items(), key=lambda t: -t[1]) if g > 0 and d in confirmed]
        up = insert(test_ranked[q.id], good, 1)
        promote += ndcg(up, gains)
        bad = {d for d in marked_bad if gains.get(d, 0) <= 0}
        both += ndcg([d for d in up if d not in bad] + [d for d in up if d in bad], gains)

    mean = sum(base.values()) / n
    print(f"{args.suite.name}: {n} {args.test} questions, {len(train.queries)} {args.train} questions replayed")
    print(f"  share a gold file with a {args.train} question: {shares}; one the replay's feedback confirms: {repeats}")
    print(f"  router nDCG@{K}: {mean:.4f}")
    print(f"  promote (oracle):          {promote / n:.4f}  ({promote / n - mean:+.4f})")
    print(f"  promote + demote (oracle): {both / n:.4f}  ({both / n - mean:+.4f})")

    from engine.experts.semantic import shared_embedder

    embed = shared_embedder(args.model, 128, 2)
    tq = [q for q in train.queries if useful[q.id]]
    if not tq:
        return 0
    import numpy as np

    tv = embed.embed([q.text for q in tq])
    qv = embed.embed([q.text for q in queries])
    sims = qv @ tv.T
    for tau in (0.9, 0.85, 0.8, 0.75, 0.7):
        total, used = 0.0, 0
        for i, q in enumerate(queries):
            near = [j for j in np.argsort(-sims[i]) if sims[i, j] >= tau]
            files = list(dict.fromkeys(d for j in near for d in useful[tq[j].id]))
            used += bool(files)
            total += ndcg(insert(test_ranked[q.id], files, args.at), test.qrels[q.id]) if files else base[q.id]
        gain = total / n - mean
        print(f"  nearest question, cosine >= {tau}, at {args.at}: {total / n:.4f}  ({gain:+.4f}, {used} questions)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
