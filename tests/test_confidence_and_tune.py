"""Calibrated confidence (engine/confidence.py) and the fitting verbs `engine tune --rerank` and
`engine tune --confidence`, on hand-made eval runs whose answers are known."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.confidence import ConfidenceSpec, assess, signals
from engine.errors import SpecError
from engine.items import AnswerItem, Source
from engine.tune_confidence import tune_confidence
from engine.tune_rerank import Question, fit, ndcg_at_10, objective, tune_rerank
from engine.types import Features

SPEC = ConfidenceSpec(model={"bias": -1.0, "share": 3.0, "lexical": 1.0}, high_at=0.8, medium_at=0.5)


def _item(
    content: str, sources: list[tuple[str, int]], score: float = 1.0, tier: str = "hybrid-confirmed"
) -> AnswerItem:
    return AnswerItem(
        id="i",
        rank=1,
        path="src/net.py",
        project="p",
        start_line=1,
        end_line=5,
        kind="chunk",
        content=content,
        score=score,
        subscores={"rrf": score},
        flags=(),
        sources=tuple(Source(e, r, 1.0, 1, 5) for e, r in sources),
        tier=tier,
    )


def _signals(items: list[AnswerItem], features: Features, returned: dict[str, int]) -> dict[str, float]:
    precision = {"ripgrep": "lexical", "semantic": "semantic", "bm25": "lexical"}
    return signals(items, precision=precision, returned=returned, features=features, max_rrf=1.0)


def test_a_strong_lexical_answer_is_high() -> None:
    items = [_item('raise ConnectionError("connection refused")', [("ripgrep", 1), ("bm25", 1)]), _item("x", [], 0.2)]
    sig = _signals(items, Features(literals=("connection refused",)), {"ripgrep": 3, "semantic": 0})
    assert sig["literal_hit"] == 1.0 and sig["lexical"] == 1.0 and sig["margin"] == 0.8
    c = assess(sig, SPEC)
    assert c.label == "high" and c.score == pytest.approx(1 / (1 + 2.718281828**-3.0), abs=1e-3)
    assert c.to_dict()["signals"] == sig


def test_a_quoted_phrase_missing_from_the_top_item_is_low() -> None:
    items = [_item("def connect(): retry()", [("ripgrep", 1), ("bm25", 1)])]
    sig = _signals(items, Features(literals=("connection refused",)), {"ripgrep": 1})
    assert sig["literal_miss"] == 1.0
    assert assess(sig, SPEC).label == "low"  # whatever the model says


def test_semantic_only_answers_without_lexical_support_are_never_high() -> None:
    items = [_item("def frobnicate(): ...", [("semantic", 1)], tier="semantic-only")]
    sig = _signals(items, Features(keywords=("xyzzyqwv", "glorpwidget")), {"semantic": 30, "bm25": 0, "ripgrep": 0})
    assert sig["lexical_any"] == 0.0 and sig["semantic_only"] == 1.0
    c = assess(sig, ConfidenceSpec(model={"bias": 5.0}))  # a model that would say 0.99
    assert c.score > 0.99 and c.label == "medium"
    assert assess(None, SPEC).label == "none"


# ------------------------------------------------------------------------------------- fitting


def _run(tmp: Path, name: str, split: str, rows: list[dict[str, Any]]) -> Path:
    run = tmp / name
    run.mkdir()
    (run / "metrics.json").write_text(json.dumps({"suite": {"name": name, "split": split}}))
    (run / "per_query.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def _rerank_row(qid: str, gold: str, cands: list[tuple[str, dict[str, float]]]) -> dict[str, Any]:
    return {
        "qid": qid,
        "arm": "router",
        "rerank": "s",
        "relevant": {gold: 1},
        "ranked": [d for d, _ in cands],
        "features": [{"doc": d, "f": f} for d, f in cands],
    }


def test_ndcg_matches_the_hand_computed_value() -> None:
    # relevant at rank 2 (grade 1) of 1 relevant: 1/log2(3)
    assert ndcg_at_10(["a", "b"], {"b": 1}) == pytest.approx(0.6309, abs=1e-4)


def test_rerank_fit_learns_to_demote_tests(tmp_path: Path) -> None:
    """Twelve questions where the first candidate is a test file and the answer is second."""
    rows = [
        _rerank_row(f"q{i}", f"src{i}.py", [(f"test{i}.py", {"rrf": 1.0, "test": 1.0}), (f"src{i}.py", {"rrf": 0.8})])
        for i in range(12)
    ]
    run = _run(tmp_path, "suite", "dev", rows)
    sets, report = tune_rerank([run], {"s": {"rrf": 1.0}})
    assert sets["s"]["test"] < -0.2 and report[0]["ndcg@10_after"] == 1.0
    assert report[0]["ndcg@10_before"] == pytest.approx(0.6309, abs=1e-4)
    with pytest.raises(SpecError, match="not a dev split"):
        tune_rerank([_run(tmp_path, "other", "test", rows)], {})


def test_rerank_fit_leaves_a_weight_alone_when_few_questions_move() -> None:
    # one question of twelve would gain: less than half a question's worth on average is noise
    qs = [Question("r", f"q{i}", {"a": 1}, (("a", {"rrf": 1.0}), ("b", {"rrf": 0.5}))) for i in range(11)]
    qs.append(Question("r", "odd", {"b": 1}, (("a", {"rrf": 1.0}), ("b", {"rrf": 0.5, "doc": 1.0}))))
    assert fit(qs, {"rrf": 1.0}) == {"rrf": 1.0}
    assert objective(qs, {"rrf": 1.0}) == pytest.approx((11 + 0.6309) / 12, abs=1e-4)


def test_confidence_fit_is_calibrated_on_its_data(tmp_path: Path) -> None:
    rows = []
    for i in range(400):  # strong share: right 9 times in 10; weak: right 1 time in 10
        strong = i % 2 == 0
        right = (i // 2) % 10 != 0 if strong else (i // 2) % 10 == 0
        rows.append(
            {
                "qid": f"q{i}",
                "arm": "router",
                "ranked": ["a" if right else "b"],
                "relevant": {"a": 1},
                "confidence": {"score": 0.5, "label": "low", "signals": {"share": 1.0 if strong else 0.1}},
            }
        )
    model, report = tune_confidence([_run(tmp_path, "suite", "dev", rows)])
    assert model["share"] > 2.0
    p_strong = 1 / (1 + 2.718281828 ** -(model["bias"] + model["share"]))
    assert p_strong == pytest.approx(0.9, abs=0.05) and report["questions"] == 400


def test_a_confidence_fit_needs_enough_questions(tmp_path: Path, config_dir: Path) -> None:
    """A model fitted to a handful of questions is no calibration (it had no minimum)."""
    from engine.errors import SpecError
    from engine.tune import tune_confidence_file

    rows = [
        {
            "qid": f"q{i}",
            "arm": "router",
            "ranked": ["a"],
            "relevant": {"a": 1},
            "confidence": {"score": 0.5, "label": "low", "signals": {"share": 0.5}},
        }
        for i in range(5)
    ]
    with pytest.raises(SpecError, match="at least 20"):
        tune_confidence_file([_run(tmp_path, "suite", "dev", rows)], config_dir)
