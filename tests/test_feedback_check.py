"""Feedback is held to its receipt: the receipt lists what the answer returned (``returned``), and
every store refuses feedback naming a receipt it does not hold or an item that answer did not return."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from engine.errors import InvalidRequest
from engine.runtime import Router, RunResult
from engine.spec import load_schema
from engine.store import Feedback, MemoryStore
from engine.store.records import returned_ids
from engine.workspace import Workspace


def run(router: Router, **request: object) -> RunResult:
    return anyio.run(lambda: router.run("router", {"no_cache": True, **request}))


def test_receipts_list_the_returned_items_with_their_lanes(workspace_dir: Path, config_dir: Path) -> None:
    import jsonschema

    router = Router(config_dir, Workspace.open([workspace_dir]), store=MemoryStore())
    fused = run(router, question="FileSystemStorage save")
    receipt = fused.response["receipt"]
    jsonschema.validate(receipt, load_schema("receipt"))
    assert [r["id"] for r in receipt["returned"]] == [it["id"] for it in fused.response["items"]]
    for r, it in zip(receipt["returned"], fused.response["items"], strict=True):
        assert r["rank"] == it["rank"] and r["experts"] == {s["expert"]: s["rank"] for s in it["sources"]}
    separate = run(router, question="FileSystemStorage save", mode="separate")
    lanes = separate.response["separate"]
    listed = {it["id"]: {} for lane in lanes.values() for it in lane["items"]}
    for name, lane in lanes.items():
        for it in lane["items"]:
            listed[it["id"]][name] = it["rank"]
    assert {r["id"]: r["experts"] for r in separate.response["receipt"]["returned"]} == listed
    assert returned_ids(separate.response["receipt"]) == set(listed)
    failed = run(router, question="x", scope={"path": "../.."})
    assert failed.response["receipt"]["returned"] == []


def test_feedback_must_name_a_stored_receipt_and_items_it_returned(workspace_dir: Path, config_dir: Path) -> None:
    store = MemoryStore()
    router = Router(config_dir, Workspace.open([workspace_dir]), store=store)
    result = run(router, question="RetryPolicy should_retry")
    rid = result.response["receipt"]["receipt_id"]
    first, second = (it["id"] for it in result.response["items"][:2])
    with pytest.raises(InvalidRequest) as missing:
        store.put_feedback(Feedback("f0", "0" * 32, (first,)))
    assert missing.value.field == "receipt_id"
    with pytest.raises(InvalidRequest) as foreign:
        store.put_feedback(Feedback("f1", rid, (first, "f" * 16)))
    assert foreign.value.field == "useful_item_ids" and "ffffffffffffffff" in foreign.value.message
    with pytest.raises(InvalidRequest) as foreign_not:
        store.put_feedback(Feedback("f2", rid, (), not_useful_item_ids=("nope",)))
    assert foreign_not.value.field == "not_useful_item_ids"
    assert store.list_feedback() == []
    store.put_feedback(Feedback("f3", rid, (first,), not_useful_item_ids=(second,)))
    (kept,) = store.list_feedback(rid)
    assert (kept.useful_item_ids, kept.not_useful_item_ids) == ((first,), (second,))
    store.put_feedback(Feedback("f4", rid, ()))  # feedback naming no item is allowed (a note, say)
