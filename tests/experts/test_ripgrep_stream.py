"""ripgrep against real rg processes: one process for every project, JSON parsed as it streams
(what it has at the deadline is an answer), the rarest terms of a long question (issue 10)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from engine.classifier import extract_features, load_classifier
from engine.experts import ripgrep as rg_module
from engine.experts.base import PARTIAL, ExpertEnv, Found
from engine.experts.ripgrep import LONG_QUESTION_WORDS, RipgrepExpert
from engine.spec import ExpertSpec
from engine.types import Query
from engine.workspace import Workspace

from ..conftest import ROOT, make_repo


def _expert(ws: Workspace, **settings: Any) -> RipgrepExpert:
    spec = ExpertSpec("ripgrep", "ripgrep", "lexical", 3000, settings=settings)
    return RipgrepExpert(spec, ExpertEnv(ws))


def _query(ws: Workspace, question: str, limit: int = 30) -> Query:
    return Query(
        question, "identifier", extract_features(question, load_classifier(ROOT)), ws_scope(), ws.projects, limit
    )


def ws_scope() -> Any:
    from engine.types import Scope

    return Scope()


def test_one_process_for_every_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_repo(tmp_path / "ws" / "one", {"a.py": "def needle_fn():\n    return 1\n"})
    make_repo(tmp_path / "ws" / "two", {"b.py": "x = needle_fn()\n"})
    ws = Workspace.open([tmp_path / "ws"])
    calls: list[list[str]] = []
    real = rg_module.run_process

    async def counting(argv: list[str], **kw: Any) -> Any:
        calls.append(argv)
        return await real(argv, **kw)

    monkeypatch.setattr(rg_module, "run_process", counting)
    ex = _expert(ws)
    q = _query(ws, '"needle_fn"')
    items = anyio.run(ex.search, q, ex.plan(q))
    assert len(calls) == 1 and len([a for a in calls[0] if a.startswith(str(tmp_path))]) == 2
    assert {(e.project, e.path) for e in items} == {("one", "a.py"), ("two", "b.py")}
    assert items[0].path == "a.py" and items[0].meta["definition"]  # the definition ranks first


def test_what_was_found_before_the_deadline_is_an_answer(tmp_path: Path) -> None:
    # rg's JSON for 20 x 1,000 matching lines (its per-file cap) is ~5 MB, more than the 2 MB read:
    # the search cannot be over when the first lines are parsed
    lines = "".join(f"hit_token = {i}\n" for i in range(1_000))
    make_repo(tmp_path / "big", {f"m{i}.py": lines for i in range(20)})
    ws = Workspace.open([tmp_path / "big"])
    ex = _expert(ws)
    q = _query(ws, '"hit_token"')
    found = Found()
    cut: list[bool] = []

    async def go() -> None:
        async with anyio.create_task_group() as tg:

            async def search() -> None:
                await ex.search_partial(q, ex.plan(q), found)
                cut.append(False)  # finished before the cancel

            tg.start_soon(search)
            while not found.collect():
                await anyio.sleep(0.001)
            tg.cancel_scope.cancel()  # the deadline: rg is killed, what was parsed stays
            cut.append(True)

    anyio.run(go)
    items = found.collect()
    assert cut == [True] and 0 < len(items) <= q.limit
    assert all(PARTIAL in e.flags and e.path.startswith("m") for e in items)


def test_a_long_question_greps_only_its_rarest_terms(indexed: Path) -> None:
    ws = Workspace.open([indexed])
    ex = _expert(ws, selective_patterns=2)
    filler = " ".join(["the storage layer should keep files somewhere"] * 6)
    question = f"{filler} but FileSystemStorage and RetryPolicy and should_retry behave oddly"
    assert len(question.split()) >= LONG_QUESTION_WORDS
    plan = ex.plan(_query(ws, question))
    assert len(plan["patterns"]) == 2 and plan["selected"]["by"].startswith("document frequency (bm25")
    df = plan["selected"]["df"]
    assert set(plan["patterns"]) == set(df) and all(v >= 1 for v in df.values())
    short = ex.plan(_query(ws, "FileSystemStorage RetryPolicy should_retry"))
    assert "selected" not in short and len(short["patterns"]) == 3  # a short question keeps them all


def test_without_an_index_the_longest_terms_are_kept(tmp_path: Path) -> None:
    make_repo(tmp_path / "r", {"a.py": "pass\n"})
    ws = Workspace.open([tmp_path / "r"])
    ex = _expert(ws, selective_patterns=2)
    plan = ex.plan(_query(ws, "uploads retries configuration parsing behaviour handlers"))
    assert plan["selected"]["by"] == "length" and plan["patterns"] == ["configuration", "behaviour"]
