"""Per-expert deadlines (engine/deadlines.py) and how the fan-out keeps them: planned from recent
p95, cut to the budget, skipped when far over it, partial answers at the deadline. Scheduler-level
tests: fake experts script the timing (STYLE §14); ripgrep's real partial answers are in
tests/experts/test_ripgrep_stream.py."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from engine.deadlines import (
    BUDGET_TAIL_MS,
    FOLLOW_FACTOR,
    MIN_ADAPTIVE_MS,
    MIN_FOLLOW_MS,
    MIN_SAMPLES,
    OWN_WINDOW_S,
    PROBE_AFTER,
    TAIL,
    LatencyModel,
    lead_p95,
    plan,
    reserve,
)
from engine.experts.base import PARTIAL, Found
from engine.experts.fake import FakeExpert
from engine.runtime import Router
from engine.store import BenchmarkEvent, MemoryStore
from engine.types import Evidence, Query
from engine.workspace import Workspace

from .test_graph_scheduler import NODES, _config, _ev


def test_plan_follows_p95_within_timeout_and_budget() -> None:
    assert plan(2000, None, None).actual_ms == 2000  # no history: the expert's timeout
    d = plan(2000, 30.0, None)
    assert d.planned_ms == d.actual_ms == MIN_ADAPTIVE_MS  # 2 x 30 + 20 is under the floor
    assert plan(2000, 400.0, None).planned_ms == 820.0
    assert plan(500, 400.0, None).planned_ms == 500  # never past timeout_ms
    d = plan(2000, 400.0, 300.0)
    assert d.planned_ms == 820.0 and d.actual_ms == 300.0 - BUDGET_TAIL_MS and d.skip is None
    assert plan(2000, 10.0, 5.0).actual_ms == 1.0  # the budget is spent: the shortest deadline
    assert plan(2000, 2000.0, 300.0).skip  # p95 far over what is left: not started
    assert plan(2000, 2000.0, 300.0, partial_results=True).skip is None  # what it finds still counts
    assert plan(2000, 2000.0, None).skip is None  # without a budget nothing is skipped


def test_the_reserve_after_the_deadline_follows_the_measured_tail() -> None:
    assert reserve(100, None) == BUDGET_TAIL_MS
    assert reserve(1000, 80.0) == 80.0  # a loaded machine: the experts get less, the budget holds
    assert reserve(100, 80.0) == 60.0  # never more than MAX_RESERVE_SHARE of the budget
    assert plan(2000, None, 100.0, reserve_ms=60.0).actual_ms == 40.0


def test_experts_that_are_not_leads_follow_the_leads() -> None:
    p95 = {"semantic": 40.0, "bm25": 30.0, "ripgrep": 400.0}.get
    leads, slowest = lead_p95({"semantic": 1.0, "bm25": 0.5, "ripgrep": 0.1}, p95)
    assert leads == {"semantic", "bm25"} and slowest == 40.0
    d = plan(3000, 400.0, None, partial_results=True, lead_p95_ms=slowest)
    assert d.planned_ms == FOLLOW_FACTOR * 40.0 and d.to_receipt()["lead_p95_ms"] == 40.0
    assert plan(3000, None, None, lead_p95_ms=10.0).planned_ms == MIN_FOLLOW_MS
    assert lead_p95({"semantic": 1.0, "typed": 0.9}, p95) == ({"semantic", "typed"}, None)  # no history: no cut


def test_latency_model_uses_own_calls_then_forgets_them() -> None:
    model = LatencyModel(MemoryStore(), "router")
    for i in range(MIN_SAMPLES - 1):
        model.observe("bm25", 10.0 + i, "ok")
    model.observe("bm25", 0.01, "unconfigured")  # no search happened: not a latency
    model.update()
    assert model.p95("bm25") is None  # not enough calls yet
    model.observe("bm25", 500.0, "timeout")  # a timeout's latency is its deadline: it counts
    model.update()
    assert model.p95("bm25") == pytest.approx(29.0 + 0.95 * 0 + (500 - 28) * 0.05, rel=0.2)
    model.update(now=time.monotonic() + OWN_WINDOW_S + 1)
    assert model.p95("bm25") is None


def test_latency_model_reads_the_store_through_the_port() -> None:
    store = MemoryStore()
    now = "2099-01-01T00:00:00.000+00:00"
    store.record_events(
        BenchmarkEvent(f"e{i}", f"r{i}", "semantic", arm, "conceptual", "q", 40.0 + i, 3, "semantic", "ok", "v", now)
        for i in range(30)
        for arm in ("router", "semantic")
    )
    model = LatencyModel(store, "router")
    model.refresh()
    assert model.p95("semantic") == pytest.approx(40.0 + 0.95 * 29, abs=0.01)  # only the router arm's events
    assert LatencyModel.shared(store, "router") is LatencyModel.shared(store, "router")


def test_a_skipped_expert_is_probed_again() -> None:
    model = LatencyModel(MemoryStore(), "router")
    for _ in range(MIN_SAMPLES):
        model.observe("typed", 3000.0, "ok")
    model.update()
    for _ in range(PROBE_AFTER):
        assert plan(4000, model.p95("typed"), 200.0).skip
        model.observe("typed", 0.0, "skipped")
    assert model.p95("typed") is None and plan(4000, model.p95("typed"), 200.0).skip is None
    model.observe("typed", 150.0, "timeout")  # the probe ran: the count starts over
    assert model.p95("typed") is not None


class _Partial(FakeExpert):
    """Finds one item at once, then keeps searching past any deadline (a tool that streams)."""

    partial_results = True

    async def search_partial(self, query: Query, plan: dict[str, Any], found: Found) -> list[Evidence]:
        so_far = [_ev("early.py", 3)]
        found.keep(lambda: list(so_far))
        await anyio.sleep(10)
        return so_far


def _router(cfg: Path, tmp_path: Path) -> Router:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    router = Router(cfg, Workspace.open([ws]))
    router.config()
    return router


def _ask(router: Router, budget_ms: int | None, experts: dict[str, FakeExpert]) -> tuple[dict[str, Any], float]:
    async def go() -> tuple[dict[str, Any], float]:
        for name, inst in experts.items():
            router.pool.inject(name, inst)
        req: dict[str, Any] = {"question": "find the retry policy please", "no_cache": True}
        if budget_ms:
            req["budget"] = {"latency_ms": budget_ms}
        t0 = time.perf_counter()
        res = await router.run("diamond", req)
        return res.response, (time.perf_counter() - t0) * 1000

    return anyio.run(go)


def test_budget_bounds_the_request_and_the_fast_expert_answers(tmp_path: Path) -> None:
    router = _router(_config(tmp_path, slow_ms=5000, slow_timeout=5000), tmp_path)
    spec = router.config().experts
    fast = FakeExpert.with_handler(spec["fast"], router.pool.env, lambda q: [_ev("c.py", 5)])
    resp, wall_ms = _ask(router, 300, {"fast": fast, "slow": FakeExpert(spec["slow"], router.pool.env)})
    per = resp["receipt"]["per_expert"]
    assert per["fast"]["status"] == "ok" and per["slow"]["status"] == "timeout"
    assert per["slow"]["deadline"]["planned_ms"] == 5000  # its timeout: no history yet
    assert per["slow"]["deadline"]["actual_ms"] <= 300 - BUDGET_TAIL_MS
    assert [i["path"] for i in resp["items"]] == ["c.py"]
    assert resp["receipt"]["budget"]["reserved_ms"] == BUDGET_TAIL_MS  # no tail measured yet
    assert wall_ms < 300 + 200  # budget + a generous margin for a loaded CI machine
    assert router.latency._own[TAIL]  # what followed the deadline was noted for the next reserve


def test_partial_answer_at_the_deadline(tmp_path: Path) -> None:
    router = _router(_config(tmp_path, slow_ms=0, slow_timeout=200), tmp_path)
    spec = router.config().experts
    fast = FakeExpert.with_handler(spec["fast"], router.pool.env, lambda q: [_ev("c.py", 5)])
    # past the deadline only files already judged are served, and only a built-in adapter's snippets
    # need no scan: the partial expert reads files as ripgrep does
    slow = _Partial(dataclasses.replace(spec["slow"], adapter="ripgrep"), router.pool.env)
    resp, wall_ms = _ask(router, None, {"fast": fast, "slow": slow})
    slow = resp["receipt"]["per_expert"]["slow"]
    assert slow["status"] == "partial" and slow["result_count"] == 1 and "deadline" in slow["error"]
    early = next(i for i in resp["items"] if i["path"] == "early.py")
    assert PARTIAL in early["flags"]
    assert wall_ms < 2000


def test_expert_far_over_the_budget_is_skipped_and_not_recorded(tmp_path: Path) -> None:
    router = _router(_config(tmp_path, slow_ms=0), tmp_path)
    spec = router.config().experts
    for _ in range(MIN_SAMPLES):
        router.latency.observe("slow", 4000.0, "ok")
    router.latency.update()
    calls: list[str] = []
    slow = FakeExpert.with_handler(spec["slow"], router.pool.env, lambda q: calls.append("slow") or [])
    fast = FakeExpert.with_handler(spec["fast"], router.pool.env, lambda q: [_ev("c.py", 5)])
    resp, _ = _ask(router, 300, {"fast": fast, "slow": slow})
    per = resp["receipt"]["per_expert"]["slow"]
    assert per["status"] == "skipped" and per["error_class"] == "over_budget" and calls == []
    assert per["deadline"]["p95_ms"] == 4000
    assert not [e for e in router._after if getattr(e, "expert_id", None) == "slow"]  # not a call: no event


def test_the_slowest_expert_starts_first(tmp_path: Path) -> None:
    """The fan-out starts experts slowest first (recent p95): the others start while it runs."""
    for slowest in ("fast", "slow"):  # the names are the config's; the history decides
        one_fanout = [{"id": "fanout", "kind": "fanout", "after": ["gate"]} if n["id"] == "fan-a" else n for n in NODES]
        nodes = [{**n, "after": ["fanout"]} if n["id"] == "score" else n for n in one_fanout if n["id"] != "fan-b"]
        router = _router(_config(tmp_path / slowest, nodes, slow_ms=0), tmp_path / slowest)
        spec = router.config().experts
        for _ in range(MIN_SAMPLES):
            for name in ("fast", "slow"):
                router.latency.observe(name, 40.0 if name == slowest else 5.0, "ok")
        router.latency.update()
        started: list[str] = []

        def handler(name: str, started: list[str] = started) -> Any:
            return lambda q: started.append(name) or [_ev(f"{name}.py", 1)]

        experts = {n: FakeExpert.with_handler(spec[n], router.pool.env, handler(n)) for n in ("fast", "slow")}
        _ask(router, None, experts)
        assert started[0] == slowest and sorted(started) == ["fast", "slow"]
