"""Scheduler and graph validation. The only tests allowed a fake expert (STYLE §14)."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest
import yaml

from engine.errors import GraphError, SchemaError, SpecError
from engine.experts.fake import FakeExpert
from engine.graph import build_graph
from engine.runtime import Router
from engine.spec import load_config
from engine.types import Evidence
from engine.workspace import Workspace

NODES = [
    {"id": "classify", "kind": "classify"},
    {"id": "gate", "kind": "gate", "after": ["classify"]},
    {"id": "fan-a", "kind": "fanout", "after": ["gate"], "settings": {"experts": ["slow"]}},
    {"id": "fan-b", "kind": "fanout", "after": ["gate"], "settings": {"experts": ["fast"]}},
    {"id": "score", "kind": "score", "after": ["fan-a", "fan-b"]},
    {"id": "fuse", "kind": "fuse", "after": ["score"]},
    {"id": "receipt", "kind": "receipt", "after": ["fuse"]},
]


def _config(
    tmp_path: Path, nodes: list[dict] | None = None, slow_ms: int = 300, slow_timeout: int = 5000, fast_ms: int = 0
) -> Path:
    cfg = tmp_path / "cfg"
    (cfg / "pipelines").mkdir(parents=True)
    experts = {
        "version": 1,
        "experts": {
            "slow": {
                "adapter": "fake",
                "precision_class": "lexical",
                "timeout_ms": slow_timeout,
                "settings": {"delay_ms": slow_ms},
            },
            "fast": {
                "adapter": "fake",
                "precision_class": "semantic",
                "timeout_ms": 5000,
                "settings": {"delay_ms": fast_ms},
            },
        },
    }
    priors = {
        "version": 1,
        "classifier": {"abstain_below": 0.0},
        "default_experts": ["slow", "fast"],
        "gate": {"min_prior": 0.1},
        "fusion": {"k": 60},
        "classes": {
            c: {"slow": 1.0, "fast": 0.5}
            for c in ("conceptual", "identifier", "typed-symbol", "cross-repo-impact", "docs", "history")
        },
    }
    (cfg / "experts.yaml").write_text(yaml.safe_dump(experts))
    (cfg / "priors.yaml").write_text(yaml.safe_dump(priors))
    pipe = {
        "version": 1,
        "name": "diamond",
        "class": "conceptual",
        "description": "test diamond pipeline",
        "nodes": nodes or NODES,
    }
    (cfg / "pipelines" / "diamond.yaml").write_text(yaml.safe_dump(pipe))
    return cfg


def _ev(path: str, line: int, score: float = 1.0) -> Evidence:
    return Evidence(
        project="ws", path=path, kind="chunk", start_line=line, end_line=line + 2, content=path, score=score
    )


def _run(cfg: Path, tmp_path: Path, handlers: dict, question: str = "find the retry policy please") -> dict:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    router = Router(cfg, Workspace.open([ws]))
    router.config()
    started = {}

    async def go() -> dict:
        for name, handler in handlers.items():
            spec = router.config().experts[name]

            async def wrapped(q, _h=handler, _n=name):  # noqa: ANN001, ANN202
                started[_n] = time.perf_counter()
                return _h(q)

            router.pool.inject(name, FakeExpert.with_handler(spec, router.pool.env, wrapped))
        res = await router.run("diamond", {"question": question, "no_cache": True})
        await router.aclose()
        return res.response

    resp = anyio.run(go)
    router.flush()
    resp["_started"] = started
    return resp


def test_fanouts_run_concurrently_and_fuse_both(tmp_path: Path) -> None:
    cfg = _config(tmp_path, slow_ms=400, fast_ms=400)
    resp = _run(
        cfg,
        tmp_path,
        {"slow": lambda q: [_ev("a.py", 1), _ev("b.py", 10)], "fast": lambda q: [_ev("a.py", 2), _ev("c.py", 5)]},
    )
    # two 400 ms experts in two parallel fan-out nodes: together well under the 800 ms a serial run needs
    assert resp["receipt"]["budget"]["spent"]["latency_ms"] < 700
    assert abs(resp["_started"]["slow"] - resp["_started"]["fast"]) < 0.2
    top = resp["items"][0]
    assert top["path"] == "a.py" and {s["expert"] for s in top["sources"]} == {"slow", "fast"}
    assert top["tier"] == "hybrid-confirmed"
    # hand-computed weighted RRF: 1.0/(60+1) + 0.5/(60+1)
    assert top["subscores"]["rrf"] == pytest.approx(1.0 / 61 + 0.5 / 61, abs=1e-6)
    assert [i["path"] for i in resp["items"]] == ["a.py", "b.py", "c.py"]
    assert resp["receipt"]["pipeline"] == "diamond"


def test_slow_expert_times_out_without_blocking_fast(tmp_path: Path) -> None:
    cfg = _config(tmp_path, slow_ms=5000, slow_timeout=200)
    t0 = time.perf_counter()
    resp = _run(cfg, tmp_path, {"fast": lambda q: [_ev("c.py", 5)]})
    assert time.perf_counter() - t0 < 2.0
    per = resp["receipt"]["per_expert"]
    assert per["slow"]["status"] == "timeout" and per["fast"]["status"] == "ok"
    assert [i["path"] for i in resp["items"]] == ["c.py"]
    assert resp["items"][0]["tier"] == "semantic-only" and "verify" in resp["items"][0]["nuance"]


def test_crash_in_handler_is_internal(tmp_path: Path) -> None:
    cfg = _config(tmp_path, slow_ms=0)

    def boom(q):  # noqa: ANN001, ANN202
        raise ValueError("bad shape")

    resp = _run(cfg, tmp_path, {"slow": boom, "fast": lambda q: [_ev("c.py", 5)]})
    assert resp["receipt"]["per_expert"]["slow"]["status"] == "malformed"
    assert resp["items"]


def test_deterministic_output(tmp_path: Path) -> None:
    cfg = _config(tmp_path, slow_ms=0)
    h = {"slow": lambda q: [_ev("b.py", 1), _ev("a.py", 1)], "fast": lambda q: [_ev("a.py", 1), _ev("b.py", 1)]}
    a = _run(cfg, tmp_path, h)["items"]
    b = _run(cfg, tmp_path, h)["items"]
    assert [(i["id"], i["score"]) for i in a] == [(i["id"], i["score"]) for i in b]


@pytest.mark.parametrize(
    "nodes,match",
    [
        ([{"id": "a", "kind": "classify", "after": ["b"]}, {"id": "b", "kind": "gate", "after": ["a"]}], "cycle"),
        ([{"id": "a", "kind": "teleport"}], "unknown kind 'teleport'"),
        ([{"id": "a", "kind": "classify", "after": ["ghost"]}], "unknown node 'ghost'"),
        ([{"id": "a", "kind": "classify"}, {"id": "f", "kind": "fuse", "after": ["a"]}], "needs a score node upstream"),
        (  # found by an exploratory run: a second fan-out off the path emptied the answer
            [
                {"id": "a", "kind": "classify"},
                {"id": "g", "kind": "gate", "after": ["a"]},
                {"id": "f", "kind": "fanout", "after": ["g"]},
                {"id": "f2", "kind": "fanout", "after": ["g"]},
                {"id": "s", "kind": "score", "after": ["f"]},
                {"id": "u", "kind": "fuse", "after": ["s"]},
                {"id": "r", "kind": "receipt", "after": ["u"]},
            ],
            "node 'f2' has no path to the pipeline's end 'r'",
        ),
        (
            [
                {"id": "a", "kind": "classify"},
                {"id": "r1", "kind": "receipt", "after": ["a"]},
                {"id": "r2", "kind": "receipt", "after": ["a"]},
            ],
            "at most one receipt node",
        ),
        ([{"id": "a", "kind": "classify"}, {"id": "b", "kind": "classify"}], "'a', 'b' all end it"),
        (  # a typo ran every expert, silently
            [
                {"id": "a", "kind": "classify"},
                {"id": "g", "kind": "gate", "after": ["a"], "settings": {"expert": ["x"]}},
            ],
            "unknown settings \\['expert'\\]; known: \\['experts'\\]",
        ),
        (
            [
                {"id": "a", "kind": "classify"},
                {"id": "g", "kind": "gate", "after": ["a"], "settings": {"experts": ["nope"]}},
            ],
            "unknown expert 'nope'",
        ),
    ],
)
def test_invalid_graphs_fail_before_anything_runs(tmp_path: Path, nodes: list[dict], match: str) -> None:
    cfg = load_config(_config(tmp_path, nodes=nodes))
    with pytest.raises(GraphError if "expert" not in match else SpecError, match=match):
        build_graph(cfg.pipelines["diamond"], cfg)


def test_schema_errors_name_file_line_and_path(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    text = (cfg / "priors.yaml").read_text().replace("k: 60", "k: -3")
    (cfg / "priors.yaml").write_text(text)
    with pytest.raises(SchemaError) as err:
        load_config(cfg)
    assert err.value.path == "fusion/k" and err.value.line and err.value.file.endswith("priors.yaml")


def test_priors_naming_an_unknown_expert_is_rejected(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    data = yaml.safe_load((cfg / "priors.yaml").read_text())
    data["classes"]["docs"]["ghost"] = 0.5
    (cfg / "priors.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(SchemaError, match="unknown expert 'ghost'"):
        load_config(cfg)


def test_config_version_is_stable_and_sensitive(tmp_path: Path) -> None:
    cfg_dir = _config(tmp_path)
    v1 = load_config(cfg_dir)
    v2 = load_config(cfg_dir)
    assert v1.config_version(v1.pipelines["diamond"]) == v2.config_version(v2.pipelines["diamond"])
    data = yaml.safe_load((cfg_dir / "priors.yaml").read_text())
    data["classes"]["docs"]["fast"] = 0.55
    (cfg_dir / "priors.yaml").write_text(yaml.safe_dump(data))
    v3 = load_config(cfg_dir)
    assert v3.config_version(v3.pipelines["diamond"]) != v1.config_version(v1.pipelines["diamond"])
