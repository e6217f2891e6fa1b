"""The answer cache as a stage of the graph (issue 9): a cached answer's receipt tells the same story
as the answer it repeats — classification, pipeline path, expert selection — plus ``cache.hit``."""

from __future__ import annotations

from pathlib import Path

import anyio

from engine.runtime import Router, RunResult
from engine.workspace import Workspace

from ..helpers import ask, plain_pynacl_verify

IDENTIFIER_EXPERTS = {"ripgrep", "bm25", "semantic"}  # priors.yaml classes.identifier
SAME = ("classifier", "pipeline", "experts_selected", "fusion", "config_version", "request_hash", "result_count")


def _twice(config_dir: Path, workspace: Path, pipeline: str, question: str) -> tuple[RunResult, RunResult]:
    """Two routers, one after the other: the second answer comes from the store's cache table."""
    first = ask(config_dir, workspace, question, pipeline=pipeline, no_cache=False)
    second = ask(config_dir, workspace, question, pipeline=pipeline, no_cache=False)
    return first, second


def test_cached_identifier_receipt_repeats_classification_path_and_selection(indexed: Path, config_dir: Path) -> None:
    first, second = _twice(config_dir, indexed, "identifier", '"RetryPolicy"')
    r1, r2 = first.response["receipt"], second.response["receipt"]
    assert r1["cache"]["hit"] is False and r2["cache"]["hit"] is True
    assert r1["cache"]["key"] == r2["cache"]["key"]
    for field in SAME:
        assert r1[field] == r2[field], field
    assert (r2["classifier"]["class"], r2["classifier"]["rule"]) == ("identifier", "pipeline-class:identifier")
    # semantic joined the identifier class at a low prior in issue 11 (near-miss quoted messages)
    assert r2["pipeline"] == "identifier" and set(r2["experts_selected"]["selected"]) == IDENTIFIER_EXPERTS
    assert r2["per_expert"] == {} and r2["sub_queries"] == {}  # nothing fired: the receipt says so
    assert second.response["items"] == first.response["items"] and first.response["items"]
    assert second.response["confidence"] == first.response["confidence"]
    assert plain_pynacl_verify(r1) and plain_pynacl_verify(r2)


def test_cached_router_answer_keeps_the_dispatch_path(indexed: Path, config_dir: Path) -> None:
    first, second = _twice(config_dir, indexed, "router", "where is FileSystemStorage defined")
    r1, r2 = first.response["receipt"], second.response["receipt"]
    assert r2["cache"]["hit"] is True and r2["pipeline"] == r1["pipeline"] == "router → typed-symbol"
    for field in SAME:
        assert r1[field] == r2[field], field
    assert r2["classifier"]["rule"] == "definition-phrase"


def test_same_router_answers_the_repeat_from_its_memo(indexed: Path, config_dir: Path) -> None:
    router = Router(config_dir, Workspace.open([indexed]))

    async def go() -> tuple[RunResult, RunResult, RunResult]:
        try:
            request = {"question": '"upload.max_size_mb"'}
            a = await router.run("identifier", request)
            b = await router.run("identifier", request)  # nothing flushed yet: the in-process memo answers
            c = await router.run("identifier", {**request, "no_cache": True})
            return a, b, c
        finally:
            await router.aclose()

    a, b, c = anyio.run(go)
    router.flush()
    assert b.response["receipt"]["cache"]["hit"] is True and b.response["items"] == a.response["items"]
    assert b.response["receipt"]["experts_selected"] == a.response["receipt"]["experts_selected"]
    # no_cache neither reads nor keys the cache, and every expert runs again
    assert c.response["receipt"]["cache"] == {"hit": False, "key": None}
    assert set(c.response["receipt"]["per_expert"]) == IDENTIFIER_EXPERTS


def test_separate_mode_is_never_served_from_the_cache(indexed: Path, config_dir: Path) -> None:
    first = ask(config_dir, indexed, '"RetryPolicy"', pipeline="identifier", no_cache=False, mode="separate")
    second = ask(config_dir, indexed, '"RetryPolicy"', pipeline="identifier", no_cache=False, mode="separate")
    for r in (first, second):
        assert r.response["receipt"]["cache"] == {"hit": False, "key": None}
        assert set(r.response["separate"]) == IDENTIFIER_EXPERTS


def test_an_answer_an_expert_timed_out_in_is_answered_but_not_kept(indexed: Path, config_dir: Path) -> None:
    """A timeout may pass in a second: its degraded answer must not be repeated until the entry expires."""
    experts = config_dir / "experts.yaml"
    experts.write_text(experts.read_text().replace("timeout_ms: 3000", "timeout_ms: 1", 1))  # ripgrep's
    first, second = _twice(config_dir, indexed, "identifier", '"RetryPolicy"')
    r1, r2 = first.response["receipt"], second.response["receipt"]
    assert r1["per_expert"]["ripgrep"]["status"] in ("timeout", "partial")
    assert first.response["items"]  # answered by the others all the same
    assert r1["cache"]["kept"] is False and r1["cache"]["not_kept"].startswith("ripgrep ")
    assert r2["cache"]["hit"] is False and r2["cache"]["key"] == r1["cache"]["key"]
    assert plain_pynacl_verify(r1)
    # complete answers are kept and repeated, and their receipt says so
    experts.write_text(experts.read_text().replace("timeout_ms: 1\n", "timeout_ms: 3000\n", 1))
    third, fourth = _twice(config_dir, indexed, "identifier", '"RetryPolicy"')
    assert third.response["receipt"]["cache"]["kept"] is True and "not_kept" not in third.response["receipt"]["cache"]
    assert fourth.response["receipt"]["cache"]["hit"] is True


def test_a_cached_answer_whose_file_changed_is_not_served(indexed: Path, config_dir: Path) -> None:
    """Found by an exploratory run: a file edited without `engine index` (HEAD and index generations
    unchanged, so the same key) still got its old lines served from the cache."""
    first, second = _twice(config_dir, indexed, "identifier", '"RetryPolicy"')
    assert second.response["receipt"]["cache"]["hit"] is True
    top = first.response["items"][0]
    edited = next(p for p in indexed.iterdir() if p.name == top["project"]) / top["path"]
    edited.write_text(edited.read_text() + "\n# edited, not re-indexed\n")
    third = ask(config_dir, indexed, '"RetryPolicy"', pipeline="identifier", no_cache=False)
    cache = third.response["receipt"]["cache"]
    assert cache["hit"] is False and cache["changed"] == f"{top['project']}/{top['path']}"
    assert third.response["receipt"]["per_expert"]  # answered afresh
    fourth = ask(config_dir, indexed, '"RetryPolicy"', pipeline="identifier", no_cache=False)
    assert fourth.response["receipt"]["cache"]["hit"] is True  # the fresh answer is kept in its place
