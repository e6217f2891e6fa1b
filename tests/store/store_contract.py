"""The contract every store backend passes (engine/store/port.py; cf. Hamilton's metadata-store
suite parametrised over its implementations).

A subclass provides three fixtures and inherits every test:

* ``store``: a fresh, empty store;
* ``reopen``: a callable giving a second handle on the same storage (another process would
  open it this way; an in-memory store returns itself);
* ``damage``: a callable that wrecks the queryable tables the way that backend gets wrecked
  (DuckDB: the file truncated to 0 bytes), leaving the log of record alone.

A new backend (PostgreSQL, say) is done when a ``TestXStore(StoreContract)`` passes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine.audit import audit
from engine.errors import InvalidRequest
from engine.keys import KeyRing
from engine.receipts import ReceiptLog
from engine.store import (
    BanditArm,
    BenchmarkEvent,
    CacheEntry,
    ConfigSnapshot,
    EventQuery,
    Experiment,
    Feedback,
    Hint,
    ReceiptQuery,
    Store,
    receipt_columns,
)

T0 = "2026-12-01T10:00:00.000+00:00"


def ts(minute: int) -> str:
    return f"2026-12-01T10:{minute:02d}:00.000+00:00"


def body(i: int, *, klass: str = "identifier", status: str = "ok", pipeline: str = "router → identifier",
         minute: int = 0, config_version: str = "c" * 64) -> dict[str, Any]:  # fmt: skip
    return {
        "receipt_id": f"{i:032x}",
        "created_at": ts(minute),
        "request_hash": "a" * 64,
        "config_version": config_version,
        "pipeline": pipeline,
        "classifier": {"class": klass, "confidence": 0.9, "rule": "r", "abstained": False},
        "result_count": i % 5,
        "returned": [{"id": i, "experts": {}} for i in ("a", "b", "x")],
        "status": status,
        "question": "é 文 \u2028",
    }


def event(run: int, expert: str, latency: float, status: str = "ok", hit: bool | None = None, minute: int = 0,
          arm: str = "router") -> BenchmarkEvent:  # fmt: skip
    return BenchmarkEvent(
        event_id=f"{run}:{expert}",
        run_id=str(run),
        expert_id=expert,
        arm=arm,
        task_class="identifier",
        question_hash="q",
        latency_ms=latency,
        result_count=1,
        precision_class="exact",
        status=status,
        config_version="c",
        created_at=ts(minute),
        hit=hit,
    )


class StoreContract:
    # ------------------------------------------------------------------ receipts
    def test_put_then_get_returns_the_body_and_the_first_copy_wins(self, store: Store) -> None:
        assert store.get_receipt(body(1)["receipt_id"]) is None
        assert not store.holds_data()
        store.put_receipt(body(1))
        store.put_receipt({**body(1), "status": "rewritten"})
        assert store.get_receipt(body(1)["receipt_id"]) == body(1)
        assert store.holds_data()

    def test_receipts_are_durable_for_another_handle(self, store: Store, reopen: Callable[[], Store]) -> None:
        for i in range(5):
            store.put_receipt(body(i, minute=i))
        other = reopen()
        assert [r.receipt_id for r in other.list_receipts(ReceiptQuery(limit=None))] == [
            body(i)["receipt_id"] for i in reversed(range(5))
        ]

    def test_list_filters_and_orders_newest_first(self, store: Store) -> None:
        store.put_receipt(body(1, minute=1))
        store.put_receipt(body(2, minute=2, klass="docs", pipeline="router → docs"))
        store.put_receipt(body(3, minute=3, status="zero_expert_gate"))
        store.put_receipt(body(4, minute=3, pipeline="identifier", config_version="d" * 64))
        ids = lambda q: [r.receipt_id[-1] for r in store.list_receipts(q)]  # noqa: E731
        assert ids(ReceiptQuery()) == ["3", "4", "2", "1"]  # same time: receipt_id breaks the tie
        assert ids(ReceiptQuery(klass="docs")) == ["2"]
        assert ids(ReceiptQuery(status="zero_expert_gate")) == ["3"]
        assert ids(ReceiptQuery(pipeline="identifier")) == ["3", "4", "1"]  # a pipeline on the path
        assert ids(ReceiptQuery(pipeline="router → docs")) == ["2"]  # or the whole path
        assert ids(ReceiptQuery(config_version="d" * 64)) == ["4"]
        assert ids(ReceiptQuery(since=ts(2), until=ts(3))) == ["2"]  # since inclusive, until exclusive
        assert ids(ReceiptQuery(limit=2)) == ["3", "4"]
        row = store.list_receipts(ReceiptQuery(klass="docs"))[0].to_dict()
        assert row["class"] == "docs" and row["pipeline"] == "router → docs" and row["result_count"] == 2

    def test_stored_columns_are_derived_from_the_body(self, store: Store) -> None:
        for i in range(3):
            store.put_receipt({**body(i), "chain": {"writer": "w" * 32, "seq": i, "prev": None}})
        stored = list(store.stored_receipts())
        assert [s.receipt_id for s in stored] == [body(i)["receipt_id"] for i in range(3)]
        assert all(s.body is not None and s.columns == receipt_columns(s.body) for s in stored)
        assert stored[2].columns["seq"] == 2
        assert [s.receipt_id for s in store.stored_receipts(body(1)["receipt_id"])] == [body(1)["receipt_id"]]
        assert sorted(b["receipt_id"] for b in store.logged_receipts()) == [body(i)["receipt_id"] for i in range(3)]

    def test_concurrent_puts_from_threads_lose_nothing(self, store: Store) -> None:
        def put(t: int) -> None:
            for i in range(25):
                store.put_receipt(body(t * 100 + i))

        threads = [threading.Thread(target=put, args=(t,)) for t in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(store.list_receipts(ReceiptQuery(limit=None))) == 200

    # ------------------------------------------------------------------ events and stats
    def test_events_filter_and_stats_match_hand_computed_values(self, store: Store) -> None:
        store.record_events(
            [
                event(1, "bm25", 10.0, hit=True, minute=1),
                event(2, "bm25", 20.0, hit=False, minute=2),
                event(3, "bm25", 30.0, status="timeout", minute=3),
                event(4, "bm25", 40.0, status="internal", hit=True, minute=4),
                event(1, "ripgrep", 5.0, minute=1),
                event(5, "ripgrep", 7.0, minute=9, arm="eval"),
            ]
        )
        store.sync()
        assert [e.event_id for e in store.list_events(EventQuery(expert_id="bm25"))] == [
            "1:bm25",
            "2:bm25",
            "3:bm25",
            "4:bm25",
        ]
        assert [e.event_id for e in store.list_events(EventQuery(arm="eval"))] == ["5:ripgrep"]
        assert store.list_events(EventQuery(run_id="1", expert_id="bm25"))[0].hit is True
        bm25, rg = store.expert_stats(EventQuery(arm="router"))
        # latencies 10, 20, 30, 40: p50 = 25, p95 = 30 + 0.85 * 10 = 38.5 (linear interpolation)
        assert (bm25.expert_id, bm25.count, bm25.p50_ms, bm25.p95_ms) == ("bm25", 4, 25.0, 38.5)
        assert (bm25.timeout_rate, bm25.error_rate, bm25.labelled, bm25.hit_rate) == (0.25, 0.25, 3, 0.6667)
        assert (rg.count, rg.p50_ms, rg.hit_rate) == (1, 5.0, None)
        windowed = store.expert_stats(EventQuery(since=ts(2), until=ts(4)))
        assert [(s.expert_id, s.count, s.p50_ms) for s in windowed] == [("bm25", 2, 25.0)]

    # ------------------------------------------------------------------ cache
    def test_cache_hits_fresh_entries_and_the_newest_wins(self, store: Store) -> None:
        assert store.cache_get("k") is None
        new = CacheEntry("k", {"items": [{"id": "new"}]}, False, ts(5), 2_000.0)
        old = CacheEntry("k", {"items": []}, True, ts(1), 3_000.0)
        store.cache_put(new)
        store.cache_put(old)  # arrives later but is older: must not replace the newer answer
        store.sync()
        hit = store.cache_get("k", now=1_000.0)
        assert hit is not None and hit.response == {"items": [{"id": "new"}]} and hit.negative is False
        assert store.cache_get("k", now=2_000.0) is None  # expired

    # ------------------------------------------------------------------ feedback, experiments, hints, bandit
    def test_feedback_must_name_an_existing_receipt_and_items_of_its_answer(self, store: Store) -> None:
        with pytest.raises(InvalidRequest) as missing:
            store.put_feedback(Feedback("f0", body(9)["receipt_id"], ("x",)))
        assert missing.value.field == "receipt_id"
        store.put_receipt(body(1))
        with pytest.raises(InvalidRequest) as foreign:  # an id that was not in the receipt's answer
            store.put_feedback(Feedback("f0", body(1)["receipt_id"], ("a", "not-an-item")))
        assert foreign.value.field == "useful_item_ids" and "not-an-item" in foreign.value.message
        store.put_receipt({k: v for k, v in body(3).items() if k != "returned"})
        with pytest.raises(InvalidRequest):  # a receipt that lists no items: no id can be in its answer
            store.put_feedback(Feedback("f0", body(3)["receipt_id"], ("a",)))
        store.put_feedback(Feedback("f1", body(1)["receipt_id"], ("a", "b"), "helped", "s1", ts(1)))
        store.put_receipt(body(2))
        store.put_feedback(Feedback("f2", body(2)["receipt_id"], (), created_at=ts(2)))
        assert [f.feedback_id for f in store.list_feedback()] == ["f1", "f2"]
        (f1,) = store.list_feedback(body(1)["receipt_id"])
        assert (f1.useful_item_ids, f1.note, f1.session_id) == (("a", "b"), "helped", "s1")
        assert f1.not_useful_item_ids == ()

    def test_feedback_keeps_the_items_marked_not_useful(self, store: Store, reopen: Callable[[], Store]) -> None:
        store.put_receipt(body(1))
        store.put_feedback(Feedback("f1", body(1)["receipt_id"], (), created_at=ts(1), not_useful_item_ids=("x", "b")))
        (f1,) = reopen().list_feedback()
        assert (f1.useful_item_ids, f1.not_useful_item_ids) == ((), ("x", "b"))

    # ------------------------------------------------------------------ receipt mix, config snapshots
    def test_receipt_mix_counts_classes_statuses_and_cache_hits(self, store: Store) -> None:
        store.put_receipt(body(1, minute=1))
        store.put_receipt({**body(2, minute=2), "cache": {"hit": True, "key": "k"}})
        store.put_receipt({**body(3, minute=3, klass="docs", status="zero_expert_gate"), "cache": {"hit": False}})
        store.put_receipt({**body(4, minute=4), "classifier": {"class": None}})
        mix = store.receipt_mix()
        assert (mix.total, mix.cache_hits, mix.cache_hit_rate) == (4, 1, 0.25)
        assert mix.by_class == {"identifier": 2, "docs": 1, None: 1}
        assert mix.by_status == {"ok": 3, "zero_expert_gate": 1}
        windowed = store.receipt_mix(ReceiptQuery(since=ts(2), until=ts(4), limit=1))  # the limit is ignored
        assert (windowed.total, windowed.cache_hits, windowed.by_class) == (2, 1, {"identifier": 1, "docs": 1})
        assert store.receipt_mix(ReceiptQuery(klass="nope")).cache_hit_rate is None

    def test_config_snapshots_round_trip_and_the_first_copy_wins(
        self, store: Store, reopen: Callable[[], Store]
    ) -> None:
        assert store.get_config_snapshot("v1") is None and store.list_config_snapshots() == []
        content = {"pipelines": {"router": {"nodes": [{"id": "n", "kind": "classify"}]}}, "priors": {"k": 60.5}}
        store.put_config_snapshot(ConfigSnapshot("v2", {"experts": {}}, ts(2)))
        store.put_config_snapshot(ConfigSnapshot("v1", content, ts(1)))
        store.put_config_snapshot(ConfigSnapshot("v1", {"other": True}, ts(3)))  # same version: kept as first seen
        other = reopen()
        got = other.get_config_snapshot("v1")
        assert got is not None and (got.content, got.created_at) == (content, ts(1))
        assert [s.config_version for s in other.list_config_snapshots()] == ["v1", "v2"]

    def test_experiments_and_hints_round_trip(self, store: Store) -> None:
        store.put_experiment(Experiment("e2", "cosqa:test", "c", None, ts(2), {"ndcg": 0.5, "arm": "router"}))
        store.put_experiment(Experiment("e1", "swe:test", "c", "abc", ts(1), {}))
        assert [e.experiment_id for e in store.list_experiments()] == ["e1", "e2"]
        assert store.list_experiments("cosqa:test")[0].metrics == {"ndcg": 0.5, "arm": "router"}
        store.put_hint(Hint("h1", "alpha", "a.py", None, "feedback", ts(1)))
        store.put_hint(Hint("h2", "beta", None, "Foo", "symbols", ts(2)))
        assert [h.hint_id for h in store.list_hints()] == ["h1", "h2"]
        assert store.list_hints("beta")[0].symbol == "Foo"
        full = Hint(
            "h3", "alpha", "b.py", None, "feedback", ts(3), ("id:foo", "class:identifier"), "identifier",
            "bm25,ripgrep", "ab" * 32, "cfg1", -1.0, "r1",
        )  # fmt: skip
        store.put_hint(full)
        assert store.list_hints("alpha")[-1] == full  # every field of a flywheel hint round-trips (engine.hints)

    def test_bandit_state_keeps_the_newest_update(self, store: Store) -> None:
        store.put_bandit(BanditArm("a1", "identifier", "bm25", 3, 1.5, ts(3)))
        store.put_bandit(BanditArm("a1", "identifier", "bm25", 2, 1.0, ts(2)))  # stale write
        store.put_bandit(BanditArm("a2", "docs", "docs", 1, 0.0, ts(1)))
        store.sync()
        arm = store.get_bandit("a1")
        assert arm is not None and (arm.pulls, arm.reward) == (3, 1.5)
        assert store.get_bandit("nope") is None
        assert [a.arm_id for a in store.list_bandit("docs")] == ["a2"]

    # ------------------------------------------------------------------ receipt log, damage, repair
    def test_receipt_log_chains_and_the_audit_passes(self, store: Store, tmp_path: Path) -> None:
        keys = KeyRing(tmp_path / "keys")
        log = ReceiptLog(store, keys)
        signed = [log.append(body(i, minute=i)) for i in range(4)]
        assert [r["chain"]["seq"] for r in signed] == [0, 1, 2, 3]
        assert signed[0]["chain"]["prev"] is None and len({r["chain"]["writer"] for r in signed}) == 1
        report = audit(store, [p.public_key for p in keys.pinned()])
        assert report.ok, report.to_dict()
        assert (report.checked, report.chains) == (4, 1)

    def test_repair_after_damage_restores_every_receipt_once(
        self, store: Store, damage: Callable[[Store], None], tmp_path: Path
    ) -> None:
        keys = KeyRing(tmp_path / "keys")
        log = ReceiptLog(store, keys)
        ids = [log.append(body(i, minute=i))["receipt_id"] for i in range(6)]
        store.put_feedback(Feedback("f1", ids[0], ("x",), created_at=ts(1)))
        store.put_config_snapshot(ConfigSnapshot("v1", {"priors": {}}, ts(1)))
        store.sync()
        damage(store)
        assert not store.health().ok or not store.list_receipts()
        report = store.repair()
        assert report.tables["receipts"] == 6 and report.log_receipts == 6
        assert sorted(r.receipt_id for r in store.list_receipts(ReceiptQuery(limit=None))) == sorted(ids)
        assert [f.feedback_id for f in store.list_feedback()] == ["f1"]
        assert [s.config_version for s in store.list_config_snapshots()] == ["v1"]
        assert store.health().ok
        again = store.repair()  # repairing a healthy store changes nothing
        assert again.tables["receipts"] == 6
        assert audit(store, [p.public_key for p in keys.pinned()]).ok
