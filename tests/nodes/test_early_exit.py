"""The fan-out's early exit (issue 10 item 2): once high-precision experts agree on a definition, the
``skip`` experts are cancelled (or dropped if they already answered) and reported
``skipped`` / ``early_exit``; which experts fuse never depends on which one was faster.

Scheduler unit tests with scripted experts (STYLE §14): timing must be exact to test cancellation.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from engine.errors import GraphError
from engine.runtime import Router, RunResult
from engine.workspace import Workspace

DEFINITION = {"project": "ws", "path": "src/retry.py", "kind": "symbol", "start_line": 10, "end_line": 30}


def _expert(delay_ms: float, items: list[dict[str, Any]], precision: str = "structural") -> dict[str, Any]:
    return {
        "adapter": "fake",
        "precision_class": precision,
        "timeout_ms": 5000,
        "settings": {"delay_ms": delay_ms, "items": items},
    }


def _run(tmp_path: Path, experts: dict[str, dict[str, Any]], early_exit: dict[str, Any] | None) -> RunResult:
    cfg = tmp_path / "cfg"
    (cfg / "pipelines").mkdir(parents=True)
    classes = ("conceptual", "identifier", "typed-symbol", "cross-repo-impact", "docs", "history")
    priors = {
        "version": 1,
        "classifier": {"abstain_below": 0.0},
        "default_experts": list(experts),
        "gate": {"min_prior": 0.1},
        "fusion": {"k": 60},
        "classes": {c: dict.fromkeys(experts, 1.0) for c in classes},
    }
    fanout: dict[str, Any] = {"id": "fanout", "kind": "fanout", "after": ["gate"]}
    if early_exit is not None:
        fanout["settings"] = {"early_exit": early_exit}
    nodes = [
        {"id": "classify", "kind": "classify"},
        {"id": "gate", "kind": "gate", "after": ["classify"]},
        fanout,
        {"id": "score", "kind": "score", "after": ["fanout"]},
        {"id": "fuse", "kind": "fuse", "after": ["score"]},
        {"id": "receipt", "kind": "receipt", "after": ["fuse"]},
    ]
    (cfg / "experts.yaml").write_text(yaml.safe_dump({"version": 1, "experts": experts}))
    (cfg / "priors.yaml").write_text(yaml.safe_dump(priors))
    pipe = {"version": 1, "name": "p", "description": "early exit under test", "nodes": nodes}
    (cfg / "pipelines" / "p.yaml").write_text(yaml.safe_dump(pipe))
    ws = tmp_path / "ws"  # one project, "ws", holding the files the scripted experts name
    (ws / "src").mkdir(parents=True, exist_ok=True)
    for name in ("src/retry.py", "src/other.py", "other.py"):
        (ws / name).write_text("class RetryPolicy:\n    pass\n")
    router = Router(cfg, Workspace.open([ws]))

    async def go() -> RunResult:
        try:
            return await router.run("p", {"question": "where is RetryPolicy defined", "no_cache": True})
        finally:
            await router.aclose()

    return anyio.run(go)


def test_agreeing_definitions_end_the_fan_out(tmp_path: Path) -> None:
    definition = {**DEFINITION, "meta": {"role": "definition"}}
    experts = {
        "sym": _expert(10, [definition]),
        "grep": _expert(40, [{**DEFINITION, "start_line": 12, "end_line": 12, "meta": {"definition": True}}]),
        "slow": _expert(3000, [{"project": "ws", "path": "other.py", "kind": "chunk"}], precision="semantic"),
    }
    started = time.perf_counter()
    result = _run(tmp_path, experts, {"experts": ["sym", "grep"], "min_agree": 2})
    assert time.perf_counter() - started < 2.0  # did not wait 3 s for the slow expert
    receipt = result.response["receipt"]
    slow = receipt["per_expert"]["slow"]
    assert slow["status"] == "skipped" and slow["error_class"] == "early_exit" and slow["result_count"] == 0
    assert slow["error"] == "grep and sym agree on the definition at ws/src/retry.py:10"
    assert receipt["per_expert"]["sym"]["status"] == receipt["per_expert"]["grep"]["status"] == "ok"
    [t] = receipt["trace"]
    assert t["node"] == "fanout" and t["skipped"] == ["slow"]
    assert [it["path"] for it in result.response["items"]] == ["src/retry.py"]


def test_the_outcome_does_not_depend_on_which_expert_was_faster(tmp_path: Path) -> None:
    """A skip expert that answered before the agreement is dropped just like a slow one; an expert in
    neither list is awaited even when it is slower than the agreement."""
    experts = {
        "sym": _expert(10, [{**DEFINITION, "meta": {"role": "definition"}}]),
        "grep": _expert(200, [{**DEFINITION, "meta": {"definition": True}}]),
        "quick": _expert(1, [{"project": "ws", "path": "other.py", "kind": "chunk"}], precision="semantic"),
        "kept": _expert(400, [{"project": "ws", "path": "src/other.py", "kind": "chunk"}], precision="lexical"),
    }
    result = _run(tmp_path, experts, {"experts": ["sym", "grep"], "min_agree": 2, "skip": ["quick"]})
    per = result.response["receipt"]["per_expert"]
    assert per["quick"]["status"] == "skipped" and per["quick"]["result_count"] == 0
    assert per["kept"]["status"] == "ok" and per["kept"]["result_count"] == 1
    assert sorted(it["path"] for it in result.response["items"]) == ["src/other.py", "src/retry.py"]


def test_no_agreement_waits_for_everyone(tmp_path: Path) -> None:
    experts = {
        "sym": _expert(10, [{**DEFINITION, "meta": {"role": "definition"}}]),
        "grep": _expert(20, [{**DEFINITION, "path": "src/other.py", "meta": {"definition": True}}]),
        "slow": _expert(300, [{"project": "ws", "path": "other.py", "kind": "chunk"}], precision="semantic"),
    }
    result = _run(tmp_path, experts, {"experts": ["sym", "grep"], "min_agree": 2})
    receipt = result.response["receipt"]
    assert {n: e["status"] for n, e in receipt["per_expert"].items()} == {"grep": "ok", "slow": "ok", "sym": "ok"}
    assert "trace" not in receipt and len(result.response["items"]) == 3


def test_a_bad_early_exit_setting_fails_at_load(tmp_path: Path) -> None:
    experts = {"sym": _expert(1, []), "grep": _expert(1, [])}
    with pytest.raises(GraphError, match=r"min_agree must be 1\.\.2"):
        _run(tmp_path, experts, {"experts": ["sym", "grep"], "min_agree": 3})


def test_a_skip_expert_finishing_with_the_agreement_is_dropped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The skip expert answers in the same loop cycle as the last listed expert: its task is already
    resuming when the fan-out ends early (anyio does not cancel a task whose awaited future is
    done) and, its files' secret verdicts being cached (no checkpoint in the screen), it ran on to
    put its items back on the outcome the early exit had emptied — a flake in CI: semantic and
    typed fused into a typed-symbol answer that symbols and ripgrep agreed on."""
    from engine.nodes import fanout
    from engine.screen import Screened

    async def screened_at_once(state: Any, expert: Any, items: Any, query: Any) -> Screened:
        out = Screened()
        out.items.extend(items)
        return out  # as a screen whose every verdict is cached: no checkpoint

    monkeypatch.setattr(fanout, "_screen", screened_at_once)
    experts = {
        "sym": _expert(1, [{**DEFINITION, "meta": {"role": "definition"}}]),
        "grep": _expert(30, [{**DEFINITION, "meta": {"definition": True}}]),
        "same": _expert(30, [{"project": "ws", "path": "other.py", "kind": "chunk"}], precision="semantic"),
    }
    result = _run(tmp_path, experts, {"experts": ["sym", "grep"], "min_agree": 2})
    per = result.response["receipt"]["per_expert"]
    assert per["same"]["status"] == "skipped" and per["same"]["result_count"] == 0, per["same"]
    assert [it["path"] for it in result.response["items"]] == ["src/retry.py"]
