"""The contract every expert adapter passes (cf. haystack's DocumentStore test mixins).

A subclass sets ``adapter``, provides ``make(scenario, ws, tmp_path) -> Expert`` for the
scenarios below and inherits the tests; every adapter the registry knows has one
(``tests/test_expert_contract_all.py::test_every_adapter_runs_the_contract``). The deadline is
enforced here exactly as the fan-out enforces it (``anyio.fail_after`` around ``search`` inside
``expert_errors``).

| scenario  | the expert behind it                           | expected                          |
|-----------|------------------------------------------------|-----------------------------------|
| ok        | answers with real matches from the workspace   | Evidence, ≤ limit, in-bounds, grounded in the files |
| missing   | server / binary / host / index is not there    | ExpertUnavailable                 |
| crash     | dies mid-call                                  | ExpertFailed (internal)           |
| stall     | never answers                                  | TimeoutError at the deadline      |
| malformed | answers with output (or an index) that is not of the promised shape | ExpertOutputError |

A scenario an adapter cannot meet is listed in ``not_applicable`` with the reason (reported as
a skip, never a silent pass).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import ClassVar

import anyio
import pytest

from engine.errors import ExpertFailed, ExpertOutputError, ExpertUnavailable
from engine.experts.base import Expert, expert_errors
from engine.experts.indexed import IndexedExpert
from engine.types import Evidence, Project, Query
from engine.workspace import Workspace, is_excluded, safe_join
from tests.external_support import query

QUESTION = 'where is "PaymentGateway" defined'
STALL_DEADLINE_S = 1.5


async def call(expert: Expert, q: Query, deadline_s: float = 15.0) -> list[Evidence]:
    plan = expert.plan(q)
    with anyio.fail_after(deadline_s):
        with expert_errors(expert.name):
            return await expert.search(q, plan)


NEEDLE = "PaymentGateway"


def grounded_in_file(e: Evidence, project: Project) -> bool:
    """Every line of the item's content is text of the file it names (a chunk's ``# path`` header aside)."""
    path = safe_join(project, e.path)
    if path is None or not path.is_file():
        return False
    text = path.read_text("utf-8", "replace")
    lines = e.content.splitlines()
    if lines and lines[0].startswith(f"# {e.path}"):
        lines = lines[1:]
    return all(line in text for line in lines if line.strip())


class ExpertContract:
    """Inherit; set ``adapter``, and ``marker`` (a string in the expert's process command line, if it spawns one)."""

    adapter: ClassVar[str] = ""
    marker: str | None = None
    #: every item mentions the needle; False for similarity search, where each project's best item must
    exact: ClassVar[bool] = True
    #: scenario → why this adapter has no such failure
    not_applicable: ClassVar[dict[str, str]] = {}

    def make(self, scenario: str, ws: Workspace, tmp_path: Path) -> Expert:  # pragma: no cover - abstract
        raise NotImplementedError

    def release(self, scenario: str, tmp_path: Path) -> None:
        """Undo what ``make`` set up for ``scenario`` once the call is over (e.g. unblock a stalled read)."""

    def grounded(self, e: Evidence, project: Project) -> bool:
        return grounded_in_file(e, project)

    def _applies(self, scenario: str) -> None:
        if scenario in self.not_applicable:
            pytest.skip(f"{self.adapter}: no {scenario} scenario: {self.not_applicable[scenario]}")

    async def _run(
        self,
        scenario: str,
        ws: Workspace,
        tmp_path: Path,
        limit: int = 10,
        deadline_s: float = 15.0,
        question: str = QUESTION,
    ) -> list[Evidence]:
        expert = self.make(scenario, ws, tmp_path)
        try:
            return await call(expert, query(ws, question, limit=limit), deadline_s)
        finally:
            try:
                await expert.aclose()
            finally:
                self.release(scenario, tmp_path)

    async def test_ok_returns_evidence_within_limit(self, ws: Workspace, tmp_path: Path) -> None:
        items = await self._run("ok", ws, tmp_path, limit=10)
        assert items, f"the ok scenario must find {NEEDLE} in both repos"
        assert {e.project for e in items} == {"alpha", "beta"}
        for e in items:
            assert isinstance(e, Evidence)
            project = next(p for p in ws.projects if p.name == e.project)
            assert safe_join(project, e.path) is not None and not is_excluded(e.path)
            assert 1 <= e.start_line <= e.end_line
            assert self.grounded(e, project), e  # only what the tool returned, nothing made up
            if self.exact:
                assert NEEDLE in e.content
        for name in ("alpha", "beta"):
            assert NEEDLE in next(e for e in items if e.project == name).content
        one = await self._run("ok", ws, tmp_path, limit=1)
        assert len(one) == 1

    async def test_plan_is_pure_and_json(self, ws: Workspace, tmp_path: Path) -> None:
        expert = self.make("ok", ws, tmp_path)
        try:
            q = query(ws, QUESTION)
            first, second = expert.plan(q), expert.plan(q)
            assert first == second  # the receipt's sub_query is what the expert will do, every time
            assert json.loads(json.dumps(first)) == first
        finally:
            await expert.aclose()

    async def test_declared_capabilities_hold(self, ws: Workspace, tmp_path: Path) -> None:
        expert = self.make("ok", ws, tmp_path)
        try:
            cls = type(expert)
            assert cls.adapter == self.adapter and expert.name
            assert cls.needs_index == isinstance(expert, IndexedExpert)  # the flag and the base agree
            assert not (cls.needs_index and cls.live)
            assert cls.default_freshness() in ("index", "live", "unknown")
            assert cls.settings_schema.get("type") == "object"
        finally:
            await expert.aclose()

    async def test_missing_is_unavailable(self, ws: Workspace, tmp_path: Path) -> None:
        self._applies("missing")
        with pytest.raises(ExpertUnavailable):
            await self._run("missing", ws, tmp_path)

    async def test_crash_is_internal(self, ws: Workspace, tmp_path: Path) -> None:
        self._applies("crash")
        with pytest.raises(ExpertFailed) as info:
            await self._run("crash", ws, tmp_path)
        assert info.value.status == "internal"

    async def test_stall_times_out_and_cleans_up(self, ws: Workspace, tmp_path: Path) -> None:
        self._applies("stall")
        started = time.perf_counter()
        with pytest.raises(TimeoutError):
            await self._run("stall", ws, tmp_path, deadline_s=STALL_DEADLINE_S)
        assert time.perf_counter() - started < STALL_DEADLINE_S + 5  # the deadline holds, close is prompt
        if self.marker:
            from tests.external_support import processes_with

            for _ in range(50):  # the process group is killed; give the kernel a moment to reap
                if not processes_with(self.marker):
                    break
                await anyio.sleep(0.1)
            assert processes_with(self.marker) == []

    async def test_malformed_output(self, ws: Workspace, tmp_path: Path) -> None:
        self._applies("malformed")
        with pytest.raises(ExpertOutputError):
            await self._run("malformed", ws, tmp_path)

    async def test_question_is_data_not_template(self, ws: Workspace, tmp_path: Path) -> None:
        # Jinja syntax in the question is never evaluated: it reaches the tool verbatim (no match here)
        items = await self._run("ok", ws, tmp_path, question='find "{{ 7*7 }}" and "{% raw %}"')
        assert all("49" not in e.content for e in items)


def grounded_commit(e: Evidence, project: Project) -> bool:
    """A commit item names a real commit of its project, and says what that commit's subject says."""
    sha = e.meta.get("sha", "")
    res = subprocess.run(["git", "log", "-1", "--format=%s", sha], cwd=project.root, capture_output=True, text=True)
    return e.kind == "commit" and res.returncode == 0 and res.stdout.strip() in e.content
