"""Fusion as pure functions: weighted RRF, dedup into evidence clusters, provenance tiers.

``fuse(ranked, weights, ...)`` takes each expert's ranked list (already scored) and returns
clusters best first. Deterministic: experts are visited by name, items by rank, ties broken by
(project, path, start line), so the same inputs always give the same output.

Weighted RRF (docs/adr/0004-fusion.md): an expert contributes ``w_e / (k + rank)`` to a
cluster once, at its best rank in that cluster. A cluster is one place in the code: items of
the same project and path whose line ranges overlap (commits: the same sha), so ripgrep's
matching line, BM25's chunk and a symbol's definition around it corroborate one another.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .types import Evidence, canonical_json, sha256_hex

SEMANTIC_CLASSES = {"semantic"}


@dataclass
class Cluster:
    project: str
    path: str
    kind: str
    start: int
    end: int
    best: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict)  # expert → (rank, scored item)
    score: float = 0.0

    def overlaps(self, e: Evidence) -> bool:
        if e.kind == "commit" or self.kind == "commit":
            return e.kind == self.kind and e.identity() == self.rep_identity
        return e.start_line <= self.end and self.start <= e.end_line

    @property
    def rep_identity(self) -> str:
        first: Evidence = next(iter(self.best.values()))[1]["evidence"]
        return first.identity()


def cluster_items(ranked: Mapping[str, list[dict[str, Any]]]) -> list[Cluster]:
    """Group every expert's items into clusters of the same place (dedup by canonical identity)."""
    by_file: dict[tuple[str, str, bool], list[Cluster]] = {}
    clusters: list[Cluster] = []
    for expert in sorted(ranked):
        for scored in ranked[expert]:
            e: Evidence = scored["evidence"]
            key = (e.project, e.path if e.kind != "commit" else e.identity(), e.kind == "commit")
            target = next((c for c in by_file.get(key, []) if c.overlaps(e)), None)
            if target is None:
                target = Cluster(e.project, e.path, e.kind, e.start_line, e.end_line)
                by_file.setdefault(key, []).append(target)
                clusters.append(target)
            prev = target.best.get(expert)
            if prev is None or scored["rank"] < prev[0]:
                target.best[expert] = (scored["rank"], scored)
            if e.kind != "commit":
                target.start, target.end = min(target.start, e.start_line), max(target.end, e.end_line)
    return clusters


def weighted_rrf(clusters: list[Cluster], weights: Mapping[str, float], k: int) -> None:
    for c in clusters:
        c.score = sum(weights.get(ex, 0.0) / (k + rank) for ex, (rank, _) in c.best.items())


def tier_and_nuance(c: Cluster, classes: Mapping[str, str]) -> tuple[str, str]:
    experts = sorted(c.best, key=lambda ex: (c.best[ex][0], ex))
    pcs = [classes[ex] for ex in experts]
    flags = {f for _, s in c.best.values() for f in s["flags"]}
    named = ", ".join(f"{ex} (#{c.best[ex][0]})" for ex in experts)
    if "file-changed-since-indexed" in flags:
        return "stale-index", f"Found by {named}, but the file changed since it was indexed: re-read the lines."
    typed = [ex for ex, pc in zip(experts, pcs, strict=True) if pc == "typed"]
    if len(typed) >= 2:
        return "typed-graph-confirmed", f"{len(typed)} typed analyses agree ({', '.join(typed)})."
    if len(experts) >= 2 and not all(pc in SEMANTIC_CLASSES for pc in pcs):
        return "hybrid-confirmed", f"{len(experts)} experts agree: {named}."
    if all(pc in SEMANTIC_CLASSES for pc in pcs):
        return "semantic-only", f"Only semantic similarity suggests this ({named}): verify before relying on it."
    pc = pcs[0]
    if pc == "docs":
        return "docs", f"From documentation ({named}): prose, not code."
    if pc == "history":
        return "history", f"A commit found by {named}."
    if "exact-match" in flags:
        return "lexical-exact", f"Exact text match by {named}; no other expert corroborates it."
    return "single-source", f"Only {named} returned this; no other expert corroborates it."


def item_id(e: Evidence) -> str:
    return sha256_hex(
        canonical_json([e.project, e.path, e.start_line, e.end_line, e.symbol or "", sha256_hex(e.content)])
    )[:16]


def cluster_to_item(
    c: Cluster, weights: Mapping[str, float], k: int, classes: Mapping[str, str], snippet_chars: int, file_prior: float
) -> dict[str, Any]:
    # the representative is the single strongest contribution; ties → more precise range (shorter)
    rep_expert = min(
        c.best,
        key=lambda ex: (
            -weights.get(ex, 0.0) / (k + c.best[ex][0]),
            c.best[ex][1]["evidence"].end_line - c.best[ex][1]["evidence"].start_line,
            ex,
        ),
    )
    rep_scored = c.best[rep_expert][1]
    e: Evidence = rep_scored["evidence"]
    tier, nuance = tier_and_nuance(c, classes)
    flags = sorted({f for _, s in c.best.values() for f in s["flags"]})
    content = e.content if len(e.content) <= snippet_chars else e.content[:snippet_chars] + "…"
    if len(e.content) > snippet_chars:
        flags.append("content-truncated")
    symbol = e.symbol or next(
        (s["evidence"].symbol for _, s in sorted(c.best.values(), key=lambda t: t[0]) if s["evidence"].symbol), None
    )
    sources = [
        {
            "expert": ex,
            "rank": c.best[ex][0],
            "score": round(float(c.best[ex][1]["evidence"].score), 4),
            "range": {
                "start_line": c.best[ex][1]["evidence"].start_line,
                "end_line": c.best[ex][1]["evidence"].end_line,
            },
        }
        for ex in sorted(c.best, key=lambda ex: (c.best[ex][0], ex))
    ]
    sub = dict(rep_scored["subscores"])
    sub["rrf"] = round(c.score, 6)
    sub["agreement"] = len(c.best)
    if file_prior != 1.0:
        sub["file_prior"] = file_prior
    item: dict[str, Any] = {
        "id": item_id(e),
        "rank": 0,
        "path": e.path,
        "project": e.project,
        "range": {"start_line": e.start_line, "end_line": e.end_line},
        "kind": e.kind,
        "content": content,
        "sources": sources,
        "tier": tier,
        "nuance": nuance,
        "score": round(c.score * file_prior, 6),
        "subscores": sub,
        "flags": flags,
    }
    if symbol:
        item["symbol"] = symbol
    if e.meta:
        item["meta"] = dict(e.meta)
    return item
