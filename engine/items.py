"""The payloads between the score, fuse and receipt nodes, and the one builder of a response item.

* :class:`ScoredItem` — one expert's item after the score node: its evidence, its rank in that
  expert's list, its sub-scores and flags.
* :class:`AnswerItem` — one item of the response (DESIGN §4), in fused mode (with ``sources``,
  ``tier`` and ``nuance``) and in separate mode (an expert's own list). Built only by
  :func:`answer_item`, so both modes cap snippets the same way; ``to_dict()`` is its wire form
  and ``from_dict()`` reads a cached one back.
* :class:`Confidence` and :class:`CachedAnswer` — what the fuse node concludes and what the
  answer cache keeps.

All frozen: a node reads its inputs and writes new values, it never edits another node's output.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .types import Evidence, canonical_bytes, sha256_hex

TRUNCATED = "content-truncated"
ELLIPSIS = "…"


def item_id(e: Evidence) -> str:
    """A deterministic id from the evidence's place and content (the same place and text, the same id)."""
    return sha256_hex(
        canonical_bytes([e.project, e.path, e.start_line, e.end_line, e.symbol or "", sha256_hex(e.content)])
    )[:16]


@dataclass(frozen=True, slots=True)
class ScoredItem:
    """One expert's item with the score node's verdict; ``rank`` is 1-based in that expert's list."""

    evidence: Evidence
    rank: int
    subscores: Mapping[str, float] = field(default_factory=dict)
    flags: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Source:
    """One expert that returned a fused item: its rank, native score and the range it gave."""

    expert: str
    rank: int
    score: float
    start_line: int
    end_line: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "expert": self.expert,
            "rank": self.rank,
            "score": self.score,
            "range": {"start_line": self.start_line, "end_line": self.end_line},
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Source:
        r = d.get("range") or {}
        return cls(
            d["expert"], int(d["rank"]), float(d["score"]), int(r.get("start_line", 0)), int(r.get("end_line", 0))
        )


@dataclass(frozen=True, slots=True)
class AnswerItem:
    """One response item (DESIGN §4). ``sources``/``tier``/``nuance`` are set in fused mode only."""

    id: str
    rank: int
    path: str
    project: str
    start_line: int
    end_line: int
    kind: str
    content: str
    score: float
    subscores: Mapping[str, float]
    flags: tuple[str, ...]
    symbol: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)
    sources: tuple[Source, ...] = ()
    tier: str | None = None
    nuance: str | None = None

    def ranked(self, rank: int, score: float | None = None, subscores: Mapping[str, float] | None = None) -> AnswerItem:
        """This item at another rank (and score, sub-scores): ``dataclasses.replace`` without its
        per-call field introspection (rerank re-ranks 30 items per answer)."""
        return AnswerItem(
            self.id,
            rank,
            self.path,
            self.project,
            self.start_line,
            self.end_line,
            self.kind,
            self.content,
            self.score if score is None else score,
            self.subscores if subscores is None else subscores,
            self.flags,
            self.symbol,
            self.meta,
            self.sources,
            self.tier,
            self.nuance,
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "rank": self.rank,
            "path": self.path,
            "project": self.project,
            "range": {"start_line": self.start_line, "end_line": self.end_line},
            "kind": self.kind,
            "content": self.content,
        }
        if self.tier is not None:
            out["sources"] = [s.to_dict() for s in self.sources]
            out["tier"] = self.tier
            out["nuance"] = self.nuance
        out["score"] = self.score
        out["subscores"] = dict(self.subscores)
        out["flags"] = list(self.flags)
        if self.symbol:
            out["symbol"] = self.symbol
        if self.meta:
            out["meta"] = dict(self.meta)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AnswerItem:
        r = d["range"]
        return cls(
            id=d["id"],
            rank=int(d["rank"]),
            path=d["path"],
            project=d["project"],
            start_line=int(r["start_line"]),
            end_line=int(r["end_line"]),
            kind=d["kind"],
            content=d["content"],
            score=d["score"],
            subscores=dict(d.get("subscores") or {}),
            flags=tuple(d.get("flags") or ()),
            symbol=d.get("symbol"),
            meta=dict(d.get("meta") or {}),
            sources=tuple(Source.from_dict(s) for s in d.get("sources") or ()),
            tier=d.get("tier"),
            nuance=d.get("nuance"),
        )


def answer_item(
    e: Evidence,
    *,
    rank: int,
    score: float,
    subscores: Mapping[str, float],
    flags: Sequence[str],
    snippet_chars: int,
    symbol: str | None = None,
    sources: Sequence[Source] = (),
    tier: str | None = None,
    nuance: str | None = None,
) -> AnswerItem:
    """The one builder of response items: a snippet longer than ``snippet_chars`` is cut, marked with
    an ellipsis and flagged ``content-truncated``; the item carries no content the expert did not give."""
    truncated = len(e.content) > snippet_chars
    return AnswerItem(
        id=item_id(e),
        rank=rank,
        path=e.path,
        project=e.project,
        start_line=e.start_line,
        end_line=e.end_line,
        kind=e.kind,
        content=e.content[:snippet_chars] + ELLIPSIS if truncated else e.content,
        score=score,
        subscores=dict(subscores),
        flags=(*flags, TRUNCATED) if truncated else tuple(flags),
        symbol=symbol or e.symbol,
        meta=dict(e.meta),
        sources=tuple(sources),
        tier=tier,
        nuance=nuance,
    )


@dataclass(frozen=True, slots=True)
class Confidence:
    """How sure the answer is: a calibrated probability that its first item is right, with the
    signals it was estimated from (:mod:`engine.confidence`), or the top item's share of the best
    possible RRF score when the config has no calibration."""

    score: float
    label: str  # none | low | medium | high
    signals: Mapping[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"score": self.score, "label": self.label}
        if self.signals:
            out["signals"] = dict(self.signals)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Confidence:
        return cls(float(d["score"]), str(d["label"]), dict(d.get("signals") or {}))


@dataclass(frozen=True, slots=True)
class CachedAnswer:
    """What the answer cache keeps of a fused answer: its items, fusion section and confidence, and
    each item file's (project, path, mtime_ns, size, sha256) when it was kept (``files``): a hit
    whose files changed since is a miss (the key sees HEADs and index generations, not a working
    tree edited without `engine index`; the answer must not show lines a file no longer holds)."""

    items: tuple[AnswerItem, ...]
    fusion: Mapping[str, Any]
    confidence: Confidence | None
    files: tuple[tuple[str, str, int, int, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "items": [it.to_dict() for it in self.items],
            "fusion": dict(self.fusion),
            "confidence": self.confidence.to_dict() if self.confidence else {},
            "files": [list(f) for f in self.files],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CachedAnswer:
        conf = d.get("confidence")
        return cls(
            items=tuple(AnswerItem.from_dict(it) for it in d.get("items") or ()),
            fusion=dict(d.get("fusion") or {}),
            confidence=Confidence.from_dict(conf) if conf else None,
            files=tuple((str(p), str(f), int(m), int(n), str(h)) for p, f, m, n, h in d.get("files") or ()),
        )

    @classmethod
    def kept(
        cls,
        items: Sequence[AnswerItem],
        fusion: Mapping[str, Any],
        confidence: Confidence | None,
        roots: Mapping[str, Path],
    ) -> CachedAnswer:
        """The answer as the cache keeps it: with its files' stamps (after the answer: it reads them)."""
        files = []
        for project, path in dict.fromkeys((it.project, it.path) for it in items if it.kind != "commit"):
            stamp = file_stamp(roots[project] / path) if project in roots and path else None
            if stamp is not None:
                files.append((project, path, *stamp))
        return cls(tuple(items), fusion, confidence, tuple(files))

    def changed_file(self, roots: Mapping[str, Path]) -> str | None:
        """The first item file (``project/path``) whose content changed or went since the answer was
        kept: a stat per file; its bytes are hashed only when the stat moved (an edit undone keeps
        the answer)."""
        for project, path, mtime, size, digest in self.files:
            root = roots.get(project)
            now = file_stamp(root / path, with_digest=False) if root is not None else None
            if now is not None and now[:2] == (mtime, size):
                continue  # untouched
            if root is None or now is None or now[1] != size:
                return f"{project}/{path}"
            again = file_stamp(root / path)
            if again is None or again[2] != digest:
                return f"{project}/{path}"
        return None


def file_stamp(file: Path, *, with_digest: bool = True) -> tuple[int, int, str] | None:
    """(mtime_ns, size, sha256 of the bytes — "" without ``with_digest``) of a file, or None when gone."""
    try:
        st = os.stat(file)
        digest = sha256_hex(file.read_bytes()) if with_digest else ""
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, digest
