"""Quality, selection, latency and receipt metrics for one arm, per class and overall (DESIGN §10).

Ranking metrics come from ranx (nDCG@10 with linear gains as in Järvelin & Kekäläinen, MRR@10,
Recall@10, and hit rate @1/5/10 reported as Acc@k: "at least one relevant file in the top k"),
computed per query once and averaged per class here, so a class mean and the overall mean use
the same per-query numbers. Runs are handed to ranx with strictly decreasing scores derived from
rank, so ranx never re-orders ties differently from the order the router returned.

Selection is judged at the adapter level: an expert id (selected or gold) maps to its adapter
kind through experts.yaml, so a gold label ``bm25`` matches a configured expert named
``bm25-code`` with ``adapter: bm25``. Unknown gold names are compared as given.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import MissingDependency

K = 10
RANX_METRICS = {
    "ndcg@10": "ndcg@10",
    "mrr@10": "mrr@10",
    "recall@10": "recall@10",
    "acc@1": "hit_rate@1",
    "acc@5": "hit_rate@5",
    "acc@10": "hit_rate@10",
}


@dataclass
class QueryResult:
    """One query answered by one arm: the file-level ranking plus what its receipt said."""

    qid: str
    arm: str
    ranked: list[str]  # corpus ids, best first, each file once
    latency_ms: float
    klass: str  # the class it is reported under (gold class, else the router's)
    predicted_class: str | None = None
    abstained: bool | None = None
    selected: list[str] | None = None  # experts the gate selected (None for the peer)
    expert_latency_ms: dict[str, float] = field(default_factory=dict)
    expert_status: dict[str, str] = field(default_factory=dict)
    receipt_ok: bool | None = None  # present and verifying; None for arms without receipts
    error: str | None = None
    receipt_id: str | None = None
    config_version: str | None = None  # from the receipt: what actually answered
    confidence: dict[str, Any] | None = None  # the answer's confidence (score, label)
    rerank: str | None = None  # the rerank weight set that ordered the answer, if any
    features: list[dict[str, Any]] = field(default_factory=list)  # per item: doc + rerank features
    node_ms: dict[str, float] = field(default_factory=dict)  # "<pipeline>.<node>" → its run time


def percentiles(values: Sequence[float]) -> dict[str, float | None]:
    """p50/p95/p99/mean in ms (linear interpolation, as numpy); ``None`` when there is nothing."""
    if not values:
        return {"p50": None, "p95": None, "p99": None, "mean": None, "n": 0}
    arr = np.asarray(values, dtype=float)
    return {
        "p50": round(float(np.percentile(arr, 50)), 2),
        "p95": round(float(np.percentile(arr, 95)), 2),
        "p99": round(float(np.percentile(arr, 99)), 2),
        "mean": round(float(arr.mean()), 2),
        "n": len(values),
    }


def selection_prf(
    selected: Sequence[str], gold: Sequence[str], kind_of: Mapping[str, str]
) -> tuple[float, float, float]:
    """Precision, recall, F1 of the selected experts against the gold set, compared by adapter kind."""
    s = {kind_of.get(n, n) for n in selected}
    g = {kind_of.get(n, n) for n in gold}
    if not s and not g:
        return 1.0, 1.0, 1.0
    hit = len(s & g)
    p = hit / len(s) if s else 0.0
    r = hit / len(g) if g else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return p, r, f


def ranking_scores(
    results: Sequence[QueryResult], qrels: Mapping[str, Mapping[str, int]]
) -> dict[str, dict[str, float]]:
    """``qid → {metric: value}`` from ranx, for every query of ``results``."""
    try:
        from ranx import Qrels, Run, evaluate
    except ImportError as exc:
        raise MissingDependency(
            "engine eval needs ranx for its metrics: pip install 'search-router-engine[eval]'"
        ) from exc
    qids = [r.qid for r in results]
    if not any(r.ranked for r in results):  # ranx cannot build an empty run: every metric is 0 by definition
        return {qid: {ours: 0.0 for ours in RANX_METRICS} for qid in qids}
    q = Qrels({qid: dict(qrels[qid]) for qid in qids})
    run = Run({r.qid: {doc: float(len(r.ranked) - i) for i, doc in enumerate(r.ranked)} for r in results})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numba type-safety chatter, not ours to fix
        evaluate(q, run, list(RANX_METRICS.values()), make_comparable=True)
    return {qid: {ours: float(run.scores[theirs][qid]) for ours, theirs in RANX_METRICS.items()} for qid in qids}


def _mean(values: Sequence[float]) -> float | None:
    return round(float(np.mean(values)), 4) if values else None


def group_summary(
    results: Sequence[QueryResult],
    scores: Mapping[str, Mapping[str, float]],
    gold_experts: Mapping[str, Sequence[str] | None],
    kind_of: Mapping[str, str],
) -> dict[str, Any]:
    """Every metric for one group of queries of one arm."""
    out: dict[str, Any] = {"n": len(results)}
    for m in RANX_METRICS:
        out[m] = _mean([scores[r.qid][m] for r in results])
    sel = [
        selection_prf(r.selected, gold_experts[r.qid] or (), kind_of)
        for r in results
        if r.selected is not None and gold_experts.get(r.qid) is not None
    ]
    out["selection"] = {
        "precision": _mean([s[0] for s in sel]),
        "recall": _mean([s[1] for s in sel]),
        "f1": _mean([s[2] for s in sel]),
        "n": len(sel),
    }
    out["latency_ms"] = percentiles([r.latency_ms for r in results])
    overhead = [r.latency_ms - max(r.expert_latency_ms.values()) for r in results if r.expert_latency_ms]
    out["router_overhead_ms"] = percentiles(overhead)
    with_receipts = [r for r in results if r.receipt_ok is not None]
    out["receipts"] = {
        "rate": round(sum(bool(r.receipt_ok) for r in with_receipts) / len(with_receipts), 4)
        if with_receipts
        else None,
        "n": len(with_receipts),
    }
    out["errors"] = sum(1 for r in results if r.error)
    return out


def expert_latency(results: Sequence[QueryResult]) -> dict[str, Any]:
    """Per expert: latency percentiles and how often each status came back."""
    names = sorted({n for r in results for n in r.expert_latency_ms})
    out: dict[str, Any] = {}
    for n in names:
        lat = [r.expert_latency_ms[n] for r in results if n in r.expert_latency_ms]
        statuses: dict[str, int] = {}
        for r in results:
            if n in r.expert_status:
                statuses[r.expert_status[n]] = statuses.get(r.expert_status[n], 0) + 1
        out[n] = {"latency_ms": percentiles(lat), "calls": len(lat), "status": statuses}
    return out


def arm_summary(
    results: Sequence[QueryResult],
    qrels: Mapping[str, Mapping[str, int]],
    gold_experts: Mapping[str, Sequence[str] | None],
    kind_of: Mapping[str, str],
) -> dict[str, Any]:
    """Overall and per-class metrics, per-expert latency and the classifier's agreement with gold classes."""
    scores = ranking_scores(results, qrels)
    classes: dict[str, list[QueryResult]] = {}
    for r in results:
        classes.setdefault(r.klass, []).append(r)
    summary: dict[str, Any] = {
        "overall": group_summary(results, scores, gold_experts, kind_of),
        "classes": {c: group_summary(rs, scores, gold_experts, kind_of) for c, rs in sorted(classes.items())},
        "experts": expert_latency(results),
    }
    predicted = [r for r in results if r.predicted_class is not None]
    if predicted:
        dist: dict[str, int] = {}
        for r in predicted:
            key = "abstained" if r.abstained else str(r.predicted_class)
            dist[key] = dist.get(key, 0) + 1
        summary["predicted_classes"] = dict(sorted(dist.items()))
    nodes: dict[str, list[float]] = {}
    for r in results:
        for node, ms in r.node_ms.items():
            nodes.setdefault(node, []).append(ms)
    if nodes:
        summary["nodes"] = {n: percentiles(v) for n, v in sorted(nodes.items())}
    table = confidence_table(results, scores)
    if table:
        summary["confidence"] = table
    return summary


LABELS = ("high", "medium", "low", "none")


def confidence_table(results: Sequence[QueryResult], scores: Mapping[str, Mapping[str, float]]) -> dict[str, Any]:
    """Confidence label → questions, observed Acc@1 and Acc@5: what each label meant on this suite."""
    by_label: dict[str, list[str]] = {}
    for r in results:
        label = (r.confidence or {}).get("label")
        if label:
            by_label.setdefault(str(label), []).append(r.qid)
    out = {}
    for label in sorted(by_label, key=lambda x: LABELS.index(x) if x in LABELS else len(LABELS)):
        qids = by_label[label]
        out[label] = {
            "n": len(qids),
            "acc@1": round(float(np.mean([scores[q]["acc@1"] for q in qids])), 4),
            "acc@5": round(float(np.mean([scores[q]["acc@5"] for q in qids])), 4),
        }
    return out
