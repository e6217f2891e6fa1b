"""External experts for real: third-party MCP servers from PyPI and npm, and a fan-out beside the
local experts in which every failure mode is classified in the signed receipt."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.runtime import Router
from engine.workspace import Workspace
from tests.experts.expert_contract import call
from tests.external_support import FS_SERVER, NODE_DIR, REPO, copy_config, expert, git, mcp_settings, query, ws  # noqa: F401

pytestmark = pytest.mark.anyio


async def ask(config: Path, ws: Workspace, pipeline: str, question: str, **fields: Any) -> dict[str, Any]:
    router = Router(config, ws)
    try:
        result = await router.run(pipeline, {"question": question, "no_cache": True, **fields})
    finally:
        await router.aclose()
    return result.response


def repo_entry(name: str, **overrides: Any) -> dict[str, Any]:
    entry = yaml.safe_load((REPO / "experts.yaml").read_text())["experts"][name]
    return {**entry, **overrides}


async def test_mcp_server_git_from_pypi_fires_beside_the_git_expert(ws: Workspace, tmp_path: Path) -> None:
    try:
        import mcp_server_git  # noqa: F401
    except ImportError:
        msg = "pip install mcp-server-git (the `external` extra) to run the mcp-server-git test"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    config = copy_config(
        tmp_path / "config",
        experts={"mcp-server-git": repo_entry("mcp-server-git", enabled=True)},
        classes={"history": {"mcp-server-git": 0.9}},
    )
    response = await ask(config, ws, "history", 'when was "PaymentGateway" added')
    receipt = response["receipt"]
    assert receipt["per_expert"]["mcp-server-git"]["status"] == "ok", receipt["per_expert"]
    assert receipt["per_expert"]["git"]["status"] == "ok"
    heads = {git(p.root, "rev-parse", "HEAD").strip() for p in ws.projects}
    from_server = [it for it in response["items"] if any(s["expert"] == "mcp-server-git" for s in it["sources"])]
    assert {it["meta"]["sha"] for it in from_server} == heads
    # the same commit found by both history experts corroborates: one item, two sources
    both = [it for it in from_server if {s["expert"] for s in it["sources"]} == {"git", "mcp-server-git"}]
    assert both and all(it["tier"] == "hybrid-confirmed" for it in both)


def _need_filesystem_server() -> None:
    if shutil.which("node") is None or not FS_SERVER.exists():
        msg = f"npm ci --prefix {NODE_DIR.relative_to(REPO)} (needs node) to run the filesystem MCP server test"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)


async def test_filesystem_server_from_npm_search_files(ws: Workspace) -> None:
    _need_filesystem_server()
    settings = {
        "command": ["node", str(FS_SERVER), "{{ root }}"],
        "tool": "search_files",
        "per_project": True,
        "required": ["term"],
        "arguments": {"path": "{{ root }}", "pattern": "**/*{{ term }}*"},
        "result": {"format": "text", "kind": "file", "pattern": r"^(?P<path>/[^\n]+)$"},
    }
    fs = expert("mcp", settings, ws, precision="structural")
    try:
        got = await call(fs, query(ws, 'open "util_alpha.py"'))
        assert [(e.project, e.path, e.kind) for e in got] == [("alpha", "src/util_alpha.py", "file")]
        none = await call(fs, query(ws, 'open "no_such_file_anywhere.py"'))  # "No matches found" → no items
        assert none == []
    finally:
        await fs.aclose()


SCENARIOS = {  # expert → (tool, timeout_ms, expected status)
    "ext-ok": ("search", 10000, "ok"),
    "ext-missing": ("search", 10000, "unavailable"),
    "ext-crash": ("crash", 10000, "internal"),
    "ext-stall": ("stall", 2500, "timeout"),
    "ext-malformed": ("garbage", 10000, "malformed"),
}


async def test_external_failures_are_classified_and_the_others_still_answer(ws: Workspace, tmp_path: Path) -> None:
    experts = {}
    for name, (tool, timeout_ms, _) in SCENARIOS.items():
        settings = mcp_settings(tool)
        if name == "ext-missing":
            settings["command"] = [str(tmp_path / "not-installed-server")]
        if name == "ext-malformed":
            settings["result"] = {"format": "json", "items": "results"}
        experts[name] = {
            "adapter": "mcp",
            "precision_class": "lexical",
            "timeout_ms": timeout_ms,
            "freshness": "live",
            "settings": settings,
        }
    config = copy_config(
        tmp_path / "config",
        experts=experts,
        classes={"identifier": {n: 0.8 for n in SCENARIOS}},
        gate={"max_experts": 8},
    )
    budget_ms = 15000
    started = time.perf_counter()
    response = await ask(config, ws, "identifier", 'where is "PaymentGateway"', budget={"latency_ms": budget_ms})
    assert (time.perf_counter() - started) * 1000 < budget_ms
    per = response["receipt"]["per_expert"]
    assert {n: per[n]["status"] for n in SCENARIOS} == {n: s for n, (_, _, s) in SCENARIOS.items()}
    assert per["ripgrep"]["status"] == "ok" and per["ripgrep"]["result_count"] > 0
    assert all(per[n]["result_count"] == 0 for n in SCENARIOS if n != "ext-ok")
    ext_items = [it for it in response["items"] if any(s["expert"] == "ext-ok" for s in it["sources"])]
    assert ext_items and any(len(it["sources"]) > 1 for it in ext_items)  # corroborated by a local expert
    assert response["receipt"]["sub_queries"]["ext-ok"]["calls"][0]["arguments"]["pattern"] == "PaymentGateway"
