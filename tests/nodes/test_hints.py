"""The hints node (engine/hints.py, engine/nodes/hints.py): hints recorded after the answer and from
feedback, a hint lane of confirmed files, expiry when the file changes or the config does, and
bounded gate skips. Real git repos, the real DuckDB store, real ripgrep and BM25."""

from __future__ import annotations

import hashlib
import shutil
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

from engine.errors import GraphError
from engine.graph import build_graph
from engine.hints import HINT_LANE, HintBook, HintPlan, SkipBounds, question_keys
from engine.runtime import Router, RunResult
from engine.spec import load_config
from engine.store import Feedback, Hint
from engine.types import Classification, Features
from engine.workspace import Workspace

PIPELINE = """\
version: 1
name: hinted
class: identifier
description: identifier questions with hints
nodes:
  - {id: classify, kind: classify}
  - id: hints
    kind: hints
    after: [classify]
    settings:
      weight: 0.5
      skip: {min_observations: 1, keep_at_least: 1, max_skipped: 1}
  - {id: gate, kind: gate, after: [hints], settings: {experts: [ripgrep, bm25]}}
  - {id: fanout, kind: fanout, after: [gate]}
  - {id: score, kind: score, after: [fanout]}
  - {id: fuse, kind: fuse, after: [score]}
  - {id: receipt, kind: receipt, after: [fuse]}
"""


@pytest.fixture
def hinted(config_dir: Path, indexed: Path) -> tuple[Path, Path]:
    (config_dir / "pipelines" / "hinted.yaml").write_text(PIPELINE)
    return config_dir, indexed


def run(router: Router, question: str) -> RunResult:
    result = anyio.run(router.run, "hinted", {"question": question, "no_cache": True})
    router.flush()
    return result


def item_of(result: RunResult, path: str) -> dict[str, Any]:
    return next(it for it in result.response["items"] if it["path"] == path)


def test_feedback_teaches_a_hint_lane_that_expires_when_the_file_changes(hinted: tuple[Path, Path]) -> None:
    config_dir, ws = hinted
    router = Router(config_dir, Workspace.open([ws]))
    first = run(router, "where is RetryPolicy should_retry")
    receipt = first.response["receipt"]
    assert receipt["hints"]["keys"][:2] == ["id:retrypolicy", "id:should_retry"]
    assert "lane" not in receipt["hints"]  # nothing learned yet
    useful = item_of(first, "alpha/retry.py")["id"]
    router.record_feedback(Feedback(uuid.uuid4().hex, receipt["receipt_id"], (useful,)))
    router.flush()
    anyio.run(router.aclose)

    # the hints are in the DuckDB store, with the file's content hash and the config version
    later = Router(config_dir, Workspace.open([ws]))
    stored = [h for h in later.store.list_hints("alpha") if h.path == "alpha/retry.py" and h.source == "feedback"]
    assert len(stored) == 1 and stored[0].weight == 1.0
    assert stored[0].config_version == receipt["config_version"]
    assert stored[0].content_hash == hashlib.sha256((ws / "alpha" / "alpha" / "retry.py").read_bytes()).hexdigest()
    assert "id:retrypolicy" in stored[0].keys and "class:identifier" in stored[0].keys

    # a new Router (another process) reads them after its first answer (never before one: the
    # hot path reads no store), then a similar question gets the hint lane
    cold = run(later, "RetryPolicy attempts").response["receipt"]["hints"]
    assert cold["loaded"] is False and "lane" not in cold
    second = run(later, "RetryPolicy attempts")
    assert "loaded" not in second.response["receipt"]["hints"]
    lane = second.response["receipt"]["hints"]["lane"]
    assert [(f["project"], f["path"]) for f in lane] == [("alpha", "alpha/retry.py")]
    assert lane[0]["keys"] == ["id:retrypolicy"]
    assert HINT_LANE in second.response["receipt"]["per_expert"]
    assert HINT_LANE in {s["expert"] for s in item_of(second, "alpha/retry.py")["sources"]}
    assert second.response["receipt"]["fusion"]["weights"][HINT_LANE] == 0.5
    assert second.response["receipt"]["budget"]["spent"]["experts"] == len(
        [k for k in second.response["receipt"]["per_expert"] if k != HINT_LANE]
    )

    # the file changes: its hint expires (no lane, counted as expired)
    path = ws / "alpha" / "alpha" / "retry.py"
    path.write_text(path.read_text() + "\n# RetryPolicy tuned\n")
    third = run(later, "RetryPolicy attempts")
    hints = third.response["receipt"]["hints"]
    assert "lane" not in hints and hints["expired"] == 1
    assert HINT_LANE not in third.response["receipt"]["per_expert"]
    anyio.run(later.aclose)


def test_feedback_before_the_flush_still_teaches(hinted: tuple[Path, Path]) -> None:
    """An answer's bookkeeping waits for the flush (off the hot path); feedback that comes first
    settles it, so what the answer observed is there to learn from."""
    config_dir, ws = hinted
    router = Router(config_dir, Workspace.open([ws]))
    first = anyio.run(router.run, "hinted", {"question": "where is RetryPolicy should_retry", "no_cache": True})
    assert router._answered  # not settled yet: no flush since the answer
    useful = item_of(first, "alpha/retry.py")["id"]
    router.record_feedback(Feedback(uuid.uuid4().hex, first.response["receipt"]["receipt_id"], (useful,)))
    router.flush()
    anyio.run(router.aclose)
    stored = [h for h in router.store.list_hints("alpha") if h.path == "alpha/retry.py" and h.source == "feedback"]
    assert len(stored) == 1


def test_hints_expire_with_the_config_version(hinted: tuple[Path, Path]) -> None:
    config_dir, ws = hinted
    router = Router(config_dir, Workspace.open([ws]))
    first = run(router, "where is RetryPolicy should_retry")
    useful = item_of(first, "alpha/retry.py")["id"]
    router.record_feedback(Feedback(uuid.uuid4().hex, first.response["receipt"]["receipt_id"], (useful,)))
    router.flush()
    assert "lane" in run(router, "RetryPolicy attempts").response["receipt"]["hints"]
    priors = config_dir / "priors.yaml"
    priors.write_text(priors.read_text().replace("min_prior: 0.1", "min_prior: 0.11"))  # a new config version
    after = run(router, "RetryPolicy attempts").response["receipt"]
    assert after["config_version"] != first.response["receipt"]["config_version"]
    assert "lane" not in after["hints"]
    anyio.run(router.aclose)


def test_the_gate_skips_an_idle_expert_within_bounds(hinted: tuple[Path, Path]) -> None:
    config_dir, ws = hinted
    router = Router(config_dir, Workspace.open([ws]))
    first = run(router, "where is RetryPolicy should_retry")
    version = first.response["receipt"]["config_version"]
    # bm25 ran on identifier questions three times and never contributed; ripgrep always did
    book = router.hint_book()
    book.add(
        Hint(
            f"h{i}",
            "",
            None,
            None,
            "feedback",
            keys=("class:identifier",),
            klass="identifier",
            expert=e,
            config_version=version,
            weight=w,
        )
        for i, (e, w) in enumerate([("bm25", 0.0)] * 3 + [("ripgrep", 1.0)] * 3)
    )
    second = run(router, "where is RetryPolicy should_retry").response["receipt"]
    assert second["experts_selected"]["selected"] == ["ripgrep"]
    assert second["experts_selected"]["why"]["bm25"].startswith("skipped by hints: contributed to 0 of")
    assert second["hints"]["skipped"] == {"bm25": second["experts_selected"]["why"]["bm25"]}
    assert "bm25" not in second["per_expert"]
    anyio.run(router.aclose)


def plan_with(stats: dict[str, tuple[int, int]], bounds: SkipBounds) -> HintPlan:
    return HintPlan(("class:identifier",), 0.5, "lexical", stats=stats, bounds=bounds)


def test_skips_are_bounded() -> None:
    stats = {"a": (10, 0), "b": (10, 0), "c": (10, 0), "d": (3, 0), "e": (10, 5)}
    experts = {"a": 1.0, "b": 0.9, "c": 0.8, "d": 0.7, "e": 0.6}
    # at most max_skipped, lowest prior first among equally idle ones; d has too few observations
    # and e contributed
    plan = plan_with(stats, SkipBounds(min_observations=5, keep_at_least=1, max_skipped=2))
    kept, why = dict(experts), dict[str, str]()
    plan.apply_skips(kept, why)
    assert sorted(kept) == ["a", "d", "e"] and set(plan.skipped) == {"b", "c"} == set(why)
    # never below keep_at_least
    plan = plan_with(stats, SkipBounds(min_observations=5, keep_at_least=4, max_skipped=3))
    kept = dict(experts)
    plan.apply_skips(kept, {})
    assert len(kept) == 4 and list(plan.skipped) == ["c"]
    # protected experts are never skipped; no bounds (no `skip` setting) skips nothing
    plan = plan_with(stats, SkipBounds(min_observations=5, keep_at_least=1, max_skipped=5, protect=("a", "b", "c")))
    kept = dict(experts)
    plan.apply_skips(kept, {})
    assert kept == experts
    plan = HintPlan(("class:identifier",), 0.5, "lexical", stats=stats, bounds=None)
    plan.apply_skips(kept, {})
    assert kept == experts


def test_keys_and_settings_are_checked(config_dir: Path) -> None:
    c = Classification(
        "identifier", 1.0, "r", False, Features(identifiers=("RetryPolicy",), keywords=("retry", "Policy"))
    )
    assert question_keys(c) == ("id:retrypolicy", "kw:retry", "kw:policy", "class:identifier")
    assert len(HintBook()) == 0
    settings = "weight: 0.5\n      skip: {min_observations: 1, keep_at_least: 1, max_skipped: 1}"
    assert settings in PIPELINE
    for bad in ("weight: -1", "skip: {max_rate: 2}", "skip: {protect: [nope]}", "keys: {colour: 1}", "bogus: 1"):
        (config_dir / "pipelines" / "hinted.yaml").write_text(PIPELINE.replace(settings, bad))
        cfg = load_config(config_dir)
        with pytest.raises(GraphError, match="node 'hints'"):
            build_graph(cfg.pipelines["hinted"], cfg)


def test_only_feedback_judges_and_only_finding_alone_is_credit() -> None:
    """``min_share: 0.5``: an expert contributed only when it alone found a useful file;
    ``evidence: feedback``: answers nobody judged (agreement rows) do not count."""

    def row(i: int, expert: str, share: float, source: str) -> Hint:
        return Hint(f"h{i}{expert}{source}", "", None, None, source, keys=("class:docs",), klass="docs",
                    expert=expert, config_version="v", weight=share, receipt_id=f"r{i}")  # fmt: skip

    book = HintBook()
    book.add(row(i, "docs", 0.5, "feedback") for i in range(4))  # always found useful files with another
    book.add(row(i, "semantic", 1.0 if i == 0 else 0.0, "feedback") for i in range(4))  # alone, once
    book.add(row(i, "docs", 1.0, "agreement") for i in range(4, 10))  # unjudged answers: ignored

    def plan(**skip: Any) -> HintPlan:
        bounds = SkipBounds.from_settings({"min_observations": 4, "keep_at_least": 1, **skip})
        return book.plan(["class:docs"], "v", {}, key_weights={}, max_files=0, min_score=1.0, weight=0.0,
                         precision_class="lexical", bounds=bounds)  # fmt: skip

    strict = plan(min_share=0.5)
    assert strict.stats == {"docs": (4, 0), "semantic": (4, 1)}
    experts, why = {"docs": 1.0, "semantic": 1.0, "bm25": 0.5}, dict[str, str]()
    strict.apply_skips(experts, why)
    assert sorted(experts) == ["bm25", "semantic"] and list(why) == ["docs"]
    # any part in a useful file is credit: nobody is idle; agreement rows counted: docs judged on 10
    assert plan(min_share=0.0).stats == {"docs": (4, 4), "semantic": (4, 1)}
    assert plan(min_share=0.5, evidence="all").stats["docs"] == (10, 6)
    assert plan(min_share=0.5).stats == strict.stats and HintBook().plan(
        ["class:docs"], "v", {}, key_weights={}, max_files=0, min_score=1.0, weight=0.0,
        precision_class="lexical", bounds=None,
    ).stats == {}  # fmt: skip


def test_without_feedback_the_shipped_hints_node_changes_nothing(config_dir: Path, indexed: Path) -> None:
    """The shipped class pipelines have a hints node with no lane and skips judged by feedback only:
    until feedback arrives, answers are those of the same pipelines without it."""
    import yaml

    plain = config_dir.parent / "plain"
    shutil.copytree(config_dir, plain)
    for file in (plain / "pipelines").glob("*.yaml"):
        raw = yaml.safe_load(file.read_text())
        if any(n["kind"] == "hints" for n in raw["nodes"]):
            raw["nodes"] = [n for n in raw["nodes"] if n["kind"] != "hints"]
            for n in raw["nodes"]:
                n["after"] = ["classify" if a == "hints" else a for a in n.get("after", [])]
            file.write_text(yaml.safe_dump(raw, sort_keys=False))
    shipped, bare = Router(config_dir, Workspace.open([indexed])), Router(plain, Workspace.open([indexed]))
    questions = ["where is RetryPolicy should_retry", "how are uploaded files stored", "FILE_UPLOAD_PERMISSIONS"] * 2
    answered = 0
    for q in questions:  # asked twice: the second round runs with whatever the first taught
        with_node = anyio.run(shipped.run, "router", {"question": q, "no_cache": True})
        without = anyio.run(bare.run, "router", {"question": q, "no_cache": True})
        shipped.flush()
        bare.flush()
        r = with_node.response["receipt"]
        assert "hints" in r and "skipped" not in r["hints"] and "lane" not in r["hints"]
        assert r["experts_selected"]["selected"] == without.response["receipt"]["experts_selected"]["selected"]
        assert [i["id"] for i in with_node.response["items"]] == [i["id"] for i in without.response["items"]]
        answered += len(with_node.response["items"])
    assert answered >= len(questions)
    assert shipped.store.list_hints() == []  # nothing judged: nothing recorded
    anyio.run(shipped.aclose)
    anyio.run(bare.aclose)
