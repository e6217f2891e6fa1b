"""The shared expert contract (tests/expert_contract.py) run over every built-in adapter, against the
real tools: rg, git, real tantivy / sqlite / vector indexes built by ``engine index``, jedi and the
embedding model. (mcp, http and command run it in tests/test_external_adapters.py.)

Failure scenarios are made the way they happen in the field:

* a binary that is not there, that crashes, that never answers or that prints something else
  (``settings.binary`` pointing at a stand-in script, for the process-backed rg and git);
* an index that was never built, one whose files are damaged, and one that blocks on read (its
  manifest replaced by a FIFO nobody writes to: the read waits like a stuck network filesystem).
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import pytest

from engine.config import load_config
from engine.experts import ExpertEnv, adapter_class, known_adapters
from engine.experts.base import Expert
from engine.indexing import index_workspace
from engine.spec import ExpertSpec
from engine.types import Evidence, Project
from engine.workspace import Workspace
from tests.experts.expert_contract import ExpertContract, grounded_commit
from tests.external_support import REPO, make_workspace

pytestmark = pytest.mark.anyio

STAND_IN = """#!{python}
import sys, time
mode = {mode!r}
if mode == "crash":
    sys.stderr.write("stand-in: index corrupted\\n")
    sys.exit(3)
if mode == "stall":
    time.sleep(3600)
sys.stdout.write("\\x1ethis is not what the tool prints\\n")
"""


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    """Two real git repos, with every index of the repo's experts.yaml built for real."""
    workspace = make_workspace(tmp_path_factory.mktemp("ws"), index=False)
    index_workspace(workspace, load_config(REPO), progress=False)
    return workspace


def stand_in(tmp_path: Path, mode: str) -> str:
    """An executable that crashes, stalls or prints garbage, in place of rg or git."""
    path = tmp_path / f"stand-in-{mode}"
    path.write_text(STAND_IN.format(python=sys.executable, mode=mode))
    path.chmod(0o755)
    return str(path)


def build(name: str, ws: Workspace, settings: dict[str, Any] | None = None) -> Expert:
    spec = load_config(REPO).experts[name]
    if settings is not None:
        spec = replace(spec, settings=settings)
    return adapter_class(spec.adapter)(spec, ExpertEnv(ws))


class ProcessContract(ExpertContract):
    """rg and git: the tool is a real process; its failures come from stand-ins for the binary."""

    expert_name: ClassVar[str] = ""

    def make(self, scenario: str, ws: Workspace, tmp_path: Path) -> Expert:
        settings = dict(load_config(REPO).experts[self.expert_name].settings)
        if scenario == "missing":
            settings["binary"] = str(tmp_path / "no-such-binary")
        elif scenario != "ok":
            settings["binary"] = stand_in(tmp_path, scenario)
            self.marker = settings["binary"]
        return build(self.expert_name, ws, settings)


class TestRipgrepContract(ProcessContract):
    adapter = expert_name = "ripgrep"


class TestGitContract(ProcessContract):
    adapter = expert_name = "git"

    def grounded(self, e: Evidence, project: Project) -> bool:
        return grounded_commit(e, project)


class IndexContract(ExpertContract):
    """Index-backed experts, over a private copy of the index built by ``engine index``."""

    expert_name: ClassVar[str] = ""
    #: the index files whose damage the expert must report as malformed
    damaged: ClassVar[tuple[str, ...]] = ()
    not_applicable: ClassVar[dict[str, str]] = {
        "crash": "the index is read in-process: there is no process to die; an unexpected exception in it "
        "is mapped to internal by expert_errors (test_graph_scheduler::test_crash_in_handler_is_internal)",
    }

    def make(self, scenario: str, ws: Workspace, tmp_path: Path) -> Expert:
        if scenario == "ok":
            return build(self.expert_name, ws)
        data = tmp_path / f"data-{scenario}"
        index = data / "index" / self.expert_name
        if scenario != "missing":
            shutil.copytree(ws.data_dir / "index" / self.expert_name, index)
        if scenario == "malformed":
            for rel in self.damaged:
                (index / rel).write_bytes(b"\x00garbage, not an index\xff" * 8)
        if scenario == "stall":
            manifest = index / "manifest.json"
            manifest.replace(tmp_path / "manifest.real")
            os.mkfifo(manifest)
        return build(self.expert_name, Workspace.open(list(ws.roots), data_dir=data))

    def release(self, scenario: str, tmp_path: Path) -> None:
        if scenario != "stall":
            return
        fifo = tmp_path / f"data-{scenario}" / "index" / self.expert_name / "manifest.json"
        try:  # the abandoned reader is still blocked in open(): give it the real file, then EOF
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            fd = None  # nobody is waiting
        (tmp_path / "manifest.real").replace(fifo)
        if fd is not None:
            os.close(fd)


class TestBm25Contract(IndexContract):
    adapter = expert_name = "bm25"
    damaged = ("tantivy/meta.json",)


class TestDocsContract(IndexContract):
    adapter = expert_name = "docs"
    damaged = ("tantivy/meta.json",)


class TestSymbolsContract(IndexContract):
    adapter = expert_name = "symbols"
    damaged = ("symbols.sqlite3",)


class TestTypedContract(IndexContract):
    adapter = expert_name = "typed"
    damaged = ("typed.sqlite3",)


class TestSemanticContract(IndexContract):
    adapter = expert_name = "semantic"
    damaged = ("vectors.json",)  # the catalog of segments (engine/vector_segments.py)
    exact = False  # similarity search: the best item of each project names the class, not every item


class TestFakeContract(ExpertContract):
    """The scripted expert scheduler tests use: its scenarios are its settings."""

    adapter = "fake"
    not_applicable: ClassVar[dict[str, str]] = {}

    def make(self, scenario: str, ws: Workspace, tmp_path: Path) -> Expert:
        items = []
        for project in ws.projects:
            for rel in ("src/{}.py", "README.md"):
                path = rel.format(project.name)
                lines = (project.root / path).read_text().splitlines()
                n = next(i for i, line in enumerate(lines, start=1) if "PaymentGateway" in line)
                items.append({"project": project.name, "path": path, "kind": "chunk", "start_line": n,
                              "end_line": n, "content": lines[n - 1]})  # fmt: skip
        settings: dict[str, Any] = {
            "ok": {"items": items},
            "missing": {"fail": "unavailable"},
            "crash": {"fail": "crash"},
            "stall": {"delay_ms": 3_600_000},
            "malformed": {"fail": "malformed"},
        }[scenario]
        spec = ExpertSpec(
            name="scripted", adapter="fake", precision_class="lexical", timeout_ms=1000, settings=settings
        )
        return adapter_class("fake")(spec, ExpertEnv(ws))


def test_every_adapter_runs_the_contract() -> None:
    import tests.experts.test_external_adapters as external

    def covered(cls: type[ExpertContract]) -> set[str]:
        out = {cls.adapter} if cls.adapter else set()
        for sub in cls.__subclasses__():
            out |= covered(sub)
        return out

    assert external.TestMcpContract.adapter == "mcp"
    assert covered(ExpertContract) == set(known_adapters())
