"""``engine tune --rerank RUN…``: fit the rerank node's weight sets from eval runs of dev splits.

Each ``engine eval`` run folder holds, per question of the router arm, the weight set that
ordered its answer (``rerank``) and every candidate's features (``features``: the item's corpus
id and its ``rr.*`` sub-scores, in answer order). For each weight set this module searches the
weights that maximise nDCG@10 at file level (the eval's own measure: a file's rank is that of its
first item) over the runs' questions that used the set, by coordinate ascent (as RankLib's
``CoorAscent``): one weight at a time over a fixed grid of steps, from the current weights and
from each expert's own ranking, kept only when the gain is worth at least half a question's nDCG
(so a weight set seen on a handful of questions barely moves), a few passes. A run weighs as many
questions as it has, up to :data:`RUN_CAP`: a 500-question suite cannot drown a 60-question one,
and two questions of one suite cannot outweigh sixty of another.

Only runs of a dev split are accepted (``metrics.json: suite.split``): weights fitted on the
split that reports the result would be tuned to it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import SpecError
from .rerank import SOURCE_PREFIX, score

STEPS = (-1.0, -0.5, -0.25, -0.1, -0.05, 0.05, 0.1, 0.25, 0.5, 1.0)
RUN_CAP = 50
FIT_SPLITS = ("dev", "train")


@dataclass(frozen=True)
class Question:
    run: str
    qid: str
    relevant: Mapping[str, int]
    candidates: tuple[tuple[str, Mapping[str, float]], ...]  # (doc, features) in answer order


def ndcg_at_10(ranked: Sequence[str], relevant: Mapping[str, int]) -> float:
    """nDCG@10 with linear gains (Järvelin & Kekäläinen), as the eval reports it."""
    dcg = sum(relevant.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:10]))
    ideal = sorted(relevant.values(), reverse=True)[:10]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def ranking(q: Question, weights: Mapping[str, float]) -> list[str]:
    """Files in the order the weights give the candidates (ties: the answer's order)."""
    order = sorted(range(len(q.candidates)), key=lambda i: (-score(q.candidates[i][1], weights), i))
    files: list[str] = []
    for i in order:
        doc = q.candidates[i][0]
        if doc not in files:
            files.append(doc)
    return files


def per_run(questions: Sequence[Question], weights: Mapping[str, float]) -> dict[str, float]:
    """Each run's mean nDCG@10 over its questions."""
    out: dict[str, list[float]] = {}
    for q in questions:
        out.setdefault(q.run, []).append(ndcg_at_10(ranking(q, weights), q.relevant))
    return {run: sum(v) / len(v) for run, v in out.items()}


def run_weights(questions: Sequence[Question]) -> dict[str, float]:
    """Each run's weight: its number of questions, capped at :data:`RUN_CAP`."""
    sizes: dict[str, int] = {}
    for q in questions:
        sizes[q.run] = sizes.get(q.run, 0) + 1
    return {run: float(min(n, RUN_CAP)) for run, n in sizes.items()}


def objective(questions: Sequence[Question], weights: Mapping[str, float]) -> float:
    """The runs' mean nDCG@10, each run weighted by :func:`run_weights`."""
    runs = per_run(questions, weights)
    w = run_weights(questions)
    return sum(w[r] * v for r, v in runs.items()) / sum(w.values()) if runs else 0.0


def fit(
    questions: Sequence[Question], start: Mapping[str, float], *, passes: int = 4, min_gain: float = 0.002
) -> dict[str, float]:
    """The best of coordinate ascents from ``start`` and from each expert's own ranking."""
    sources = sorted({k for q in questions for _, f in q.candidates for k in f if k.startswith(SOURCE_PREFIX)})
    starts = [dict(start), *({"rrf": 0.5, s: 1.0} for s in sources)]
    fits = [ascend(questions, s, passes=passes, min_gain=min_gain) for s in starts]
    return max(fits, key=lambda w: objective(questions, w))  # ties: the first (the current weights)


def ascend(
    questions: Sequence[Question], start: Mapping[str, float], *, passes: int = 4, min_gain: float = 0.002
) -> dict[str, float]:
    """Coordinate ascent from ``start`` over every feature the questions carry."""
    names = sorted({k for q in questions for _, f in q.candidates for k in f} | set(start))
    weights = {k: float(start.get(k, 0.0)) for k in names}
    min_gain = max(min_gain, 0.5 / max(sum(run_weights(questions).values()), 1.0))
    best = objective(questions, weights)
    for _ in range(passes):
        improved = False
        for name in names:
            current = weights[name]
            trial_best, trial_w = best, current
            for step in STEPS:
                w = round(current + step, 4)
                if abs(w) > 10:
                    continue
                value = objective(questions, {**weights, name: w})
                if value > trial_best + min_gain:
                    trial_best, trial_w = value, w
            if trial_w != current:
                weights[name], best, improved = trial_w, trial_best, True
        if not improved:
            break
    return {k: v for k, v in weights.items() if v}


def load_questions(run_dirs: Sequence[Path], allow_split: bool = False) -> dict[str, list[Question]]:
    """Weight set → its questions, from the router arm of each run (dev splits only)."""
    out: dict[str, list[Question]] = {}
    for run in run_dirs:
        try:
            metrics = json.loads((run / "metrics.json").read_text("utf-8"))
            split = metrics["suite"]["split"]
            name = f"{metrics['suite']['name']}:{split}"
            rows = [json.loads(line) for line in (run / "per_query.jsonl").read_text("utf-8").splitlines() if line]
        except (OSError, ValueError, KeyError) as exc:
            raise SpecError(f"{run}: not an engine eval run folder ({exc})") from None
        if split not in FIT_SPLITS and not allow_split:
            raise SpecError(f"{run}: split {split!r} is not a dev split; fit on dev, report on test/heldout")
        for r in rows:
            if r.get("arm") != "router" or not r.get("rerank") or not r.get("features"):
                continue
            cands = tuple((c["doc"], dict(c["f"])) for c in r["features"])
            out.setdefault(r["rerank"], []).append(Question(name, r["qid"], dict(r["relevant"]), cands))
    return out


def tune_rerank(
    run_dirs: Sequence[Path], current: Mapping[str, Mapping[str, float]], *, allow_split: bool = False
) -> tuple[dict[str, dict[str, float]], list[dict[str, Any]]]:
    """New weight sets and one report row per set (questions, nDCG@10 before → after)."""
    sets = {name: dict(w) for name, w in current.items()}
    rows: list[dict[str, Any]] = []
    for name, questions in sorted(load_questions(run_dirs, allow_split).items()):
        start = sets.get(name, {"rrf": 1.0})
        before = objective(questions, start)
        fitted = fit(questions, start)
        sets[name] = fitted
        before_runs, after_runs = per_run(questions, start), per_run(questions, fitted)
        rows.append(
            {
                "set": name,
                "questions": len(questions),
                "runs": {r: [round(before_runs[r], 4), round(after_runs[r], 4)] for r in sorted(before_runs)},
                "ndcg@10_before": round(before, 4),
                "ndcg@10_after": round(objective(questions, fitted), 4),
                "weights": fitted,
            }
        )
    return sets, rows
