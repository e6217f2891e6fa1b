"""Typed, frozen, JSON-safe values passed between nodes and experts.

Every value here has ``to_dict()`` returning only basic types, so receipts, cache rows and
benchmark events serialise the same way everywhere.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import orjson

INTENTS = ("conceptual", "identifier", "typed-symbol", "cross-repo-impact", "docs", "history", "unknown")
CLASSES = INTENTS[:-1]  # "unknown" is an intent a caller may give, never a class we route to
ITEM_KINDS = ("file", "chunk", "symbol", "commit", "doc")
TIERS = (
    "typed-graph-confirmed",
    "hybrid-confirmed",
    "lexical-exact",
    "single-source",
    "semantic-only",
    "docs",
    "history",
    "stale-index",
)


@dataclass(frozen=True, slots=True)
class PrecisionClass:
    """What an expert's ``precision_class`` (experts.yaml) means to the gate, the scorer and fusion."""

    name: str
    rank: int  # higher is more precise; budget.min_precision_class keeps experts at or above it
    score: float  # the score node's ``precision`` sub-score
    similarity_only: bool = False  # evidence by resemblance alone: never corroborates, tier semantic-only


#: the one precision-class table (the JSON Schemas' enums are checked against it by a test)
PRECISION: Mapping[str, PrecisionClass] = {
    pc.name: pc
    for pc in (
        PrecisionClass("typed", 6, 1.0),
        PrecisionClass("structural", 5, 0.9),
        PrecisionClass("hybrid", 4, 0.85),
        PrecisionClass("semantic", 2, 0.6, similarity_only=True),
        PrecisionClass("lexical", 3, 0.75),
        PrecisionClass("docs", 1, 0.5),
        PrecisionClass("history", 1, 0.5),
    )
}
PRECISION_CLASSES = tuple(PRECISION)


def canonical_json(value: Any) -> str:
    """The one canonical form used for hashes and signatures (DESIGN §5)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


#: orjson hands everything that is not a plain JSON type back (and then raises): json decides those
_ORJSON_CANONICAL = (
    orjson.OPT_SORT_KEYS
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)


def canonical_bytes(value: Any) -> bytes:
    """``canonical_json(value).encode()``, made by orjson (~10x faster: the receipt is signed, hashed
    and spooled on the hot path).

    Byte-equal for *portable* values (:func:`engine.receipts.portable`: finite floats that print
    without an exponent below 1e-4, which is where orjson and json differ: ``1e-07`` vs ``1e-7``).
    orjson sorts keys by their UTF-8 bytes, which is code-point order, as ``sort_keys`` does. What
    orjson refuses (keys that are not strings, ints past 64 bits, subclasses of basic types) goes
    through :func:`canonical_json`. ``tests/test_canonical.py`` checks the equality.
    """
    try:
        return orjson.dumps(value, option=_ORJSON_CANONICAL)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return canonical_json(value).encode("utf-8")


def sha256_hex(text: str | bytes) -> str:
    data = text.encode("utf-8") if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True, slots=True)
class Scope:
    project: str | None = None
    group: str | None = None
    path: str | None = None
    language: str | None = None

    def to_dict(self) -> dict[str, Any]:
        # by hand, not dataclasses.asdict (which deep-copies): called several times per request
        fields = (("project", self.project), ("group", self.group), ("path", self.path), ("language", self.language))
        return {k: v for k, v in fields if v is not None}


@dataclass(frozen=True, slots=True)
class Budget:
    latency_ms: int | None = None
    max_experts: int | None = None
    min_precision_class: str | None = None
    allow_llm: bool = False

    def to_dict(self) -> dict[str, Any]:
        fields = (
            ("latency_ms", self.latency_ms),
            ("max_experts", self.max_experts),
            ("min_precision_class", self.min_precision_class),
            ("allow_llm", self.allow_llm),
        )
        return {k: v for k, v in fields if v is not None}


@dataclass(frozen=True, slots=True)
class Request:
    question: str
    intent: str | None = None
    scope: Scope = field(default_factory=Scope)
    budget: Budget = field(default_factory=Budget)
    expected_shape: str = "ranked-evidence"
    mode: str = "fused"
    limit: int = 10
    format: str = "json"
    session_id: str | None = None
    no_cache: bool = False

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "question": self.question,
            "expected_shape": self.expected_shape,
            "mode": self.mode,
            "limit": self.limit,
            "format": self.format,
        }
        if self.intent:
            out["intent"] = self.intent
        if scope := self.scope.to_dict():
            out["scope"] = scope
        if budget := self.budget.to_dict():
            out["budget"] = budget
        if self.session_id:
            out["session_id"] = self.session_id
        return out

    def hash(self) -> str:
        """What the answer depends on (format and session are presentation / bookkeeping only).
        Asked 3-4 times per request (cache key, bandit, receipt, events): made once per request."""
        return _request_hash(self)


@dataclass(frozen=True, slots=True)
class Project:
    name: str
    root: Path
    is_git: bool


@dataclass(frozen=True, slots=True)
class Features:
    """What the classifier read out of the question; experts build their sub-queries from it."""

    literals: tuple[str, ...] = ()  # quoted strings, verbatim
    regex: str | None = None  # /.../ in the question
    identifiers: tuple[str, ...] = ()  # camelCase, snake_case, dotted, CONSTANT tokens
    keywords: tuple[str, ...] = ()  # content words, stop words removed, order kept
    paths: tuple[str, ...] = ()  # path-like tokens (a/b.py)

    def to_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items() if v}


@dataclass(frozen=True, slots=True)
class Classification:
    klass: str
    confidence: float
    rule: str
    abstained: bool
    features: Features
    ignored: int = 0  # characters of embedded instructions the rules and features did not read
    routed: str | None = None  # the question without them (set only when something was ignored)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "class": self.klass,
            "confidence": round(self.confidence, 3),
            "rule": self.rule,
            "abstained": self.abstained,
        }
        if self.ignored:
            out["ignored_chars"] = self.ignored
        return out


@dataclass(frozen=True, slots=True)
class Query:
    """What every expert is given. ``limit`` is already the per-expert over-fetch; ``heads`` is
    each git project's HEAD as this request read it (once, for every expert's freshness)."""

    question: str
    klass: str
    features: Features
    scope: Scope
    projects: tuple[Project, ...]
    limit: int
    heads: Mapping[str, str | None] | None = None


@dataclass(frozen=True, slots=True)
class Evidence:
    """One item as an expert returned it. Content is only what the expert itself produced."""

    project: str
    path: str  # posix, relative to the project root ("" for a commit)
    kind: str  # file | chunk | symbol | commit | doc
    start_line: int = 1
    end_line: int = 1
    content: str = ""
    score: float = 0.0  # the expert's native score (higher is better)
    symbol: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)
    flags: tuple[str, ...] = ()

    def identity(self) -> str:
        """Canonical identity for dedup: commits by sha, everything else by place."""
        if self.kind == "commit":
            return f"commit:{self.meta.get('sha', self.content)}"
        return f"{self.project}:{self.path}:{self.start_line}-{self.end_line}:{self.symbol or ''}"


@dataclass(slots=True)
class ExpertOutcome:
    """One expert's part in a run: always present in the receipt, whatever happened."""

    expert: str
    precision_class: str
    status: str
    sub_query: dict[str, Any]
    latency_ms: float = 0.0
    items: list[Evidence] = field(default_factory=list)
    error_class: str | None = None
    error: str | None = None
    freshness: dict[str, Any] | None = None
    withheld: dict[str, int] = field(default_factory=dict)  # items dropped/redacted by engine.screen
    deadline: dict[str, Any] | None = None  # planned and actual deadline (engine.deadlines)

    def to_receipt(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "status": self.status,
            "latency_ms": round(self.latency_ms, 2),
            "result_count": len(self.items),
            "precision_class": self.precision_class,
        }
        if self.error_class:
            out["error_class"] = self.error_class
        if self.error_class or self.error:
            out["error"] = (self.error or "")[:500]
        if self.deadline is not None:
            out["deadline"] = self.deadline
        if self.freshness is not None:
            out["freshness"] = self.freshness
        if self.withheld:
            out["withheld"] = dict(sorted(self.withheld.items()))
        return out


@lru_cache(maxsize=64)
def _request_hash(request: Request) -> str:
    d = request.to_dict()
    for key in ("format", "session_id", "expected_shape"):
        d.pop(key, None)
    return sha256_hex(canonical_json(d))
