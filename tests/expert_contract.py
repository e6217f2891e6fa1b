"""The contract every expert adapter passes (cf. haystack's DocumentStore test mixins).

A subclass provides ``make(scenario, ws, tmp_path) -> Expert`` for the scenarios below and
inherits the tests. The deadline is enforced here exactly as the fan-out enforces it
(``anyio.fail_after`` around ``search`` inside ``expert_errors``).

| scenario  | the expert behind it                           | expected                     |
|-----------|------------------------------------------------|------------------------------|
| ok        | answers with real matches from the workspace   | Evidence, ≤ limit, in-bounds |
| missing   | server / binary / host is not there            | ExpertUnavailable            |
| crash     | dies mid-call                                  | ExpertFailed (internal)      |
| stall     | never answers                                  | TimeoutError at the deadline |
| malformed | answers with output that is not the promised   | ExpertOutputError            |
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from engine.errors import ExpertError, ExpertFailed, ExpertOutputError, ExpertUnavailable
from engine.experts.base import Expert, expert_errors
from engine.types import Evidence, Query
from engine.workspace import Workspace, is_excluded, safe_join
from tests.external_support import query

QUESTION = 'where is "PaymentGateway" defined'
STALL_DEADLINE_S = 1.5


async def call(expert: Expert, q: Query, deadline_s: float = 15.0) -> list[Evidence]:
    plan = expert.plan(q)
    with anyio.fail_after(deadline_s):
        with expert_errors(expert.name):
            return await expert.search(q, plan)


class ExpertContract:
    """Inherit, set ``marker`` (a string in the expert's process command line, if it spawns one)."""

    marker: str | None = None

    def make(self, scenario: str, ws: Workspace, tmp_path: Path) -> Expert:  # pragma: no cover - abstract
        raise NotImplementedError

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
            await expert.aclose()

    async def test_ok_returns_evidence_within_limit(self, ws: Workspace, tmp_path: Path) -> None:
        items = await self._run("ok", ws, tmp_path, limit=10)
        assert items, "the ok scenario must find PaymentGateway in both repos"
        assert {e.project for e in items} == {"alpha", "beta"}
        for e in items:
            assert isinstance(e, Evidence)
            project = next(p for p in ws.projects if p.name == e.project)
            assert safe_join(project, e.path) is not None and not is_excluded(e.path)
            assert 1 <= e.start_line <= e.end_line
            assert "PaymentGateway" in e.content  # only what the tool returned, nothing made up
        one = await self._run("ok", ws, tmp_path, limit=1)
        assert len(one) == 1

    async def test_missing_is_unavailable(self, ws: Workspace, tmp_path: Path) -> None:
        with pytest.raises(ExpertUnavailable):
            await self._run("missing", ws, tmp_path)

    async def test_crash_is_internal(self, ws: Workspace, tmp_path: Path) -> None:
        with pytest.raises(ExpertFailed) as info:
            await self._run("crash", ws, tmp_path)
        assert info.value.status == "internal"

    async def test_stall_times_out_and_cleans_up(self, ws: Workspace, tmp_path: Path) -> None:
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
        with pytest.raises(ExpertOutputError):
            await self._run("malformed", ws, tmp_path)

    async def test_question_is_data_not_template(self, ws: Workspace, tmp_path: Path) -> None:
        # Jinja syntax in the question is never evaluated: it reaches the tool verbatim (no match here)
        items = await self._run("ok", ws, tmp_path, question='find "{{ 7*7 }}" and "{% raw %}"')
        assert all("49" not in e.content for e in items)

    @staticmethod
    def classified(exc: BaseException) -> Any:
        return exc.status if isinstance(exc, ExpertError) else type(exc).__name__
