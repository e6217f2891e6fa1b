"""Fused answers pinned before the fusion refactor (issue 9): same input, same output, to the digit.

The golden file was written by this test on the tree *before* ``fuse()`` became a pure function
and items became typed payloads (``PIN_REGEN=1 pytest tests/test_fusion_pinned.py``). Every
expert runs for real over the conftest repos (all indexes built). Commit items are compared
without their sha-derived fields (a commit's sha depends on the wall clock of the test run).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.indexing import index_workspace
from engine.spec import load_config
from engine.workspace import Workspace

from ..helpers import ask

KEEP = {"experts.yaml", "priors.yaml", "classifier.yaml", "pipelines"}
GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "pinned_fusion.json"

CASES: dict[str, dict[str, Any]] = {
    "identifier": {"question": 'where does "retry budget exhausted for request" come from'},
    "config-key": {"question": "which file sets the config key 'upload.max_size_mb'"},
    "typed-symbol": {"question": "where is FileSystemStorage defined"},
    "impact": {"question": "who calls RetryPolicy"},
    "docs": {"question": "how do I upload a file"},
    "conceptual": {"question": "how is the retry backoff decided", "limit": 5},
    "history": {"question": "when was jitter added to the retry backoff"},
    "scoped": {"question": "UploadClient upload", "scope": {"project": "beta"}},
    "separate": {"question": '"RetryPolicy"', "mode": "separate"},
    "cap": {"question": "FileSystemStorage save path content", "limit": 20},
}


def _stable_item(item: dict[str, Any]) -> dict[str, Any]:
    if item.get("kind") != "commit":
        return item
    return {k: v for k, v in item.items() if k not in ("id", "content", "meta")}


def _pinned(response: dict[str, Any]) -> dict[str, Any]:
    receipt = response["receipt"]
    out: dict[str, Any] = {
        "items": [_stable_item(it) for it in response["items"]],
        "confidence": response.get("confidence"),
        "fusion": receipt["fusion"],
        "classifier": receipt["classifier"],
        "selected": receipt["experts_selected"]["selected"],
        "result_count": receipt["result_count"],
    }
    if "separate" in response:
        out["separate"] = {
            name: {**s, "items": [_stable_item(it) for it in s["items"]]} for name, s in response["separate"].items()
        }
    return out


@pytest.fixture(autouse=True)
def deadlines_from_timeouts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Deadlines that follow recent latency (engine/deadlines.py) would cut an expert at ~100 ms
    once this process has seen it answer fast; on a loaded CI machine ripgrep then came back
    partial, the typed-symbol early exit did not fire and the answer changed. Pinned answers pin
    fusion: every expert gets its (raised) timeout."""
    monkeypatch.setattr("engine.deadlines.MIN_ADAPTIVE_MS", 1e9)
    monkeypatch.setattr("engine.deadlines.MIN_FOLLOW_MS", 1e9)


@pytest.fixture(scope="module")
def all_indexed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from ..conftest import ALPHA, BETA, ROOT, git, make_repo

    base = tmp_path_factory.mktemp("pinned")
    ws = base / "ws"
    make_repo(ws / "alpha", ALPHA)
    make_repo(ws / "beta", BETA)
    (ws / "alpha" / "alpha" / "retry.py").write_text(ALPHA["alpha/retry.py"] + "\n# backoff jitter added\n")
    git(ws / "alpha", "commit", "-qam", "Add jitter to the retry backoff")
    # the repo's config with every expert's timeout raised: these answers pin fusion, not a loaded
    # machine's timing (an expert cut by its deadline would change them)
    config = base / "config"
    shutil.copytree(ROOT, config, ignore=lambda d, names: [n for n in names if n not in KEEP and d == str(ROOT)])
    experts = yaml.safe_load((config / "experts.yaml").read_text())
    for spec in experts["experts"].values():
        spec["timeout_ms"] = max(int(spec.get("timeout_ms", 2000)) * 10, 30_000)
    (config / "experts.yaml").write_text(yaml.safe_dump(experts, sort_keys=False))
    index_workspace(Workspace.open([ws]), load_config(config), progress=False)
    return ws, config


def test_fused_answers_are_unchanged(all_indexed: tuple[Path, Path]) -> None:
    ws, config = all_indexed
    got = {}
    statuses = {}
    for name, case in CASES.items():
        fields = {k: v for k, v in case.items() if k != "question"}
        result = ask(config, ws, case["question"], **fields)
        assert result.error is None, (name, result.response.get("error"))
        got[name] = _pinned(result.response)
        # on a mismatch, say how each expert ended (a timing-dependent status is the usual cause)
        per_expert = result.response["receipt"]["per_expert"]
        statuses[name] = {e: (o.get("status"), o.get("error_class"), o.get("error")) for e, o in per_expert.items()}
    if os.environ.get("PIN_REGEN") == "1":
        GOLDEN.write_text(json.dumps(got, indent=1, ensure_ascii=False, sort_keys=True) + "\n")
    expected = json.loads(GOLDEN.read_text())
    for name in CASES:
        assert got[name] == expected[name], (name, statuses[name])
