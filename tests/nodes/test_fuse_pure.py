"""``engine.fusion.fuse`` as a pure function, against hand-computed values (ranx-style: every score
is written out as ``w/(k+rank)`` sums), and the one item builder shared by fused and separate modes."""

from __future__ import annotations

import pytest

from engine.fusion import fuse
from engine.items import AnswerItem, CachedAnswer, ScoredItem, answer_item
from engine.spec import FusionSpec
from engine.types import Evidence

K = 60
FUSION = FusionSpec(k=K, per_file_cap=1, doc_file_prior=0.7, test_file_prior=0.6, snippet_chars=40)
CLASSES = {"lex": "lexical", "sem": "semantic"}
WEIGHTS = {"lex": 1.0, "sem": 0.5}


def ev(path: str, a: int, b: int, content: str = "", score: float = 1.0, flags: tuple[str, ...] = ()) -> Evidence:
    return Evidence("p", path, "chunk", a, b, content or f"{path}:{a}", score, flags=flags)


def ranked(*items: Evidence) -> list[ScoredItem]:
    return [ScoredItem(e, rank, {"native": 1.0}, e.flags) for rank, e in enumerate(items, start=1)]


SCORED = {
    "lex": ranked(
        ev("x.py", 1, 5, score=9.0, flags=("exact-match",)),  # #1
        ev("docs/guide.md", 1, 3, score=8.0),  # #2, a prose doc
        ev("tests/test_x.py", 1, 2, score=7.0),  # #3, a test file
        ev("x.py", 50, 60, score=6.0),  # #4, a second place in x.py: over the per-file cap of 1
    ),
    "sem": ranked(ev("x.py", 3, 8, score=0.9), ev("y.py", 1, 1, "y" * 50, score=0.8)),
}


def run(klass: str | None = "conceptual", limit: int = 10) -> list[AnswerItem]:
    return list(fuse(SCORED, weights=WEIGHTS, classes=CLASSES, fusion=FUSION, k=K, klass=klass, limit=limit).items)


def test_weighted_rrf_priors_and_cap_by_hand() -> None:
    items = run()
    by_path = [(it.path, it.start_line) for it in items]
    assert by_path == [("x.py", 1), ("docs/guide.md", 1), ("tests/test_x.py", 1), ("y.py", 1)]
    x, guide, test, y = items
    # x.py 1-5 (lex #1) and 3-8 (sem #1) overlap: one place, both experts
    assert x.score == pytest.approx(1.0 / (60 + 1) + 0.5 / (60 + 1), abs=1e-6)
    assert x.subscores["rrf"] == round(1.0 / 61 + 0.5 / 61, 6) and x.subscores["agreement"] == 2
    assert guide.score == pytest.approx(0.7 * 1.0 / (60 + 2), abs=1e-6)  # doc prior
    assert guide.subscores["file_prior"] == 0.7 and guide.subscores["rrf"] == round(1.0 / 62, 6)
    assert test.score == pytest.approx(0.6 * 1.0 / (60 + 3), abs=1e-6)  # test prior
    assert y.score == pytest.approx(0.5 / (60 + 2), abs=1e-6)
    assert "file_prior" not in x.subscores and "file_prior" not in y.subscores
    # x.py 50-60 (1/(60+4) = 0.0156) would rank second; the per-file cap of 1 keeps it out
    assert all(not (it.path == "x.py" and it.start_line == 50) for it in items)
    assert [it.rank for it in items] == [1, 2, 3, 4]


def test_representative_sources_tiers_and_truncation() -> None:
    x, guide, _, y = run()
    # the representative is the strongest contribution: lex #1 (1/61) beats sem #1 (0.5/61)
    assert (x.start_line, x.end_line, x.content) == (1, 5, "x.py:1")
    assert [(s.expert, s.rank, s.score, s.start_line, s.end_line) for s in x.sources] == [
        ("lex", 1, 9.0, 1, 5),
        ("sem", 1, 0.9, 3, 8),
    ]
    assert x.tier == "hybrid-confirmed" and x.flags == ("exact-match",)
    assert guide.tier == "single-source"
    assert y.tier == "semantic-only" and "verify" in (y.nuance or "")
    assert y.content == "y" * 40 + "…" and y.flags == ("content-truncated",)


def test_docs_question_keeps_prose_docs_and_limit_cuts() -> None:
    items = run(klass="docs", limit=2)
    assert [it.path for it in items] == ["x.py", "docs/guide.md"]
    assert items[1].score == pytest.approx(1.0 / (60 + 2), abs=1e-6) and "file_prior" not in items[1].subscores


def test_confidence_by_hand() -> None:
    fused = fuse(SCORED, weights=WEIGHTS, classes=CLASSES, fusion=FUSION, k=K, klass=None, limit=10)
    best_possible = (1.0 + 0.5) / (60 + 1)  # every expert ranking one item first
    assert fused.confidence.score == round((1.5 / 61) / best_possible, 4) == 1.0
    assert fused.confidence.label == "high"
    only_y = fuse({"sem": SCORED["sem"][1:]}, weights=WEIGHTS, classes=CLASSES, fusion=FUSION, k=K, klass=None, limit=3)
    # y keeps its rank (#2) in sem's list: 0.5/(60+2)
    assert only_y.confidence.score == round((0.5 / 62) / best_possible, 4) and only_y.confidence.label == "low"
    empty = fuse({}, weights=WEIGHTS, classes=CLASSES, fusion=FUSION, k=K, klass=None, limit=3)
    assert empty.items == () and empty.confidence.label == "none"


def test_same_inputs_same_output_whatever_the_order() -> None:
    a = fuse(SCORED, weights=WEIGHTS, classes=CLASSES, fusion=FUSION, k=K, klass=None, limit=10)
    b = fuse(dict(reversed(SCORED.items())), weights=WEIGHTS, classes=CLASSES, fusion=FUSION, k=K, klass=None, limit=10)
    assert a == b


def test_one_builder_caps_snippets_the_same_in_both_modes() -> None:
    e = ev("z.py", 1, 2, "z" * 50, score=3.0)
    separate = answer_item(e, rank=1, score=3.0, subscores={"native": 1.0}, flags=("exact-match",), snippet_chars=40)
    assert separate.content == "z" * 40 + "…" and separate.flags == ("exact-match", "content-truncated")
    wire = separate.to_dict()
    assert "sources" not in wire and "tier" not in wire and wire["range"] == {"start_line": 1, "end_line": 2}
    assert AnswerItem.from_dict(wire) == separate
    fused_item = run()[0]
    assert AnswerItem.from_dict(fused_item.to_dict()) == fused_item  # the cache reads back what it wrote
    cached = CachedAnswer((fused_item,), {"method": "weighted_rrf"}, None)
    assert CachedAnswer.from_dict(cached.to_dict()) == cached


def test_commits_dedup_by_sha_and_chunks_by_overlap() -> None:
    def commit(sha: str) -> Evidence:
        return Evidence("p", "", "commit", 0, 0, f"fix {sha}", 1.0, meta={"sha": sha})

    scored = {
        "lex": ranked(commit("aaa"), ev("x.py", 10, 20), ev("x.py", 40, 50)),
        "sem": ranked(commit("bbb"), commit("aaa"), ev("x.py", 18, 30), ev("x.py", 70, 80)),
    }
    fusion = FusionSpec(k=K, per_file_cap=5, doc_file_prior=1.0, test_file_prior=1.0, snippet_chars=40)
    items = fuse(scored, weights=WEIGHTS, classes=CLASSES, fusion=fusion, k=K, klass=None, limit=10).items
    agreed = {(it.kind, it.meta.get("sha") or it.start_line): sorted(s.expert for s in it.sources) for it in items}
    assert agreed == {
        ("commit", "aaa"): ["lex", "sem"],  # the same sha from both experts: one place
        ("commit", "bbb"): ["sem"],
        ("chunk", 10): ["lex", "sem"],  # 10-20 and 18-30 overlap
        ("chunk", 40): ["lex"],
        ("chunk", 70): ["sem"],
    }
