"""The scheduler's directives (engine/nodes/base.py): nodes return what should happen next and the
scheduler does it — sub-pipelines run here, skipped branches are skipped, finalizers always run.

Scheduler unit tests: the only place test-only node kinds and fake experts are allowed (STYLE §14).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest
import yaml

from engine.nodes.base import NODE_KINDS, Directive, Node, RunState, Skip, node_kind
from engine.runtime import Router, RunResult
from engine.workspace import Workspace

RAN: list[str] = []


class _Probe(Node):
    """Records that it ran; ``settings.skip`` / ``settings.skip_descendants`` make it return a Skip."""

    kind: ClassVar[str] = "test-probe"
    settings_keys: ClassVar[frozenset[str]] = frozenset({"skip", "skip_descendants"})

    async def run(self, state: RunState) -> Directive | None:
        RAN.append(self.id)
        if self.settings.get("skip_descendants"):
            return Skip(descendants=True)
        if self.settings.get("skip"):
            return Skip(nodes=frozenset(self.settings["skip"]))
        return None


@pytest.fixture
def probe_kind() -> Iterator[None]:
    node_kind(_Probe)
    RAN.clear()
    try:
        yield
    finally:
        NODE_KINDS.pop(_Probe.kind, None)


def _config(tmp_path: Path, pipelines: dict[str, list[dict[str, Any]]]) -> Path:
    cfg = tmp_path / "cfg"
    (cfg / "pipelines").mkdir(parents=True)
    experts = {"version": 1, "experts": {"f": {"adapter": "fake", "precision_class": "lexical", "timeout_ms": 1000}}}
    classes = ("conceptual", "identifier", "typed-symbol", "cross-repo-impact", "docs", "history")
    priors = {
        "version": 1,
        "classifier": {"abstain_below": 0.0},
        "default_experts": ["f"],
        "gate": {"min_prior": 0.1},
        "fusion": {"k": 60},
        "classes": {c: {"f": 1.0} for c in classes},
    }
    (cfg / "experts.yaml").write_text(yaml.safe_dump(experts))
    (cfg / "priors.yaml").write_text(yaml.safe_dump(priors))
    for name, nodes in pipelines.items():
        pipe = {"version": 1, "name": name, "description": f"test pipeline {name}", "nodes": nodes}
        (cfg / "pipelines" / f"{name}.yaml").write_text(yaml.safe_dump(pipe))
    return cfg


def _run(cfg: Path, tmp_path: Path, pipeline: str) -> RunResult:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    router = Router(cfg, Workspace.open([ws]))

    async def go() -> RunResult:
        try:
            return await router.run(pipeline, {"question": "find the retry policy please", "no_cache": True})
        finally:
            await router.aclose()

    result = anyio.run(go)
    router.flush()
    return result


def probe(node_id: str, after: list[str] | None = None, **settings: Any) -> dict[str, Any]:
    return {"id": node_id, "kind": "test-probe", "after": after or [], "settings": settings}


def test_a_branch_node_skips_the_branch_it_does_not_take(probe_kind: None, tmp_path: Path) -> None:
    # when → (a1 → a2) and (b1) → join → receipt; `when` skips a1, so a2 (all of whose inputs
    # were skipped) is skipped too, while join (b1 ran) and the receipt run
    nodes = [
        probe("when", skip=["a1"]),
        probe("a1", ["when"]),
        probe("a2", ["a1"]),
        probe("b1", ["when"]),
        probe("join", ["a2", "b1"]),
        {"id": "receipt", "kind": "receipt", "after": ["join"]},
    ]
    result = _run(_config(tmp_path, {"branchy": nodes}), tmp_path, "branchy")
    assert result.error is None
    assert sorted(RAN) == ["b1", "join", "when"]
    assert result.response["receipt"]["status"] == "ok"


def test_skip_descendants_leaves_finalizers_running(probe_kind: None, tmp_path: Path) -> None:
    nodes = [
        {"id": "classify", "kind": "classify"},
        {"id": "gate", "kind": "gate", "after": ["classify"]},
        probe("hit", ["gate"], skip_descendants=True),
        {"id": "fanout", "kind": "fanout", "after": ["hit"]},
        {"id": "score", "kind": "score", "after": ["fanout"]},
        probe("late", ["score"]),
        {"id": "receipt", "kind": "receipt", "after": ["late"]},
    ]
    result = _run(_config(tmp_path, {"short": nodes}), tmp_path, "short")
    assert RAN == ["hit"]  # neither the fan-out nor anything after it ran...
    receipt = result.response["receipt"]
    assert receipt["per_expert"] == {} and receipt["experts_selected"]["selected"] == ["f"]
    assert receipt["status"] == "ok"  # ...and skipping is not failing: the receipt still ran


def test_sub_pipelines_are_run_by_the_scheduler(probe_kind: None, tmp_path: Path) -> None:
    router = [
        {"id": "classify", "kind": "classify"},
        {"id": "dispatch", "kind": "dispatch", "after": ["classify"], "settings": {"default": "inner", "routes": {}}},
        probe("after-dispatch", ["dispatch"]),
        {"id": "receipt", "kind": "receipt", "after": ["after-dispatch"]},
    ]
    router[1]["settings"]["routes"] = {"conceptual": "inner"}
    inner = [probe("inner-1"), probe("inner-2", ["inner-1"])]
    result = _run(_config(tmp_path, {"entry": router, "inner": inner}), tmp_path, "entry")
    assert RAN == ["inner-1", "inner-2", "after-dispatch"]  # the whole sub-pipeline ran before dispatch's successor
    assert result.response["receipt"]["pipeline"] == "entry → inner"


def test_pipelines_dispatching_in_a_cycle_fail_with_a_receipt(tmp_path: Path) -> None:
    def dispatcher(target: str) -> list[dict[str, Any]]:
        settings = {"default": target, "routes": {"conceptual": target}}
        return [
            {"id": "classify", "kind": "classify"},
            {"id": "dispatch", "kind": "dispatch", "after": ["classify"], "settings": settings},
            {"id": "receipt", "kind": "receipt", "after": ["dispatch"]},
        ]

    a, b = dispatcher("pipe-b"), dispatcher("pipe-a")
    result = _run(_config(tmp_path, {"pipe-a": a, "pipe-b": b}), tmp_path, "pipe-a")
    assert result.error is not None and result.error.code == "invalid_config"
    assert "pipe-a → pipe-b → pipe-a" in result.error.message
    assert result.response["receipt"]["status"] == "invalid_config" and result.exit_code == 2
