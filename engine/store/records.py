"""The typed records the store port takes and returns (one home for every row shape).

Rows are built here and only here: a receipt's indexed columns come from its signed body through
:func:`receipt_columns` (so a verifier can recompute them), an event is a :class:`BenchmarkEvent`,
and so on. Every record is frozen, JSON-safe through :meth:`to_dict`, and backend-neutral.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..errors import InvalidRequest

#: the columns a store indexes for each receipt, each equal to a field of the signed body
RECEIPT_COLUMNS = (
    "receipt_id",
    "created_at",
    "pipeline",
    "config_version",
    "request_hash",
    "class",
    "result_count",
    "status",
    "writer",
    "seq",
    "prev_hash",
)
#: the separator of a receipt's pipeline path ("router → identifier")
PIPELINE_SEP = " → "


def receipt_columns(body: Mapping[str, Any]) -> dict[str, Any]:
    """The indexed columns of a receipt, derived from its signed body (never supplied separately)."""
    raw_chain, raw_classifier = body.get("chain"), body.get("classifier")
    chain: Mapping[str, Any] = raw_chain if isinstance(raw_chain, Mapping) else {}
    classifier: Mapping[str, Any] = raw_classifier if isinstance(raw_classifier, Mapping) else {}
    return {
        "receipt_id": body.get("receipt_id"),
        "created_at": body.get("created_at"),
        "pipeline": body.get("pipeline"),
        "config_version": body.get("config_version"),
        "request_hash": body.get("request_hash"),
        "class": classifier.get("class"),
        "result_count": body.get("result_count"),
        "status": body.get("status"),
        "writer": chain.get("writer"),
        "seq": chain.get("seq"),
        "prev_hash": chain.get("prev"),
    }


def timestamp(value: datetime | str | None) -> str | None:
    """A window bound in the stores' ``created_at`` form (UTC ISO, milliseconds), so bounds compare
    as text the same way in every backend."""
    if value is None or isinstance(value, str):
        return value
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat(timespec="milliseconds")


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class _Record:
    __slots__ = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = dataclasses.asdict(self)  # type: ignore[call-overload]
        return out


@dataclass(frozen=True, slots=True)
class ReceiptQuery(_Record):
    """Filters for listing receipts; ``since <= created_at < until``. ``pipeline`` matches the
    full path or any pipeline on it (``identifier`` matches ``router → identifier``)."""

    klass: str | None = None
    status: str | None = None
    pipeline: str | None = None
    config_version: str | None = None
    since: datetime | str | None = None
    until: datetime | str | None = None
    limit: int | None = 20


@dataclass(frozen=True, slots=True)
class ReceiptSummary(_Record):
    receipt_id: str
    created_at: str
    pipeline: str
    klass: str | None
    status: str
    result_count: int
    config_version: str
    request_hash: str
    question: str | None = None  # from the signed body's request (None when the body is unreadable)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["class"] = d.pop("klass")
        return d


@dataclass(frozen=True, slots=True)
class StoredReceipt:
    """What a store holds for one receipt (a verification read): its indexed columns as stored and
    its body as stored (``None`` with ``body_error`` when the stored body is not JSON)."""

    columns: dict[str, Any]
    body: dict[str, Any] | None
    body_error: str | None = None

    @property
    def receipt_id(self) -> str:
        return str(self.columns.get("receipt_id"))


@dataclass(frozen=True, slots=True)
class BenchmarkEvent(_Record):
    """One expert call of one run (DESIGN §8 ``tool_benchmark_events``); ``hit`` is None until a
    caller that knows relevance (``engine eval``) labels it."""

    event_id: str
    run_id: str
    expert_id: str
    arm: str
    task_class: str | None
    question_hash: str
    latency_ms: float
    result_count: int
    precision_class: str | None
    status: str
    config_version: str
    created_at: str
    hit: bool | None = None


@dataclass(frozen=True, slots=True)
class EventQuery(_Record):
    since: datetime | str | None = None
    until: datetime | str | None = None
    arm: str | None = None
    expert_id: str | None = None
    config_version: str | None = None
    run_id: str | None = None
    limit: int | None = None


#: per_expert statuses that count as errors in :class:`ExpertStats` (a timeout is counted apart;
#: ``skipped`` and ``unconfigured`` are decisions, not failures)
ERROR_STATUSES = ("internal", "malformed", "unavailable")


@dataclass(frozen=True, slots=True)
class ExpertStats(_Record):
    """What a dashboard shows per expert over a window. Latency percentiles interpolate linearly
    (``quantile_cont``); rates are fractions of ``count``; ``hit_rate`` is over labelled events
    only and None when none is labelled."""

    expert_id: str
    count: int
    p50_ms: float
    p95_ms: float
    timeout_rate: float
    error_rate: float
    labelled: int
    hit_rate: float | None


@dataclass(frozen=True, slots=True)
class ReceiptMix(_Record):
    """What a window of receipts looks like in aggregate: how many, by class (``None`` when no
    class was decided) and by status, and how many were answered from the cache."""

    total: int
    by_class: dict[str | None, int]
    by_status: dict[str, int]
    cache_hits: int

    @property
    def cache_hit_rate(self) -> float | None:
        return round(self.cache_hits / self.total, 4) if self.total else None


@dataclass(frozen=True, slots=True)
class ConfigSnapshot(_Record):
    """The config content a ``config_version`` hashes (``sha256(canonical_json(content))``):
    the pipelines involved, experts.yaml, priors.yaml and the classifier rules. Written once per
    version, off the hot path, so two versions seen in receipts can be compared later."""

    config_version: str
    content: dict[str, Any]
    created_at: str = field(default_factory=now_iso)


@dataclass(frozen=True, slots=True)
class CacheEntry(_Record):
    key: str
    response: dict[str, Any]
    negative: bool
    created_at: str
    expires_at: float  # unix seconds


@dataclass(frozen=True, slots=True)
class Feedback(_Record):
    """Which evidence ids helped (and which did not), for a receipt that must exist."""

    feedback_id: str
    receipt_id: str
    useful_item_ids: tuple[str, ...]
    note: str = ""
    session_id: str | None = None
    created_at: str = field(default_factory=now_iso)
    not_useful_item_ids: tuple[str, ...] = ()


def returned_ids(receipt: Mapping[str, Any]) -> set[str]:
    """The ids of the items a receipt says its answer returned (its signed ``returned`` list)."""
    returned = receipt.get("returned")
    if not isinstance(returned, list):
        return set()
    return {str(r["id"]) for r in returned if isinstance(r, Mapping) and "id" in r}


def check_feedback(feedback: Feedback, receipt: Mapping[str, Any] | None) -> None:
    """The one rule every backend applies before recording feedback: it names a stored receipt, and
    only ids of items that receipt's answer returned (an empty list is a note that nothing helped).

    Raises:
        InvalidRequest: ``field="receipt_id"`` for a receipt the store does not hold,
            ``field="useful_item_ids"`` / ``"not_useful_item_ids"`` for an id the answer did not return.
    """
    if receipt is None:
        raise InvalidRequest(f"no receipt {feedback.receipt_id!r} in this store", field="receipt_id")
    answered = returned_ids(receipt)
    named = {"useful_item_ids": feedback.useful_item_ids, "not_useful_item_ids": feedback.not_useful_item_ids}
    for name, ids in named.items():
        unknown = [i for i in ids if i not in answered]
        if unknown:
            more = f" (+{len(unknown) - 5} more)" if len(unknown) > 5 else ""
            raise InvalidRequest(
                f"{name}: {', '.join(repr(i) for i in unknown[:5])}{more} not in the answer of receipt "
                f"{feedback.receipt_id!r} ({len(answered)} items; their ids are the answer's `id` fields)",
                field=name,
            )


@dataclass(frozen=True, slots=True)
class Experiment(_Record):
    experiment_id: str
    suite: str
    config_version: str
    git_head: str | None
    created_at: str
    metrics: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Hint(_Record):
    """What one answer (or one feedback) taught about the questions of its ``keys`` (engine.hints).

    A *file* hint (``path`` set) says a file answered them: ``weight`` +1 confirmed (corroborated
    across precision classes, or marked useful), -1 marked not useful; ``content_hash`` is the
    file's sha256 then (a changed file expires it). An *expert* hint (``expert`` set, no ``path``)
    says how much the expert contributed (``weight``: its largest share of a confirmed item, 1 / the
    experts that found it; 0: it ran for nothing). Both are valid only
    under the ``config_version`` that produced them. ``source``: agreement | feedback.
    """

    hint_id: str
    project: str
    path: str | None
    symbol: str | None
    source: str
    created_at: str = field(default_factory=now_iso)
    keys: tuple[str, ...] = ()  # the question's feature keys ("id:parse_args", "kw:retry", "class:identifier")
    klass: str | None = None
    expert: str | None = None
    content_hash: str | None = None
    config_version: str | None = None
    weight: float = 1.0
    receipt_id: str | None = None  # the answer it was learned from (an answer counts once per expert)


@dataclass(frozen=True, slots=True)
class BanditArm(_Record):
    """Session bandit state for one (task class, expert) arm; the newest ``updated_at`` wins."""

    arm_id: str
    task_class: str
    expert_id: str
    pulls: int
    reward: float
    updated_at: str = field(default_factory=now_iso)


@dataclass(frozen=True, slots=True)
class StoreHealth(_Record):
    """``state``: ok | fresh (nothing stored yet) | damaged | busy | unsafe (file modes)."""

    ok: bool
    state: str
    detail: str
    fix: str | None = None
    receipts: int | None = None
    pending_bytes: int = 0


@dataclass(frozen=True, slots=True)
class RepairReport(_Record):
    """What a repair did: rows per table now in the store, distinct receipts in the log of record,
    rows salvaged from the old store into the log, and where the old store was moved."""

    tables: dict[str, int]
    log_receipts: int
    salvaged: int = 0
    moved_aside: tuple[str, ...] = ()


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks, as DuckDB's ``quantile_cont`` and numpy's default."""
    if not sorted_values:
        return 0.0
    pos = (len(sorted_values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def stats_from(expert_id: str, events: list[BenchmarkEvent]) -> ExpertStats:
    """One expert's stats from its events: the reference every backend's aggregation must equal."""
    lat = sorted(e.latency_ms for e in events)
    n = len(events)
    labelled = [e.hit for e in events if e.hit is not None]
    return ExpertStats(
        expert_id=expert_id,
        count=n,
        p50_ms=round(percentile(lat, 0.5), 3),
        p95_ms=round(percentile(lat, 0.95), 3),
        timeout_rate=round(sum(e.status == "timeout" for e in events) / n, 4) if n else 0.0,
        error_rate=round(sum(e.status in ERROR_STATUSES for e in events) / n, 4) if n else 0.0,
        labelled=len(labelled),
        hit_rate=round(sum(labelled) / len(labelled), 4) if labelled else None,
    )
