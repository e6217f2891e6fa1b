"""Stats over a chosen window: per expert (calls, p50/p95 latency, timeout and error rates, hit
rate where labelled) from ``tool_benchmark_events``; the class mix and cache hit rate of the
receipts; and the feedback people gave, per expert that found the items (from each receipt's
``returned`` list). All through the store port; charts are inline SVG."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ..store import EventQuery, ExpertStats, ReceiptMix, ReceiptQuery, Store
from ..store.records import timestamp
from .charts import Chart, count, hbars, ms, pct
from .pages import backend, in_thread, page

WINDOWS: dict[str, timedelta | None] = {
    "1h": timedelta(hours=1),
    "24h": timedelta(days=1),
    "7d": timedelta(days=7),
    "30d": timedelta(days=30),
    "all": None,
}
DEFAULT_WINDOW = "24h"


@dataclass
class FeedbackTally:
    """Feedback in the window: totals and, per expert that found the item, useful / not useful."""

    useful: int = 0
    not_useful: int = 0
    per_expert: dict[str, list[int]] = field(default_factory=dict)  # expert → [useful, not useful]


def tally_feedback(store: Store, since: str | None) -> FeedbackTally:
    tally = FeedbackTally()
    lanes: dict[str, dict[str, list[str]]] = {}  # receipt → item id → experts that returned it
    for fb in store.list_feedback():
        if since is not None and fb.created_at < since:
            continue
        if fb.receipt_id not in lanes:
            returned = (store.get_receipt(fb.receipt_id) or {}).get("returned")
            rows = [r for r in returned if isinstance(r, dict)] if isinstance(returned, list) else []
            lanes[fb.receipt_id] = {str(r.get("id")): sorted(r.get("experts") or {}) for r in rows}
        for verdict, ids in ((0, fb.useful_item_ids), (1, fb.not_useful_item_ids)):
            for item in ids:
                if verdict == 0:
                    tally.useful += 1
                else:
                    tally.not_useful += 1
                for expert in lanes[fb.receipt_id].get(item, []):
                    tally.per_expert.setdefault(expert, [0, 0])[verdict] += 1
    return tally


def charts(experts: list[ExpertStats], mix: ReceiptMix, tally: FeedbackTally) -> list[Chart]:
    calls = [(e.expert_id, [float(e.count)]) for e in experts]
    latency = [(e.expert_id, [e.p50_ms, e.p95_ms]) for e in experts]
    failures = [(e.expert_id, [e.timeout_rate, e.error_rate]) for e in experts]
    out = [
        hbars("calls", "Calls per expert", "How often each expert was asked.", calls, ["calls"], count),
        hbars("latency", "Latency per expert", "Median (p50) and 95th percentile (p95).", latency, ["p50", "p95"], ms),
        hbars("failures", "Timeouts and errors", "Share of calls that timed out or failed.", failures,
              ["timeouts", "errors"], pct, 1.0),
    ]  # fmt: skip
    labelled = [(e.expert_id, [e.hit_rate]) for e in experts if e.hit_rate is not None]
    if labelled:
        what = "Share of labelled calls that found relevant evidence."
        out.append(hbars("hits", "Hit rate (labelled calls)", what, labelled, ["hit rate"], pct, 1.0))
    classes = [(k or "none", [float(v)]) for k, v in sorted(mix.by_class.items(), key=lambda kv: (-kv[1], str(kv[0])))]
    out.append(hbars("classes", "Class mix", "Receipts per question class.", classes, ["receipts"], count))
    cache = [("hits", [float(mix.cache_hits)]), ("misses", [float(mix.total - mix.cache_hits)])]
    out.append(hbars("cache", "Answer cache", "Receipts answered from the cache, or not.", cache, ["receipts"], count))
    if tally.per_expert:
        marked = [(e, [float(v[0]), float(v[1])]) for e, v in sorted(tally.per_expert.items())]
        what = "Items people marked, by the experts that found them."
        out.append(hbars("feedback", "Feedback per expert", what, marked, ["useful", "not useful"], count))
    return out


async def stats_view(request: Request) -> Response:
    store = backend(request).router.store
    window = request.query_params.get("window", DEFAULT_WINDOW)
    if window not in WINDOWS:
        window = DEFAULT_WINDOW
    delta = WINDOWS[window]
    since = timestamp(datetime.now(UTC) - delta) if delta is not None else None

    def read() -> tuple[list[ExpertStats], ReceiptMix, FeedbackTally]:
        return (
            store.expert_stats(EventQuery(since=since)),
            store.receipt_mix(ReceiptQuery(since=since)),
            tally_feedback(store, since),
        )

    experts, mix, tally = await in_thread(read)
    context: dict[str, Any] = {
        "window": window,
        "windows": list(WINDOWS),
        "since": since,
        "experts": experts,
        "mix": mix,
        "tally": tally,
        "charts": charts(experts, mix, tally),
    }
    return page(request, "stats.html", **context)
