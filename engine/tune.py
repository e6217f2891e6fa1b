"""``engine tune``: propose per-class expert priors from measured evidence, never by hand-waving.

Input is one or more ``metrics.json`` files written by ``engine eval`` with single-expert arms
(each expert run alone over the same queries). For every class with at least ``min_queries``
queries, an expert's proposed prior is its metric (nDCG@10 by default) divided by the best
single expert's in that class, rounded to ``step``; an expert below ``floor`` is dropped from
the class. Several suites combine by query-weighted average. Experts no eval measured keep
their current prior, classes no eval measured are left alone.

The output is a complete priors.yaml (written only with ``--out``) and a table old → new, so
the change can be reviewed with ``engine diff`` and judged with ``engine eval compare`` before
it ships.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import yaml

from .errors import SpecError

NON_EXPERT_ARMS = {"router", "bm25-peer"}


def _round(x: float, step: float) -> float:
    return round(round(x / step) * step, 4)


def measured_ratios(
    metrics_files: list[Path], metric: str, min_queries: int
) -> dict[str, dict[str, tuple[float, int]]]:
    """class → expert → (query-weighted ratio to the best single expert, queries)."""
    acc: dict[str, dict[str, list[float]]] = {}
    for f in metrics_files:
        try:
            arms = json.loads(f.read_text())["arms"]
        except (OSError, ValueError, KeyError) as exc:
            raise SpecError(f"{f}: not an engine eval metrics.json ({exc})") from None
        experts = {a: v for a, v in arms.items() if a not in NON_EXPERT_ARMS and v.get("kind") != "peer"}
        classes = {c for v in experts.values() for c in v.get("classes", {})} - {"abstained"}
        for c in classes:
            vals = {e: v["classes"][c] for e, v in experts.items() if c in v.get("classes", {})}
            for e, m in vals.items():
                value = m.get(metric)
                if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value)):
                    raise SpecError(f"{f}: arm {e!r}, class {c!r}: {metric} is {value!r}, not a finite number")
            n = max((m.get("n", 0) for m in vals.values()), default=0)
            best = max((m.get(metric) or 0.0 for m in vals.values()), default=0.0)
            if n < min_queries or best <= 0:
                continue
            for e, m in vals.items():
                ratio = (m.get(metric) or 0.0) / best
                slot = acc.setdefault(c, {}).setdefault(e, [0.0, 0])
                slot[0] += ratio * n
                slot[1] += n
    return {c: {e: (s / n, int(n)) for e, (s, n) in es.items()} for c, es in acc.items()}


def propose(
    raw_priors: dict[str, Any], ratios: dict[str, dict[str, tuple[float, int]]], *, floor: float, step: float
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    new = copy.deepcopy(raw_priors)
    rows: list[dict[str, Any]] = []
    for c, experts in sorted(ratios.items()):
        weights = new["classes"].setdefault(c, {})
        for e, (ratio, n) in sorted(experts.items()):
            old = weights.get(e)
            w = _round(ratio, step)
            if w < floor:
                weights.pop(e, None)
                w_out: float | None = None
            else:
                weights[e] = w
                w_out = w
            rows.append({"class": c, "expert": e, "old": old, "new": w_out, "ratio": round(ratio, 3), "queries": n})
    return new, rows


def write_proposal(out: Path, config_dir: Path, new: dict[str, Any], header: str) -> None:
    """``new`` written over the current priors.yaml's text: its comments, order and quoting are
    kept and only the changed values differ (a reviewer's diff is the change; a file rewritten by
    ``yaml.safe_dump`` lost every comment a user had written, also on ``--release --adopt``)."""
    from .yamlfile import updated_text

    out.write_text(header + updated_text((config_dir / "priors.yaml").read_text(), new))


def known_only(
    ratios: dict[str, dict[str, tuple[float, int]]], config_dir: Path
) -> dict[str, dict[str, tuple[float, int]]]:
    """The measured classes and experts this config can hold: a metrics file from another config (an
    arm ``grepx``, a class ``unknown``) made a proposal that ``engine validate`` then refused."""
    from .spec import load_config
    from .yamlfile import load_schema

    experts = set(load_config(config_dir).experts)
    classes = set(load_schema("priors")["properties"]["classes"]["properties"])
    return {c: {e: r for e, r in es.items() if e in experts} for c, es in ratios.items() if c in classes}


def tune(
    metrics_files: list[Path],
    config_dir: Path,
    *,
    metric: str = "ndcg@10",
    min_queries: int = 20,
    floor: float = 0.15,
    step: float = 0.05,
    out: Path | None = None,
) -> list[dict[str, Any]]:
    raw = yaml.safe_load((config_dir / "priors.yaml").read_text())
    ratios = known_only(measured_ratios(metrics_files, metric, min_queries), config_dir)
    new, rows = propose(raw, ratios, floor=floor, step=step)
    if out is not None:
        header = (
            f"# Proposed by `engine tune` from {', '.join(str(f) for f in metrics_files)}\n"
            f"# (metric {metric}, classes with >= {min_queries} queries, floor {floor}, step {step}).\n"
        )
        write_proposal(out, config_dir, new, header)
    return rows


def tune_rerank_file(run_dirs: list[Path], config_dir: Path, *, out: Path | None = None) -> list[dict[str, Any]]:
    """``engine tune --rerank``: fit priors.yaml ``rerank`` weight sets (:mod:`engine.tune_rerank`)."""
    from .tune_rerank import tune_rerank

    raw = yaml.safe_load((config_dir / "priors.yaml").read_text())
    sets, rows = tune_rerank(run_dirs, raw.get("rerank") or {})
    if out is not None:
        new = copy.deepcopy(raw)
        new["rerank"] = sets
        header = f"# Proposed by `engine tune --rerank` from {', '.join(str(r) for r in run_dirs)}\n"
        write_proposal(out, config_dir, new, header)
    return rows


def tune_confidence_file(
    run_dirs: list[Path], config_dir: Path, *, out: Path | None = None, min_queries: int = 20
) -> dict[str, Any]:
    """``engine tune --confidence``: fit priors.yaml ``confidence.model`` (:mod:`engine.tune_confidence`)
    from at least ``min_queries`` answered questions (a fit to a handful is no calibration)."""
    from .tune_confidence import tune_confidence

    raw = yaml.safe_load((config_dir / "priors.yaml").read_text())
    model, report = tune_confidence(run_dirs)
    if report["questions"] < min_queries:
        raise SpecError(
            f"{report['questions']} questions in {', '.join(map(str, run_dirs))}: a confidence model is fitted "
            f"from at least {min_queries} (--min-queries)"
        )
    if out is not None:
        new = copy.deepcopy(raw)
        new["confidence"] = {**(raw.get("confidence") or {}), "model": model}
        header = f"# Proposed by `engine tune --confidence` from {', '.join(str(r) for r in run_dirs)}\n"
        write_proposal(out, config_dir, new, header)
    return {"model": model, **report}
