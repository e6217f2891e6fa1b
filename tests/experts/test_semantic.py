"""The semantic expert with the real embedding model: conceptual recall and honest partial indexes."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.experts import ExpertEnv, adapter_class
from engine.index.build import scan_workspace, update_index
from engine.indexing import index_workspace
from engine.spec import load_config
from engine.workspace import Workspace

from ..helpers import ask


def test_conceptual_question_without_identifiers_finds_the_implementation(
    workspace_dir: Path, config_dir: Path
) -> None:
    ws, cfg = Workspace.open([workspace_dir]), load_config(config_dir)
    index_workspace(ws, cfg, only=["bm25", "semantic"], progress=False)
    r = ask(
        config_dir,
        workspace_dir,
        "how often is a failed network call attempted again",
        intent="conceptual",
        mode="separate",
    )
    sem = r.response["separate"]["semantic"]
    assert sem["status"] == "ok"
    assert sem["items"][0]["path"] == "alpha/retry.py"
    fused = ask(config_dir, workspace_dir, "how often is a failed network call attempted again", intent="conceptual")
    top = fused.response["items"][0]
    assert top["path"] == "alpha/retry.py"
    assert "semantic" in {s["expert"] for s in top["sources"]}
    fresh = fused.response["receipt"]["per_expert"]["semantic"]["freshness"]
    assert fresh["partial"] is False and fresh["files_pending"] == 0


def test_interrupted_embedding_leaves_a_partial_but_usable_index(workspace_dir: Path, config_dir: Path) -> None:
    ws, cfg = Workspace.open([workspace_dir]), load_config(config_dir)
    expert = adapter_class("semantic")(cfg.experts["semantic"], ExpertEnv(ws))

    def stop_after_first_batch(name: str, done: int, total: int, units: int) -> None:
        raise KeyboardInterrupt  # what Ctrl-C does between two batches

    with pytest.raises(KeyboardInterrupt):
        update_index(
            "semantic", expert.indexer(), ws, scan_workspace(ws), batch_files=2, progress=stop_after_first_batch
        )
    r = ask(config_dir, workspace_dir, "retry policy with exponential backoff", intent="conceptual")
    sem = r.response["receipt"]["per_expert"]["semantic"]
    assert sem["status"] == "ok"
    assert sem["freshness"]["partial"] is True and sem["freshness"]["files_pending"] > 0
    assert r.response["items"]  # the partial index still answers (conceptual runs no live grep since issue 11)
    (rep,) = index_workspace(ws, cfg, only=["semantic"], progress=False)  # resume: only what is missing
    assert rep.unchanged == 2 and rep.added > 0


def test_file_summary_units_embed_one_vector_per_file(workspace_dir: Path, config_dir: Path) -> None:
    import yaml

    data = yaml.safe_load((config_dir / "experts.yaml").read_text())
    data["experts"]["semantic"]["settings"]["units"] = "files"
    (config_dir / "experts.yaml").write_text(yaml.safe_dump(data))
    ws, cfg = Workspace.open([workspace_dir]), load_config(config_dir)
    (rep,) = index_workspace(ws, cfg, only=["semantic"], progress=False)
    assert rep.units == rep.added  # one unit per file
    r = ask(config_dir, workspace_dir, "exponential backoff for failed requests", intent="conceptual", mode="separate")
    top = r.response["separate"]["semantic"]["items"][0]
    assert top["kind"] == "file" and top["path"] == "alpha/retry.py"
    assert "RetryPolicy.should_retry" in top["content"]
