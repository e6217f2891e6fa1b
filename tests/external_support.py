"""Shared helpers for the external-expert and MCP-server tests: a real two-repo workspace, a
test-local copy of the repo's config, queries, and process-leak checks.

Kept out of conftest.py on purpose (other suites own that file); test modules import from here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.classifier import classify
from engine.config import load_config
from engine.experts import ExpertEnv, adapter_class
from engine.experts.base import Expert
from engine.spec import ExpertSpec
from engine.types import Evidence, Query, Scope
from engine.workspace import Workspace

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
FAKE_MCP = FIXTURES / "fake_mcp_server.py"
NODE_DIR = FIXTURES / "node"
FS_SERVER = NODE_DIR / "node_modules" / "@modelcontextprotocol" / "server-filesystem" / "dist" / "index.js"
PYTHON = sys.executable

FILES = {
    "src/{name}.py": 'def parse_config(path):\n    """Read the config file."""\n    return open(path).read()\n\n\n'
    "class PaymentGateway:\n    def charge(self, amount):\n        return amount\n",
    "src/util_{name}.py": "import os\n\n\ndef retry_budget():\n    return int(os.environ.get('RETRIES', 3))\n",
    "README.md": "# {name}\n\nHow to configure the PaymentGateway for {name}.\n",
    ".env": "SECRET_TOKEN=do-not-return\n",
}


def git(cwd: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@e.st",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@e.st",
    }
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def make_workspace(root: Path, index: bool = True) -> Workspace:
    """Two small git repos (alpha, beta) under ``root``, optionally indexed with the repo's config."""
    root.mkdir(parents=True, exist_ok=True)
    for name in ("alpha", "beta"):
        repo = root / name
        for rel, text in FILES.items():
            f = repo / rel.format(name=name)
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(text.format(name=name))
        git(repo, "init", "-q")
        (repo / ".gitignore").write_text(".env\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", f"Add PaymentGateway to {name}")
    ws = Workspace.open([root])
    if index:
        from engine.indexing import index_workspace
        from engine.spec import load_config

        index_workspace(ws, load_config(REPO), only=["bm25"], progress=False)
    return ws


def copy_config(
    dest: Path,
    experts: dict[str, Any] | None = None,
    classes: dict[str, dict[str, float]] | None = None,
    gate: dict[str, Any] | None = None,
) -> Path:
    """A test-local copy of the repo's config, with extra experts and class priors merged in."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copytree(REPO / "pipelines", dest / "pipelines", dirs_exist_ok=True)
    shutil.copy(REPO / "classifier.yaml", dest / "classifier.yaml")
    ex = yaml.safe_load((REPO / "experts.yaml").read_text())
    ex["experts"].update(experts or {})
    (dest / "experts.yaml").write_text(yaml.safe_dump(ex, sort_keys=False))
    pr = yaml.safe_load((REPO / "priors.yaml").read_text())
    for klass, weights in (classes or {}).items():
        pr["classes"].setdefault(klass, {}).update(weights)
    pr["gate"].update(gate or {})
    (dest / "priors.yaml").write_text(yaml.safe_dump(pr, sort_keys=False))
    return dest


def query(ws: Workspace, question: str, limit: int = 10, scope: Scope | None = None) -> Query:
    c = classify(question, load_config(REPO).classifier, 0.5)
    return Query(
        question=question, klass=c.klass, features=c.features, scope=scope or Scope(), projects=ws.projects, limit=limit
    )


def processes_with(marker: str) -> list[int]:
    """PIDs whose command line contains ``marker`` (to prove a stalled expert left nothing behind)."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                if marker.encode() in (d / "cmdline").read_bytes():
                    pids.append(int(d.name))
            except OSError:
                continue
    return pids


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    """A real two-repo workspace, indexed once per test module."""
    return make_workspace(tmp_path_factory.mktemp("ws"))


def expert(
    adapter: str, settings: dict[str, Any], ws: Workspace, timeout_ms: int = 10000, precision: str = "lexical"
) -> Expert:
    """An adapter instance built from settings, as the expert pool would build it."""
    spec = ExpertSpec(
        name=f"ext-{adapter}", adapter=adapter, precision_class=precision, timeout_ms=timeout_ms, settings=settings
    )
    return adapter_class(adapter)(spec, ExpertEnv(ws))


async def planned_and_found(
    adapter: str, ws: Workspace, question: str, *, precision: str = "lexical", scope: Scope | None = None
) -> tuple[list[Evidence], dict[str, Any]]:
    """One expert of ``adapter`` (default settings) asked ``question``: its items and its sub-query
    (the plan as ``search`` left it, which is what the receipt records)."""
    e = expert(adapter, {}, ws, precision=precision)
    q = query(ws, question, scope=scope)
    plan = e.plan(q)
    try:
        return list(await e.search(q, plan)), plan
    finally:
        await e.aclose()


def mcp_settings(tool: str = "search", **extra: Any) -> dict[str, Any]:
    """The fake MCP server (tests/fixtures/fake_mcp_server.py) as an ``mcp`` expert, one call per project."""
    return {
        "command": [PYTHON, str(FAKE_MCP)],
        "tool": tool,
        "per_project": True,
        "arguments": {"pattern": "{{ term }}", "root": "{{ root }}", "limit": "{{ limit }}"},
        "result": {"items": "results", "fields": {"path": "file", "content": "text"}},
        **extra,
    }
