"""An index that `engine index` built over zero files (a repository without docs) answers empty, not
`unavailable`: the lockstep indexer opens no writer for it, so only its manifest exists."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.config import load_config
from engine.errors import ExpertUnavailable
from engine.indexing import index_workspace

from ..conftest import make_repo
from ..symbol_repos import ask_expert, index


def test_a_docs_index_of_a_repo_without_docs_answers_empty(tmp_path: Path, config_dir: Path) -> None:
    ws = tmp_path / "ws"
    make_repo(ws / "code", {"app.py": "def handler():\n    return 'hit'\n"})
    reports = index(ws, config_dir, "docs")
    assert reports["docs"].added == 0 and (ws / ".engine" / "index" / "docs" / "manifest.json").exists()
    plan, items = ask_expert(config_dir, ws, "docs", "how do I configure the handler")
    assert items == [] and plan["terms"]


def test_an_index_never_built_is_still_unavailable(tmp_path: Path, config_dir: Path) -> None:
    ws = tmp_path / "ws"
    make_repo(ws / "code", {"app.py": "def handler():\n    return 'hit'\n"})
    with pytest.raises(ExpertUnavailable, match="run `engine index`"):
        ask_expert(config_dir, ws, "docs", "how do I configure the handler")


def test_an_index_built_for_other_roots_answers_for_the_projects_it_knows(
    tmp_path: Path, config_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by an exploratory run: indexed with `-w wsA`, asked with `-w wsA -w wsB` (two roots
    named `app`, so now `wsA/app` and `wsB/app`), bm25 failed `malformed` (KeyError: 'app')."""
    import anyio

    from engine.runtime import Router
    from engine.workspace import Workspace

    monkeypatch.setenv("ENGINE_HOME", str(tmp_path / "home"))
    a = make_repo(tmp_path / "wsA" / "app", {"a.py": "class ConnectionError(Exception):\n    pass\n"})
    b = make_repo(tmp_path / "wsB" / "app", {"b.py": "raise ConnectionError()\n"})
    index_workspace(Workspace.open([a]), load_config(config_dir), only=["bm25"], progress=False)
    router = Router(config_dir, Workspace.open([a, b]))

    async def go() -> dict:
        try:
            return (await router.run("identifier", {"question": '"ConnectionError"', "no_cache": True})).response
        finally:
            await router.aclose()

    response = anyio.run(go)
    router.flush()
    bm25 = response["receipt"]["per_expert"]["bm25"]
    # no KeyError, and no silent "ok, nothing found" either (found by a second exploratory run):
    # the index was never built for these names, and the receipt says so
    assert bm25["status"] == "unavailable" and "not indexed for wsA/app, wsB/app" in bm25["error"]
    assert {(it["project"], it["path"]) for it in response["items"]} >= {("wsA/app", "a.py"), ("wsB/app", "b.py")}
    # indexed for these roots, it answers
    index_workspace(Workspace.open([a, b]), load_config(config_dir), only=["bm25"], progress=False)
    router = Router(config_dir, Workspace.open([a, b]))
    response = anyio.run(go)
    router.flush()
    assert response["receipt"]["per_expert"]["bm25"]["status"] == "ok"
