"""``engine tune --confidence RUN…``: fit the confidence model (:mod:`engine.confidence`) on dev runs.

Each router answer of an eval run folder carries its confidence signals; whether its first file
was relevant is the label. The model is an L2-regularised logistic regression (Newton steps) on
those pairs, each run weighted equally whatever its size, so its output estimates "the first item
is right" on the kind of questions the suites ask. Only dev splits are accepted.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .confidence import SIGNALS
from .errors import SpecError
from .tune_rerank import FIT_SPLITS


def load_pairs(run_dirs: Sequence[Path], allow_split: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Signals (one row per answered question), labels (first file relevant) and sample weights."""
    rows: list[list[float]] = []
    labels: list[float] = []
    weights: list[float] = []
    for run in run_dirs:
        try:
            metrics = json.loads((run / "metrics.json").read_text("utf-8"))
            split = metrics["suite"]["split"]
            data = [json.loads(line) for line in (run / "per_query.jsonl").read_text("utf-8").splitlines() if line]
        except (OSError, ValueError, KeyError) as exc:
            raise SpecError(f"{run}: not an engine eval run folder ({exc})") from None
        if split not in FIT_SPLITS and not allow_split:
            raise SpecError(f"{run}: split {split!r} is not a dev split; fit on dev, report on test/heldout")
        mine = [r for r in data if r.get("arm") == "router" and (r.get("confidence") or {}).get("signals")]
        for r in mine:
            sig = r["confidence"]["signals"]
            rows.append([float(sig.get(s, 0.0)) for s in SIGNALS])
            labels.append(float(bool(r["ranked"]) and r["ranked"][0] in r["relevant"]))
            weights.append(1.0 / len(mine))
    if not rows:
        raise SpecError("no router answers with confidence signals in these runs (is a confidence model configured?)")
    # each run weighs the same; in all, as much as the questions (so the L2 term is one "question")
    return np.asarray(rows), np.asarray(labels), np.asarray(weights) * len(labels) / len(run_dirs)


def fit_logistic(x: np.ndarray, y: np.ndarray, w: np.ndarray, l2: float = 1.0, steps: int = 50) -> np.ndarray:
    """Weights (bias first) of a logistic regression by Newton's method, L2 on the slopes."""
    xb = np.hstack([np.ones((len(x), 1)), x])
    beta = np.zeros(xb.shape[1])
    reg = np.full(xb.shape[1], l2)
    reg[0] = 0.0
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-np.clip(xb @ beta, -30, 30)))
        grad = xb.T @ (w * (p - y)) + reg * beta
        hess = (xb * (w * p * (1 - p))[:, None]).T @ xb + np.diag(reg) + 1e-9 * np.eye(len(beta))
        step = np.linalg.solve(hess, grad)
        beta -= step
        if np.abs(step).max() < 1e-8:
            break
    return beta


def tune_confidence(run_dirs: Sequence[Path], *, allow_split: bool = False) -> tuple[dict[str, float], dict[str, Any]]:
    """The fitted model (``bias`` and a weight per signal) and an in-sample calibration report."""
    x, y, w = load_pairs(run_dirs, allow_split)
    beta = fit_logistic(x, y, w)
    model = {"bias": round(float(beta[0]), 4)} | {s: round(float(b), 4) for s, b in zip(SIGNALS, beta[1:], strict=True)}
    p = 1.0 / (1.0 + np.exp(-np.clip(np.hstack([np.ones((len(x), 1)), x]) @ beta, -30, 30)))
    bins = {}
    for lo, hi in ((0.0, 0.5), (0.5, 0.8), (0.8, 1.01)):
        mask = (p >= lo) & (p < hi)
        if mask.any():
            bins[f"{lo:.1f}-{min(hi, 1.0):.1f}"] = {"n": int(mask.sum()), "acc@1": round(float(y[mask].mean()), 3)}
    return model, {"questions": len(y), "acc@1": round(float(y.mean()), 3), "bins": bins}
