"""The feedback bandit (engine/bandit.py): off by default; on, the gate's priors are multiplied by
bounded Thompson-sampled factors, the receipt records the draw, and the same config version and
bandit state reproduce a run exactly. Real repos, the real DuckDB store, ripgrep and BM25."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

from engine.bandit import Bandit, factor
from engine.runtime import Router
from engine.spec import BanditSpec
from engine.store import BanditArm, Feedback
from engine.workspace import Workspace

PIPELINE = """\
version: 1
name: banded
class: identifier
description: identifier questions, priors adjusted by the bandit
nodes:
  - {id: classify, kind: classify}
  - {id: gate, kind: gate, after: [classify], settings: {experts: [ripgrep, bm25]}}
  - {id: fanout, kind: fanout, after: [gate]}
  - {id: score, kind: score, after: [fanout]}
  - {id: fuse, kind: fuse, after: [score]}
  - {id: receipt, kind: receipt, after: [fuse]}
"""
QUESTION = "where is RetryPolicy should_retry"


@pytest.fixture
def banded(config_dir: Path, indexed: Path) -> tuple[Path, Path]:
    (config_dir / "pipelines" / "banded.yaml").write_text(PIPELINE)
    return config_dir, indexed


def bandit_on(config_dir: Path) -> None:
    priors = config_dir / "priors.yaml"
    priors.write_text(priors.read_text() + "bandit: {enabled: true, scope: workspace, prior: 2}\n")


def ask(config_dir: Path, ws: Path, question: str = QUESTION) -> tuple[Router, dict[str, Any]]:
    """A new Router (another process) answers ``question`` once it has read the stored arms (after
    its first answer: the hot path reads no store)."""
    router = Router(config_dir, Workspace.open([ws]))
    first = anyio.run(router.run, "banded", {"question": "upload_file", "no_cache": True})
    router.flush()
    assert "bandit" not in first.response["receipt"] or router.bandit().loaded  # read after that answer
    result = anyio.run(router.run, "banded", {"question": question, "no_cache": True})
    router.flush()
    return router, result.response


def answer(response: dict[str, Any]) -> list[tuple[str, int, float]]:
    return [(it["id"], it["rank"], it["score"]) for it in response["items"]]


def test_off_by_default(banded: tuple[Path, Path]) -> None:
    config_dir, ws = banded
    router, response = ask(config_dir, ws)
    assert "bandit" not in response["receipt"]
    assert response["receipt"]["fusion"]["weights"] == {"ripgrep": 1.0, "bm25": 0.6}
    anyio.run(router.aclose)


def test_same_config_version_and_bandit_state_reproduce_a_run(banded: tuple[Path, Path]) -> None:
    config_dir, ws = banded
    bandit_on(config_dir)
    seed, _ = ask(config_dir, ws, "FileSystemStorage")  # the store's first receipt makes its signing key
    seed.store.put_bandit(BanditArm("workspace|identifier|bm25", "identifier", "bm25", 12, 11.0))
    seed.store.put_bandit(BanditArm("workspace|identifier|ripgrep", "identifier", "ripgrep", 12, 2.0))
    seed.store.sync()
    anyio.run(seed.aclose)

    first_router, first = ask(config_dir, ws)
    anyio.run(first_router.aclose)
    again_router, again = ask(config_dir, ws)  # another Router (process), same config and state
    r1, r2 = first["receipt"], again["receipt"]
    assert r1["config_version"] == r2["config_version"]
    assert r1["bandit"] == r2["bandit"] and r1["bandit"]["scope"] == "workspace"
    assert r1["fusion"]["weights"] == r2["fusion"]["weights"]
    for expert, w in r1["fusion"]["weights"].items():  # the weights fused are exactly the bandit's
        assert w == r1["bandit"]["weights"][expert]
    assert answer(first) == answer(again) and answer(first)
    assert r1["returned"] == r2["returned"]
    # the weights used are the priors times bounded factors, and the draw can be recomputed from
    # the bandit state and the request alone
    factors = r1["bandit"]["factors"]
    assert all(0.5 <= f <= 2.0 for f in factors.values())
    assert r1["bandit"]["weights"]["bm25"] == round(0.6 * factors["bm25"], 4)
    spec = BanditSpec(enabled=True, prior=2)
    redrawn = again_router.bandit().draw(
        spec, "workspace", "identifier", {"ripgrep": 1.0, "bm25": 0.6, "semantic": 0.3}, r1["request_hash"]
    )
    assert redrawn.to_receipt() == r1["bandit"]

    # feedback moves the state: a new state version, arms updated in the store
    useful = next(it["id"] for it in again["items"] if it["path"] == "alpha/retry.py")
    again_router.record_feedback(Feedback(uuid.uuid4().hex, r2["receipt_id"], (useful,)))
    again_router.flush()
    arm = again_router.store.get_bandit("workspace|identifier|bm25")
    assert arm is not None and arm.pulls == 13
    anyio.run(again_router.aclose)
    third_router, third = ask(config_dir, ws)
    assert third["receipt"]["bandit"]["state_version"] != r1["bandit"]["state_version"]
    anyio.run(third_router.aclose)


def test_factors_are_bounded_and_fresh_arms_stay_near_one() -> None:
    spec = BanditSpec(enabled=True, min_factor=0.5, max_factor=2.0, prior=50)
    assert (factor(0.0, spec), factor(0.5, spec), factor(1.0, spec)) == (0.5, 1.0, 2.0)
    fresh = Bandit().draw(spec, "workspace", "docs", {"docs": 1.0, "bm25": 0.5}, "q")
    assert all(0.8 < f < 1.25 for f in fresh.factors.values())
    winner = Bandit([BanditArm("workspace|docs|bm25", "docs", "bm25", 500, 500.0)])
    assert winner.draw(spec, "workspace", "docs", {"bm25": 0.5}, "q").factors["bm25"] > 1.5
    # session scope without a session id: no draw
    from engine.bandit import scope_of

    assert scope_of(BanditSpec(scope="session"), None) is None
    assert scope_of(BanditSpec(scope="session"), "s1") == "session:s1"
