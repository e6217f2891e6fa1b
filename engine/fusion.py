"""Fusion as pure functions: weighted RRF, dedup into evidence clusters, tiers, caps, priors, confidence.

:func:`fuse` takes each expert's scored list and returns the fused answer, best first.
Deterministic: experts are visited by name, items by rank, ties broken by (project, path,
start line), so the same inputs always give the same output. Its steps, each a function here:

1. :func:`cluster_items` — dedup by place. A cluster is one place in the code: items of the same
   project and path whose line ranges overlap (commits: the same sha), so ripgrep's matching
   line, BM25's chunk and a symbol's definition around it corroborate one another.
2. :func:`weighted_rrf` (docs/adr/0004-fusion.md) — an expert contributes ``w_e / (k + rank)``
   to a cluster once, at its best rank in that cluster.
3. :func:`file_prior` — prose docs (unless the question is a docs question) and test files are
   demoted by the priors.yaml ``fusion`` levers.
4. Rank the places, apply the per-file diversity cap and the limit; only the places kept become
   items (:func:`cluster_to_item`: the :func:`representative` evidence, sources,
   :func:`tier_and_nuance`). Then :func:`confidence`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .items import AnswerItem, Confidence, ScoredItem, Source, answer_item, item_id
from .spec import FusionSpec
from .types import PRECISION
from .workspace import is_doc_file, is_test_file


@dataclass(slots=True)
class Cluster:
    project: str
    path: str
    kind: str
    start: int
    end: int
    best: dict[str, ScoredItem] = field(default_factory=dict)  # expert → its best-ranked item here
    score: float = 0.0

    def experts_by_rank(self) -> list[str]:
        best = self.best
        if len(best) == 1:  # most places: one expert found them
            return list(best)
        return sorted(best, key=lambda ex: (best[ex].rank, ex))


@dataclass(frozen=True, slots=True)
class Fused:
    """What :func:`fuse` returns: the answer's items (ranked) and how sure it is."""

    items: tuple[AnswerItem, ...]
    confidence: Confidence


def cluster_items(ranked: Mapping[str, Sequence[ScoredItem]]) -> list[Cluster]:
    """Group every expert's items into clusters of the same place (dedup by canonical identity)."""
    by_file: dict[tuple[str, str, bool], list[Cluster]] = {}
    clusters: list[Cluster] = []
    for expert in sorted(ranked):
        for scored in ranked[expert]:
            e = scored.evidence
            commit = e.kind == "commit"
            key = (e.project, e.identity() if commit else e.path, commit)
            same_file = by_file.get(key)
            target = None
            if same_file is None:
                same_file = by_file[key] = []
            elif commit:  # same key: the same commit
                target = same_file[0]
            else:  # Cluster.overlaps, inlined: this runs for every item of every expert
                lo, hi = e.start_line, e.end_line
                for c in same_file:
                    if lo <= c.end and c.start <= hi:
                        target = c
                        break
            if target is None:
                target = Cluster(e.project, e.path, e.kind, e.start_line, e.end_line)
                same_file.append(target)
                clusters.append(target)
            prev = target.best.get(expert)
            if prev is None or scored.rank < prev.rank:
                target.best[expert] = scored
            if not commit:
                if e.start_line < target.start:
                    target.start = e.start_line
                if e.end_line > target.end:
                    target.end = e.end_line
    return clusters


def weighted_rrf(clusters: list[Cluster], weights: Mapping[str, float], k: int) -> None:
    for c in clusters:
        c.score = sum(weights.get(ex, 0.0) / (k + s.rank) for ex, s in c.best.items())


def tier_and_nuance(c: Cluster, classes: Mapping[str, str], experts: Sequence[str] | None = None) -> tuple[str, str]:
    """The provenance tier and its one-line nuance. ``experts``: :meth:`Cluster.experts_by_rank`,
    when the caller has it already."""
    if experts is None:
        experts = c.experts_by_rank()
    best = c.best
    pcs = [classes[ex] for ex in experts]
    flags = {f for s in best.values() for f in s.flags}
    named = ", ".join([f"{ex} (#{best[ex].rank})" for ex in experts])
    if "file-changed-since-indexed" in flags:
        return "stale-index", f"Found by {named}, but the file changed since it was indexed: re-read the lines."
    if pcs.count("typed") >= 2:
        typed = [ex for ex, pc in zip(experts, pcs, strict=True) if pc == "typed"]
        return "typed-graph-confirmed", f"{len(typed)} typed analyses agree ({', '.join(typed)})."
    similar_only = all(PRECISION[pc].similarity_only for pc in pcs)
    if len(experts) >= 2 and not similar_only:
        return "hybrid-confirmed", f"{len(experts)} experts agree: {named}."
    if similar_only:
        return "semantic-only", f"Only semantic similarity suggests this ({named}): verify before relying on it."
    pc = pcs[0]
    if pc == "docs":
        return "docs", f"From documentation ({named}): prose, not code."
    if pc == "history":
        return "history", f"A commit found by {named}."
    if "exact-match" in flags:
        return "lexical-exact", f"Exact text match by {named}; no other expert corroborates it."
    return "single-source", f"Only {named} returned this; no other expert corroborates it."


def file_prior(c: Cluster, klass: str | None, fusion: FusionSpec) -> float:
    """The demotion a file's kind earns: prose docs (except for docs questions) and test files."""
    prior = 1.0
    if c.kind != "commit" and c.path:
        if klass != "docs" and is_doc_file(c.path):
            prior *= fusion.doc_file_prior
        if is_test_file(c.path):
            prior *= fusion.test_file_prior
    return prior


def representative(c: Cluster, weights: Mapping[str, float], k: int) -> ScoredItem:
    """The single strongest contribution to a cluster; ties → the more precise (shorter) range."""
    if len(c.best) == 1:  # most places: one expert found them
        return next(iter(c.best.values()))
    best: tuple[float, int, str] | None = None
    rep: ScoredItem | None = None
    for ex, s in c.best.items():
        e = s.evidence
        key = (-weights.get(ex, 0.0) / (k + s.rank), e.end_line - e.start_line, ex)
        if best is None or key < best:
            best, rep = key, s
    assert rep is not None  # a cluster holds at least one item
    return rep


def cluster_to_item(
    c: Cluster,
    weights: Mapping[str, float],
    k: int,
    classes: Mapping[str, str],
    snippet_chars: int,
    prior: float,
    rank: int = 0,
    rep: ScoredItem | None = None,
) -> AnswerItem:
    """The answer item of a kept place (``rep``: its :func:`representative`, when known)."""
    if rep is None:
        rep = representative(c, weights, k)
    experts = c.experts_by_rank()
    tier, nuance = tier_and_nuance(c, classes, experts)
    by_rank = [c.best[ex] for ex in experts]  # by rank; ties in name order, as the experts were visited
    symbol = rep.evidence.symbol or next((s.evidence.symbol for s in by_rank if s.evidence.symbol), None)
    sources = [
        Source(ex, s.rank, round(float(s.evidence.score), 4), s.evidence.start_line, s.evidence.end_line)
        for ex, s in zip(experts, by_rank, strict=True)
    ]
    sub = dict(rep.subscores)
    sub["rrf"] = round(c.score, 6)
    sub["agreement"] = len(c.best)
    if prior != 1.0:
        sub["file_prior"] = prior
    return answer_item(
        rep.evidence,
        rank=rank,
        score=round(c.score * prior, 6),
        subscores=sub,
        flags=sorted({f for s in by_rank for f in s.flags}),
        snippet_chars=snippet_chars,
        symbol=symbol,
        sources=sources,
        tier=tier,
        nuance=nuance,
    )


def confidence(items: Sequence[AnswerItem], weights: Mapping[str, float], k: int, low_below: float) -> Confidence:
    """The top item's score over the best an answer can score (every expert ranking it first)."""
    max_score = sum(weights.values()) / (k + 1) if weights else 0.0
    top = items[0].score / max_score if items and max_score else 0.0
    label = "none" if not items else ("low" if top < low_below else "high")
    return Confidence(round(top, 4), label)


def fuse(
    scored: Mapping[str, Sequence[ScoredItem]],
    *,
    weights: Mapping[str, float],
    classes: Mapping[str, str],
    fusion: FusionSpec,
    k: int,
    klass: str | None,
    limit: int,
) -> Fused:
    """Fuse every expert's scored list into one ranked answer of at most ``limit`` items.

    Args:
        scored: each expert's items, best first (the score node's output).
        weights: each expert's prior for this question (the gate's selection).
        classes: each expert's precision class (experts.yaml).
        fusion: the priors.yaml ``fusion`` levers (per-file cap, file priors, snippet cap, confidence).
        k: the RRF constant (a fuse node's ``settings.k`` may override ``fusion.k``).
        klass: the question's class (docs questions do not demote prose docs).
        limit: the request's item count.
    """
    clusters = cluster_items(scored)
    weighted_rrf(clusters, weights, k)
    # rank places before building items: only the kept ones become items (ids hash their content)
    ranked = []
    for c in clusters:
        prior = file_prior(c, klass, fusion)
        rep = representative(c, weights, k)
        e = rep.evidence
        ranked.append(((-round(c.score * prior, 6), e.project, e.path, e.start_line), c, prior, rep))
    ranked.sort(key=lambda t: t[0])
    per_file: dict[tuple[str, str], int] = {}
    kept: list[AnswerItem] = []
    cap = fusion.per_file_cap
    for _, c, prior, rep in ranked:
        e = rep.evidence
        key = (e.project, e.path if e.kind != "commit" else item_id(e))
        seen = per_file.get(key, 0)
        if seen >= cap:
            continue
        per_file[key] = seen + 1
        kept.append(cluster_to_item(c, weights, k, classes, fusion.snippet_chars, prior, len(kept) + 1, rep))
        if len(kept) >= limit:
            break
    return Fused(tuple(kept), confidence(kept, weights, k, fusion.low_confidence_below))


def contributions(items: Sequence[AnswerItem], weights: Mapping[str, float], k: int, top: int = 10) -> dict[str, Any]:
    """Each source's (expert's or lane's) part in the first ``top`` items: how many it supports and
    its share of their summed RRF score — what a lane bought, in the receipt."""
    parts: dict[str, float] = {}
    counts: dict[str, int] = {}
    for it in items[:top]:
        for s in it.sources:
            parts[s.expert] = parts.get(s.expert, 0.0) + weights.get(s.expert, 0.0) / (k + s.rank)
            counts[s.expert] = counts.get(s.expert, 0) + 1
    total = sum(parts.values()) or 1.0
    return {e: {"items": counts[e], "share": round(parts[e] / total, 3)} for e in sorted(parts)}
