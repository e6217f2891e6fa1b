"""The node kinds of issue 11 — decompose, expand, when, aggregate, rerank — on real repos and real
indexes (and, for their pure parts, on hand-made inputs with hand-computed answers)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from engine.config import load_config
from engine.errors import GraphError
from engine.graph import build_graph
from engine.items import AnswerItem, ScoredItem, Source
from engine.nodes.aggregate import roll_up
from engine.nodes.decompose import parts_of
from engine.nodes.expand import seed_names
from engine.rerank import QuestionSignals, _mention_form, _path_forms, features, is_packaging, path_mention, path_words
from engine.types import Evidence, Features

from ..conftest import ROOT
from ..helpers import ask

TRACEBACK = """Saving an upload fails with a permission error.
Traceback (most recent call last):
  File "/srv/app/venv/lib/python3.11/site-packages/alpha/storage.py", line 9, in save
    os.chmod(path, FILE_UPLOAD_PERMISSIONS)
PermissionError: "Operation not permitted"
It started after alpha.storage.FileSystemStorage moved to `RetryPolicy.should_retry` and ValueError
handling changed, see alpha/config.py.
```python
storage = FileSystemStorage()
storage.save_all(items)
```
"""


def test_parts_of_a_long_question() -> None:
    from engine.classifier import extract_features

    f = extract_features(TRACEBACK, load_config(ROOT).classifier)
    parts = parts_of(TRACEBACK, f)
    assert parts["title"] == ["Saving an upload fails with a permission error."]
    # the frame's file, the path named in prose and the dotted module path
    assert parts["paths"][0] == "/srv/app/venv/lib/python3.11/site-packages/alpha/storage.py"
    assert "alpha/config.py" in parts["paths"] and "alpha.storage.FileSystemStorage" in parts["paths"]
    # the frame's function, inline code and code-block names; builtins (ValueError) left out
    assert parts["identifiers"][0] == "save"
    assert {"RetryPolicy.should_retry", "storage.save_all"} <= set(parts["identifiers"])
    assert "ValueError" not in parts["identifiers"] and "PermissionError" not in parts["identifiers"]
    assert parts["literals"] == ["Operation not permitted"]


def test_a_short_question_has_no_title_part() -> None:
    assert "title" not in parts_of("where is the retry policy", Features())


def test_aggregate_rolls_chunks_up_to_files() -> None:
    def s(path: str, rank: int, native: float) -> ScoredItem:
        return ScoredItem(Evidence("p", path, "chunk", rank, rank + 1), rank, {"native": native})

    # a.py: one chunk at 1.0; b.py: three chunks 0.9, 0.8, 0.6 → 0.9 + 0.5·0.8 + 0.25·0.6 = 1.45
    out = roll_up([s("a.py", 1, 1.0), s("b.py", 2, 0.9), s("b.py", 3, 0.8), s("c.py", 4, 0.7), s("b.py", 5, 0.6)], 0.5)
    assert [(i.evidence.path, i.rank, i.subscores["file_score"]) for i in out] == [
        ("b.py", 1, 1.45),
        ("a.py", 2, 1.0),
        ("c.py", 3, 0.7),
    ]
    assert out[0].evidence.start_line == 2 and out[0].subscores["file_chunks"] == 3  # b.py's best chunk


def _path_mention_pairwise(path: str, mentions: tuple[str, ...]) -> float:
    """path_mention as first written: every mention against every form of the path (the oracle)."""
    best = 0.0
    mine_forms, name = _path_forms(path)
    for m in mentions:
        slashed, m_stem = _mention_form(m)
        if slashed:
            for mine in mine_forms:
                if mine in (m, m_stem) or mine.endswith("/" + m_stem) or m.endswith("/" + path):
                    return 1.0
        elif name == m:
            best = 0.5
    return best


_PART = st.sampled_from(["a", "b", "pkg", "mod", "__init__", "x.py", "mod.py", "b.txt", ".py", "a.b"])
_PATH = st.lists(_PART, min_size=1, max_size=4).map("/".join)


@given(_PATH, st.lists(_PATH, max_size=5).map(tuple))
def test_path_mention_index_matches_the_pairwise_rule(path: str, mentions: tuple[str, ...]) -> None:
    assert path_mention(path, mentions) == _path_mention_pairwise(path, mentions)


def test_rerank_features_of_an_item() -> None:
    q = QuestionSignals.of(
        TRACEBACK, Features(identifiers=("FileSystemStorage",), paths=("alpha/config.py",)), ["alpha"]
    )
    assert path_mention("alpha/storage.py", q.mentions) == 1.0  # the frame's file
    assert path_mention("alpha/config.py", q.mentions) == 1.0
    assert path_mention("other/config.py", ("config.py",)) == 0.5  # a bare name counts half
    assert path_mention("beta/storage.py", q.mentions) == 0.0
    assert path_words("alpha/storage.py", frozenset({"storage"})) == 0.5  # {storage, alpha}
    assert is_packaging("PKG-INFO") and is_packaging("CHANGELOG.md") and is_packaging("x.egg-info/SOURCES.txt")
    assert not is_packaging("src/changes.py")
    item = AnswerItem(
        id="x",
        rank=2,
        path="alpha/storage.py",
        project="alpha",
        start_line=4,
        end_line=12,
        kind="symbol",
        content="class FileSystemStorage:",
        score=0.5,
        subscores={},
        flags=(),
        symbol="alpha.storage.FileSystemStorage",
        meta={"role": "definition"},
        sources=(Source("symbols", 1, 1.0, 4, 12), Source("bm25", 4, 3.0, 1, 20)),
        tier="hybrid-confirmed",
    )
    f = features(item, 2, 1.0, q)
    assert f["rrf"] == 0.5 and f["pos"] == 0.5 and f["agree"] == 0.5
    assert f["ident"] == 1.0 and f["ident_def"] == 1.0 and f["definition"] == 1.0 and f["path_mention"] == 1.0
    assert f["src.symbols"] == 1.0 and f["src.bm25"] == 0.25 and f["project_named"] == 1.0
    assert "test" not in f and "semantic_only" not in f  # zero features are left out


def test_expand_seeds_from_question_and_items() -> None:
    item = AnswerItem("i", 1, "a.py", "p", 1, 3, "chunk", "def helper():\n    pass\nclass Thing:\n", 1.0, {}, ())
    sym = AnswerItem("j", 2, "b.py", "p", 1, 3, "symbol", "", 1.0, {}, (), symbol="pkg.mod.Widget.render")
    names = seed_names(("Widget", "x"), [item, sym], ["question", "items"], 6)
    assert names == ["Widget", "helper", "Thing", "render"]  # short names and duplicates dropped
    assert seed_names(("Widget",), [item], ["items"], 1) == ["helper"]


# ---------------------------------------------------------------------------------------- on real repos


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """alpha and beta as git repos, with their bm25 and symbols indexes built for real."""
    from engine.indexing import index_workspace
    from engine.workspace import Workspace

    from ..conftest import ALPHA, BETA, make_repo

    ws = tmp_path_factory.mktemp("kinds") / "ws"
    make_repo(ws / "alpha", ALPHA)
    make_repo(ws / "beta", BETA)
    index_workspace(Workspace.open([ws]), load_config(ROOT), only=["bm25", "symbols"], progress=False)
    return ws


def _config(
    tmp_path: Path,
    pipelines: dict[str, list[dict[str, Any]]],
    rerank: dict[str, Any] | None = None,
    klass: str = "conceptual",
) -> Path:
    cfg = tmp_path / "cfg"
    shutil.copytree(ROOT / "pipelines", cfg / "pipelines")
    for name in ("experts.yaml", "priors.yaml", "classifier.yaml"):
        shutil.copy(ROOT / name, cfg / name)
    if rerank is not None:
        priors = yaml.safe_load((cfg / "priors.yaml").read_text())
        priors["rerank"] = {**priors.get("rerank", {}), **rerank}
        (cfg / "priors.yaml").write_text(yaml.safe_dump(priors, sort_keys=False))
    for name, nodes in pipelines.items():
        pipe = {
            "version": 1,
            "name": name,
            "description": f"a test pipeline named {name}",
            "class": klass,
            "nodes": nodes,
        }
        (cfg / "pipelines" / f"{name}.yaml").write_text(yaml.safe_dump(pipe, sort_keys=False))
    return cfg


HEAD = [
    {"id": "classify", "kind": "classify"},
    {"id": "gate", "kind": "gate", "after": ["classify"], "settings": {"experts": ["bm25"]}},
]


def test_decompose_lanes_run_and_show_in_the_receipt(indexed: Path, tmp_path: Path) -> None:
    nodes = [
        *HEAD,
        {
            "id": "decompose",
            "kind": "decompose",
            "after": ["gate"],
            "settings": {
                "parts": {"identifiers": {"symbols": 0.8}, "literals": {"ripgrep": 0.5}, "paths": {"bm25": 0.2}}
            },
        },
        {"id": "fanout", "kind": "fanout", "after": ["decompose"]},
        {"id": "score", "kind": "score", "after": ["fanout"]},
        {"id": "fuse", "kind": "fuse", "after": ["score"]},
        {"id": "receipt", "kind": "receipt", "after": ["fuse"]},
    ]
    cfg = _config(tmp_path, {"decomposed": nodes})
    question = 'uploads break: "retry budget exhausted for request" is raised by RetryPolicy.should_retry after a save'
    r = ask(cfg, indexed, question, pipeline="decomposed")
    assert r.error is None, r.response.get("error")
    receipt = r.response["receipt"]
    assert set(receipt["per_expert"]) == {"bm25", "symbols:identifiers", "ripgrep:literals"}
    assert receipt["lanes"]["symbols:identifiers"] == {
        "expert": "symbols",
        "part": "identifiers",
        "node": "decompose",
        "weight": 0.8,
    }
    assert receipt["sub_queries"]["ripgrep:literals"]["patterns"] == ["retry budget exhausted for request"]
    assert receipt["sub_queries"]["symbols:identifiers"]["names"] == ["RetryPolicy.should_retry"]
    [planned] = [t for t in receipt["trace"] if t["node"] == "decompose"]
    assert planned["sub_queries"]["identifiers"] == ["RetryPolicy.should_retry"]
    top = r.response["items"][0]
    assert top["path"] == "alpha/retry.py" and {"symbols:identifiers", "ripgrep:literals"} <= {
        s["expert"] for s in top["sources"]
    }
    contribution = receipt["fusion"]["contribution"]
    assert contribution["symbols:identifiers"]["items"] >= 1 and receipt["fusion"]["weights"]["ripgrep:literals"] == 0.5


def test_expand_reaches_the_callers_in_another_project(indexed: Path, tmp_path: Path) -> None:
    first = [
        {"id": "classify", "kind": "classify"},
        {"id": "gate", "kind": "gate", "after": ["classify"], "settings": {"experts": ["ripgrep"]}},
        {"id": "fanout", "kind": "fanout", "after": ["gate"]},
        {"id": "score", "kind": "score", "after": ["fanout"]},
        {"id": "fuse", "kind": "fuse", "after": ["score"]},
    ]
    second = [
        {
            "id": "expand",
            "kind": "expand",
            "after": ["fuse"],
            "settings": {"mode": "references", "experts": {"symbols": 0.9}, "from": ["items"], "top": 1},
        },
        {"id": "fanout2", "kind": "fanout", "after": ["expand"]},
        {"id": "score2", "kind": "score", "after": ["fanout2"]},
        {"id": "fuse2", "kind": "fuse", "after": ["score2"]},
        {"id": "receipt", "kind": "receipt", "after": ["fuse2"]},
    ]
    cfg = _config(
        tmp_path,
        {"expanded": first + second, "once": [*first, {"id": "receipt", "kind": "receipt", "after": ["fuse"]}]},
        klass="identifier",
    )
    question = '"class RetryPolicy"'
    once = ask(cfg, indexed, question, pipeline="once")
    assert {it["project"] for it in once.response["items"]} == {"alpha", "beta"}  # both definitions, no caller
    assert all("client.js" not in it["path"] for it in once.response["items"])
    r = ask(cfg, indexed, question, pipeline="expanded")
    receipt = r.response["receipt"]
    [seen] = [t for t in receipt["trace"] if t["node"] == "expand"]
    assert seen["names"] == ["RetryPolicy"] and receipt["per_expert"]["symbols:references"]["status"] == "ok"
    callers = [it for it in r.response["items"] if it["path"] == "beta/client.js"]
    assert callers and callers[0]["sources"][0]["expert"] == "symbols:references"


def test_when_takes_one_branch_and_the_join_still_runs(indexed: Path, tmp_path: Path) -> None:
    nodes = [
        *HEAD,
        {"id": "fanout", "kind": "fanout", "after": ["gate"]},
        {"id": "score", "kind": "score", "after": ["fanout"]},
        {"id": "fuse", "kind": "fuse", "after": ["score"]},
        {
            "id": "weak",
            "kind": "when",
            "after": ["fuse"],
            "settings": {"if": {"results_below": 1}, "then": ["broaden"]},
        },
        {"id": "broaden", "kind": "fanout", "after": ["weak"], "settings": {"experts": ["bm25"]}},
        {"id": "receipt", "kind": "receipt", "after": ["weak", "broaden"]},
    ]
    cfg = _config(tmp_path, {"branchy": nodes})
    r = ask(cfg, indexed, "where are uploaded files stored on disk", pipeline="branchy")
    [t] = r.response["receipt"]["trace"]
    assert t == {
        "node": "weak",
        "when": {"results_below": len(r.response["items"])},
        "took": "else",
        "skipped": ["broaden"],
    }
    assert r.error is None and r.response["receipt"]["status"] == "ok"


def test_rerank_orders_by_the_weight_set(indexed: Path, tmp_path: Path) -> None:
    def pipeline(weights: str) -> list[dict[str, Any]]:
        return [
            *HEAD,
            {"id": "fanout", "kind": "fanout", "after": ["gate"]},
            {"id": "score", "kind": "score", "after": ["fanout"]},
            {"id": "fuse", "kind": "fuse", "after": ["score"], "settings": {"candidates": 20}},
            {"id": "rerank", "kind": "rerank", "after": ["fuse"], "settings": {"weights": weights}},
            {"id": "receipt", "kind": "receipt", "after": ["rerank"]},
        ]

    sets = {"plain": {"rrf": 1.0}, "tests-first": {"rrf": 1.0, "test": 2.0}}
    cfg = _config(tmp_path, {"plain": pipeline("plain"), "tests": pipeline("tests-first")}, rerank=sets)
    question = "FileSystemStorage"
    plain = ask(cfg, indexed, question, pipeline="plain", limit=3).response
    tests = ask(cfg, indexed, question, pipeline="tests", limit=3).response
    assert plain["items"][0]["path"] != "tests/test_storage.py"  # fusion's test-file prior
    assert tests["items"][0]["path"] == "tests/test_storage.py"
    assert len(tests["items"]) == 3  # cut to the request's limit after reranking 20 candidates
    assert tests["receipt"]["fusion"]["rerank"] == {"weights": "tests-first", "top": 30}
    sub = tests["items"][0]["subscores"]
    assert sub["rerank"] == pytest.approx(sub["rr.rrf"] + 2.0 * sub["rr.test"], abs=1e-5)


@pytest.mark.parametrize(
    "node,message",
    [
        ({"kind": "decompose", "settings": {"parts": {"sentences": {"bm25": 1.0}}}}, "unknown parts"),
        ({"kind": "decompose", "settings": {"parts": {"title": {"nobody": 1.0}}}}, "unknown expert 'nobody'"),
        ({"kind": "decompose", "settings": {"parts": {"title": {"bm25": 2}}}}, "not in [0, 1]"),
        ({"kind": "expand", "settings": {"experts": {"symbols": 1.0}, "mode": "sideways"}}, "settings.mode"),
        ({"kind": "when", "settings": {"if": {"sunny": True}, "then": ["receipt"]}}, "unknown condition 'sunny'"),
        ({"kind": "when", "settings": {"if": {"class_in": ["poetry"]}, "then": ["receipt"]}}, "unknown values"),
        ({"kind": "when", "settings": {"if": {"results_below": 2}, "then": ["gate"]}}, "not nodes downstream"),
        ({"kind": "aggregate", "settings": {"decay": 2}}, "not in [0, 1]"),
        ({"kind": "rerank", "settings": {"weights": "missing"}}, "is not a weight set"),
        ({"kind": "fuse", "settings": {"candidates": 0}}, "must be an integer in [1, 10000]"),
        ({"kind": "fuse", "settings": {"k": 10**20}}, "must be an integer in [1, 1000]"),
        ({"kind": "fuse", "settings": {"kk": 5}}, "unknown settings ['kk']"),
        ({"kind": "decompose", "settings": {"parts": {"title": {"bm25": 1}}, "min_words": -40}}, ">= 0"),
    ],
)
def test_bad_settings_fail_at_load_naming_the_node(tmp_path: Path, node: dict[str, Any], message: str) -> None:
    nodes = [
        *HEAD,
        {"id": "fanout", "kind": "fanout", "after": ["gate"]},
        {"id": "score", "kind": "score", "after": ["fanout"]},
        {"id": "fuse", "kind": "fuse", "after": ["score"]},
        {"id": "x", "after": ["fuse"], **node},
        {"id": "receipt", "kind": "receipt", "after": ["x"]},
    ]
    cfg = load_config(_config(tmp_path, {"bad": nodes}))
    with pytest.raises(GraphError, match="node 'x'") as err:
        build_graph(cfg.pipelines["bad"], cfg)
    assert message in err.value.message
