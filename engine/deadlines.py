"""Per-expert deadlines that follow each expert's observed latency, within the request's budget.

The fan-out asks :func:`plan` for every selected expert before it starts any of them:

* **planned** — what the expert usually needs: ``max(MIN_ADAPTIVE_MS, FACTOR × p95 + SLACK_MS)``
  from its recent p95 (:class:`LatencyModel`), capped by ``timeout_ms`` (experts.yaml); just
  ``timeout_ms`` while fewer than ``MIN_SAMPLES`` calls were seen. An expert that usually
  answers in 40 ms is cut at ~100 ms instead of waiting out a 2 s timeout on the one call that
  hangs: the answer's tail follows what the experts usually take. An expert that is not one of
  the request's *leads* (prior under :data:`LEAD_SHARE` of the highest) is not waited for much
  longer than the leads usually take: ``max(MIN_FOLLOW_MS, FOLLOW_FACTOR × the slowest lead's
  p95)``. A low-weight slow expert (ripgrep at 0.1 over 20,000 files for a conceptual question)
  then answers with what it has (partial) instead of setting the request's latency.
* **actual** — the deadline enforced: ``planned``, cut to what is left of ``budget.latency_ms``
  once a *reserve* is kept for what follows the experts' deadline (the timer firing, killing
  late process trees, score, fuse, sign, spool): the p95 of what that took in recent requests
  (:data:`TAIL`, measured by the Router for every answer), at least :data:`BUDGET_TAIL_MS` and at
  most :data:`MAX_RESERVE_SHARE` of the budget. On a machine so loaded that the tail takes 60 ms
  the experts get less time and the answer still comes back within the budget.
* **skip** — with a budget, an expert whose recent p95 is more than :data:`SKIP_OVER` times the
  budget left is not started (status ``skipped``): it would only time out, and on two cores its
  CPU slows the experts that can make it. Experts that hand back partial results are never
  skipped (what they find before the deadline still counts). A skip is never for good: own calls
  count for :data:`OWN_WINDOW_S` only, and every :data:`PROBE_AFTER` skips in a row the expert
  runs once anyway, so a latency that recovered is seen.

Both deadlines go to the receipt (``per_expert.<e>.deadline``). Latency comes from
``tool_benchmark_events`` through the store port (:meth:`~engine.store.Store.expert_stats`, read
in a daemon thread that :meth:`engine.runtime.Router.flush` starts after an answer, at most every
:data:`REFRESH_S`, never on the hot path) and from this process's own recent calls, which take
over once there are ``MIN_SAMPLES`` of them. Reads on the hot path are dict lookups.
Numbers: docs/adr/0012-hot-path-and-deadlines.md.
"""

from __future__ import annotations

import atexit
import logging
import math
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

from .errors import StoreError
from .store import EventQuery, Store

log = logging.getLogger("engine")

#: the part of ``budget.latency_ms`` kept for what follows the fan-out deadline: killing the late
#: experts' process trees, scoring, fusion, signing and spooling the receipt. Measured by
#: benchmarks/latency.py (budget sweep) and benchmarks/budget_overrun.py (docs/benchmarks.md).
BUDGET_TAIL_MS = 15.0
MAX_RESERVE_SHARE = 0.6
#: the pseudo-expert under which the Router notes what followed the experts' deadline
TAIL = "(after the fan-out)"
FACTOR = 2.0
SLACK_MS = 20.0
MIN_ADAPTIVE_MS = 100.0
MIN_SAMPLES = 20
SKIP_OVER = 3.0
LEAD_SHARE = 0.5
FOLLOW_FACTOR = 1.5
MIN_FOLLOW_MS = 40.0
#: own calls remembered per expert and how long they count; how far back the store's events count
RECENT_CALLS = 200
OWN_WINDOW_S = 300.0
WINDOW = timedelta(hours=24)
#: an expert skipped this many times in a row is run once anyway (its latency may have recovered)
PROBE_AFTER = 10
REFRESH_S = 30.0
#: statuses whose latency is a search's (an unconfigured expert answered in microseconds without searching)
TIMED_STATUSES = frozenset({"ok", "partial", "timeout"})


@dataclass(frozen=True, slots=True)
class Deadline:
    """One expert's deadlines for one request (ms; ``None`` planned = no history, timeout_ms)."""

    planned_ms: float
    actual_ms: float
    p95_ms: float | None
    skip: str | None = None  # why it is not started at all
    lead_p95_ms: float | None = None  # set when it follows the request's leads

    def to_receipt(self) -> dict[str, Any]:
        out: dict[str, Any] = {"planned_ms": round(self.planned_ms, 1), "actual_ms": round(self.actual_ms, 1)}
        if self.p95_ms is not None:
            out["p95_ms"] = round(self.p95_ms, 1)
        if self.lead_p95_ms is not None:
            out["lead_p95_ms"] = round(self.lead_p95_ms, 1)
        return out


def lead_p95(weights: Mapping[str, float], p95: Callable[[str], float | None]) -> tuple[set[str], float | None]:
    """The request's leads (prior ≥ :data:`LEAD_SHARE` of the highest) and the slowest one's p95
    (None while a lead has no history: then nobody is cut to it)."""
    top = max(weights.values(), default=0.0)
    leads = {n for n, w in weights.items() if w >= LEAD_SHARE * top}
    known = [p95(n) for n in leads]
    if not leads or any(v is None for v in known):
        return leads, None
    return leads, max(v for v in known if v is not None)


def reserve(budget_ms: float, tail_p95_ms: float | None) -> float:
    """What a request of ``budget_ms`` keeps for after the experts' deadline (module docstring)."""
    return min(MAX_RESERVE_SHARE * budget_ms, max(BUDGET_TAIL_MS, tail_p95_ms or 0.0))


def plan(
    timeout_ms: float,
    p95_ms: float | None,
    budget_left_ms: float | None,
    *,
    partial_results: bool = False,
    lead_p95_ms: float | None = None,
    reserve_ms: float = BUDGET_TAIL_MS,
) -> Deadline:
    """The deadlines of one expert (see the module docstring); ``lead_p95_ms`` only for an expert
    that is not a lead; ``budget_left_ms`` already net of nothing, ``reserve_ms`` is kept from it. Pure."""
    planned = float(timeout_ms)
    if p95_ms is not None:
        planned = min(planned, max(MIN_ADAPTIVE_MS, FACTOR * p95_ms + SLACK_MS))
    if lead_p95_ms is not None:
        planned = min(planned, max(MIN_FOLLOW_MS, FOLLOW_FACTOR * lead_p95_ms))
    if budget_left_ms is None:
        return Deadline(planned, planned, p95_ms, None, lead_p95_ms)
    left = budget_left_ms - reserve_ms
    actual = max(1.0, min(planned, left))
    skip = None
    if p95_ms is not None and not partial_results and p95_ms > SKIP_OVER * max(left, 1.0):
        skip = f"its recent p95 ({p95_ms:.0f} ms) does not fit the {max(left, 0):.0f} ms left of the budget"
    return Deadline(planned, actual, p95_ms, skip, lead_p95_ms)


def _p95(values: list[float]) -> float:
    """Linear interpolation, as the store's ``quantile_cont``."""
    xs = sorted(values)
    pos = 0.95 * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


class LatencyModel:
    """Recent p95 latency per expert for one store and arm, shared by every Router of a process
    that uses that store (eval runs one Router per snapshot). Reads are dict lookups; the store
    is read by :meth:`refresh_soon`, own calls are noted by :meth:`observe` and folded in by :meth:`update`."""

    _shared: ClassVar[weakref.WeakKeyDictionary[Any, dict[str, LatencyModel]]] = weakref.WeakKeyDictionary()
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, store: Store, arm: str) -> None:
        self.store = store
        self.arm = arm
        self._own: dict[str, deque[tuple[float, float]]] = {}  # expert → (monotonic time, latency)
        self._skips: dict[str, int] = {}
        self._p95: dict[str, float] = {}  # what plan() reads: replaced whole, never edited
        self._stored: dict[str, tuple[int, float]] = {}  # expert → (events, p95) from the store
        self._refreshed = -math.inf
        self._refreshing = False
        self._lock = threading.Lock()

    @classmethod
    def shared(cls, store: Store, arm: str) -> LatencyModel:
        with cls._shared_lock:
            by_arm = cls._shared.setdefault(store, {})
            if arm not in by_arm:
                by_arm[arm] = cls(store, arm)
            return by_arm[arm]

    def p95(self, expert: str) -> float | None:
        """The expert's recent p95 in ms; None without enough history, or when it is due a probe."""
        if self._skips.get(expert, 0) >= PROBE_AFTER:
            return None
        return self._p95.get(expert)

    def observe(self, expert: str, latency_ms: float, status: str) -> None:
        """Note one of this process's calls (after the answer; folded in by :meth:`update`)."""
        with self._lock:
            if status == "skipped":
                self._skips[expert] = self._skips.get(expert, 0) + 1
                return
            self._skips.pop(expert, None)
            if status in TIMED_STATUSES:
                self._own.setdefault(expert, deque(maxlen=RECENT_CALLS)).append((time.monotonic(), latency_ms))

    def update(self, now: float | None = None) -> None:
        """Recompute every p95 from own recent calls and the last store read (a few hundred floats)."""
        since = (time.monotonic() if now is None else now) - OWN_WINDOW_S
        with self._lock:
            own = {e: [ms for t, ms in v if t >= since] for e, v in self._own.items()}
            stored = dict(self._stored)
        out: dict[str, float] = {}
        for expert in set(own) | set(stored):
            mine = own.get(expert, [])
            if len(mine) >= MIN_SAMPLES:
                out[expert] = _p95(mine)
            elif expert in stored and stored[expert][0] + len(mine) >= MIN_SAMPLES:
                out[expert] = stored[expert][1]
        self._p95 = out

    def refresh_soon(self, now: float | None = None) -> bool:
        """Read the store in a daemon thread when the last read is older than :data:`REFRESH_S`
        (a busy or stalled store then delays only that thread). Never waits; True if started."""
        now = time.monotonic() if now is None else now
        with self._lock:
            if self._refreshing or now - self._refreshed < REFRESH_S:
                return False
            self._refreshing, self._refreshed = True, now
        thread = threading.Thread(target=self._refresh, name="engine-latency-refresh", daemon=True)
        _LIVE.add(thread)
        thread.start()
        return True

    def refresh(self) -> None:
        """Read the store's recent events now (what the thread does; tests call it)."""
        with self._lock:
            self._refreshing, self._refreshed = True, time.monotonic()
        self._refresh()

    def _refresh(self) -> None:
        try:
            since = (datetime.now(UTC) - WINDOW).isoformat(timespec="milliseconds")
            stats = self.store.expert_stats(EventQuery(since=since, arm=self.arm))
            stored = {s.expert_id: (s.count, s.p95_ms) for s in stats}
            with self._lock:
                self._stored = stored
        except (StoreError, OSError) as exc:  # a busy or damaged store: keep what we have
            log.debug("latency model: store not read: %s", exc)
        except Exception:  # noqa: BLE001 - bookkeeping after the answer must never fail a request
            log.exception("latency model: store read failed")
        finally:
            with self._lock:
                self._refreshing = False
            _LIVE.discard(threading.current_thread())
        self.update()


#: refresh threads still reading; joined at exit, so none is inside DuckDB when the interpreter
#: finalises (a daemon thread still waiting on a busy store's lock is harmless and left behind)
_LIVE: set[threading.Thread] = set()


@atexit.register
def _join_refreshes(timeout_s: float = 5.0) -> None:
    end = time.monotonic() + timeout_s
    for thread in list(_LIVE):
        thread.join(max(0.0, end - time.monotonic()))
