"""An index that `engine index` built over zero files (a repository without docs) answers empty, not
`unavailable`: the lockstep indexer opens no writer for it, so only its manifest exists."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.errors import ExpertUnavailable

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
