"""Cache keys change only when something that affects the answer changed (issue 12 item 7), both ways:
a no-op ``engine index`` keeps the answer cache; a file edited and re-indexed, a HEAD change or a
config change each invalidate it. Real git repos, the real CLI indexer, the real DuckDB store.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.experts import ExpertEnv, adapter_class
from engine.experts.indexed import IndexedExpert
from engine.index.build import scan_workspace, update_index
from engine.index.manifest import Manifest, read_generation
from engine.indexing import index_workspace
from engine.runtime import RunResult
from engine.spec import load_config
from engine.workspace import Workspace

from ..conftest import git
from ..helpers import ask

QUESTION = '"RetryPolicy"'
INDEXES = ("bm25", "symbols")


def engine_index(workspace: Path, config_dir: Path) -> list[dict[str, Any]]:
    """``engine index`` as a user runs it (the bm25 and symbols indexes: the semantic model is slow)."""
    argv = [sys.executable, "-m", "engine.cli", "index", "-w", str(workspace), "--config-dir", str(config_dir)]
    for name in INDEXES:
        argv += ["--only", name]
    res = subprocess.run([*argv, "-f", "json"], capture_output=True, text=True, check=True)
    reports: list[dict[str, Any]] = json.loads(res.stdout)
    return reports


def asked(workspace: Path, config_dir: Path) -> RunResult:
    return ask(config_dir, workspace, QUESTION, pipeline="identifier", no_cache=False)


def cache(r: RunResult) -> tuple[bool, str]:
    c = r.response["receipt"]["cache"]
    return c["hit"], c["key"]


def generations(workspace: Path) -> dict[str, str]:
    root = workspace / ".engine" / "index"
    return {name: Manifest.load(root / name / "manifest.json").generation for name in INDEXES}


def test_a_no_op_index_keeps_the_cache_and_a_reindexed_edit_invalidates_it(
    workspace_dir: Path, config_dir: Path
) -> None:
    engine_index(workspace_dir, config_dir)
    first = asked(workspace_dir, config_dir)
    assert cache(first)[0] is False
    assert cache(asked(workspace_dir, config_dir)) == (True, cache(first)[1])
    before = generations(workspace_dir)

    reports = engine_index(workspace_dir, config_dir)  # nothing changed
    assert all(r["added_or_changed"] == 0 and r["removed"] == 0 for r in reports), reports
    assert generations(workspace_dir) == before
    again = asked(workspace_dir, config_dir)
    assert cache(again) == (True, cache(first)[1])  # the no-op index kept the answer cache
    assert again.response["items"] == first.response["items"]

    # a real change, re-indexed: a new key, and the answer shows the edit
    retry = workspace_dir / "alpha" / "alpha" / "retry.py"
    original = retry.read_text()
    retry.write_text(original + "\n\ndef make_policy():\n    return RetryPolicy(attempts=5)\n")
    engine_index(workspace_dir, config_dir)
    assert generations(workspace_dir) != before
    edited = asked(workspace_dir, config_dir)
    assert cache(edited)[0] is False and cache(edited)[1] != cache(first)[1]
    assert any("make_policy" in it["content"] or "attempts=5" in it["content"] for it in edited.response["items"])

    # the edit undone and re-indexed: the index holds what it held, so the first key (and answer) is back
    retry.write_text(original)
    engine_index(workspace_dir, config_dir)
    assert generations(workspace_dir) == before
    assert cache(asked(workspace_dir, config_dir)) == (True, cache(first)[1])


def test_a_head_change_invalidates_the_cache(workspace_dir: Path, config_dir: Path) -> None:
    engine_index(workspace_dir, config_dir)
    first = asked(workspace_dir, config_dir)
    assert cache(asked(workspace_dir, config_dir)) == (True, cache(first)[1])
    git(workspace_dir / "beta", "commit", "-q", "--allow-empty", "-m", "an empty commit moves HEAD")
    moved = asked(workspace_dir, config_dir)
    assert cache(moved)[0] is False and cache(moved)[1] != cache(first)[1]
    # re-indexing at the new HEAD changes what the index records (its HEADs): another new key
    engine_index(workspace_dir, config_dir)
    reindexed = asked(workspace_dir, config_dir)
    assert cache(reindexed)[0] is False and cache(reindexed)[1] not in (cache(first)[1], cache(moved)[1])


def test_a_config_change_invalidates_the_cache(workspace_dir: Path, config_dir: Path) -> None:
    engine_index(workspace_dir, config_dir)
    first = asked(workspace_dir, config_dir)
    assert cache(asked(workspace_dir, config_dir))[0] is True
    priors = yaml.safe_load((config_dir / "priors.yaml").read_text())
    priors["fusion"]["k"] = priors["fusion"].get("k", 60) + 1
    (config_dir / "priors.yaml").write_text(yaml.safe_dump(priors, sort_keys=False))
    changed = asked(workspace_dir, config_dir)
    assert cache(changed)[0] is False and cache(changed)[1] != cache(first)[1]


def test_the_generation_is_what_the_index_holds_read_from_the_head(tmp_path: Path) -> None:
    m = Manifest(tmp_path / "manifest.json", "idx-1", {"p:a.py": {"sha256": "1" * 64}}, {"p": "abc"})
    m.save()
    done = Manifest.load(m.path).generation
    assert done == m.content_digest() and len(done) == 64
    assert read_generation(m.path) == done  # the key's read: the file's first bytes only
    assert m.path.read_text().startswith('{"generation":"' + done)
    # a manifest written before generations existed: derived from its content, the same value
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"indexer_id": "idx-1", "files": m.files, "heads": m.heads, "pending": 0}))
    assert read_generation(old) == done
    assert read_generation(tmp_path / "absent.json") == ""
    # the same content in another manifest object: the same generation (a pure function of content)
    twin = Manifest(tmp_path / "twin.json", "idx-1", {"p:a.py": {"sha256": "1" * 64}}, {"p": "abc"})
    assert twin.content_digest() == done
    for changed in (
        Manifest(m.path, "idx-2", m.files, m.heads),  # another indexer (model, format)
        Manifest(m.path, "idx-1", {"p:a.py": {"sha256": "2" * 64}}, m.heads),  # a file's content
        Manifest(m.path, "idx-1", m.files, {"p": "def"}),  # a HEAD
        Manifest(m.path, "idx-1", m.files, m.heads, pending=3),  # a partial index
    ):
        assert changed.content_digest() != done


def test_an_interrupted_index_run_is_new_and_its_completion_is_the_digest(
    workspace_dir: Path, config_dir: Path
) -> None:
    ws, cfg = Workspace.open([workspace_dir]), load_config(config_dir)
    index_workspace(ws, cfg, only=["bm25"], progress=False)
    path = ws.data_dir / "index" / "bm25" / "manifest.json"
    done = read_generation(path)
    for name in ("storage.py", "retry.py"):
        f = workspace_dir / "alpha" / "alpha" / name
        f.write_text(f.read_text() + "\n# edited\n")
    bm25 = adapter_class("bm25")(cfg.experts["bm25"], ExpertEnv(ws))
    assert isinstance(bm25, IndexedExpert)

    def interrupt(*_: object) -> None:
        raise KeyboardInterrupt  # as ^C after the first committed batch

    with pytest.raises(KeyboardInterrupt):
        update_index("bm25", bm25.indexer(), ws, scan_workspace(ws), batch_files=1, progress=interrupt)
    partial = read_generation(path)
    assert partial.startswith("partial-") and Manifest.load(path).pending == 1
    index_workspace(ws, cfg, only=["bm25"], progress=False)  # resumed and finished
    finished = Manifest.load(path)
    assert read_generation(path) == finished.content_digest() not in (done, partial)
