"""fanout: run the selected experts concurrently, each under its own deadline (DESIGN §6.3).

Each expert's deadline is planned from its recent p95 (an expert that is not one of the request's
leads, from the leads' p95) and capped by its ``timeout_ms`` and by what is left of
``budget.latency_ms`` (:mod:`engine.deadlines`; the receipt's ``per_expert.<e>.deadline`` has
both). A slow expert never blocks a fast one, and every failure becomes a classified
:class:`~engine.types.ExpertOutcome` (timeout · unavailable · internal · malformed · unconfigured
· skipped) with zero items. No silent retry. An expert that can hand back what it has
(``partial_results``) answers at its deadline with that: status ``partial``, items flagged
``partial``. With a budget, an expert whose p95 is far over what is left is not started
(``skipped``): it would only time out, and take CPU from those that can make it.

``settings.experts`` limits a fan-out node to some experts, so a pipeline can run two fan-outs
side by side (their outcomes merge; each expert runs in exactly one of them).

Lanes (sub-queries planned by ``decompose`` or ``expand``, :class:`~engine.nodes.base.Lane`) run
here too, beside the experts, each under its expert's deadline and kept under its lane key; a
fan-out runs the lanes no earlier fan-out ran (``settings.lanes: false``: none).

``settings.early_exit`` leaves the costly experts out once high-precision experts agree on a
definition (:mod:`engine.nodes.early_exit`): they are cancelled (or their answer dropped, so the
outcome never depends on timing) and reported ``skipped`` (``error_class: early_exit``).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import anyio

from ..deadlines import BUDGET_TAIL_MS, TAIL, Deadline, lead_p95, plan, reserve
from ..errors import ExpertError, ExpertTimeout, ExpertUnconfigured
from ..experts.base import Expert, Found, expert_errors
from ..index.build import Heads
from ..screen import TRUSTED_CONTENT, Screened, screen
from ..secrets import NotJudged, policy_for
from ..spec import ConfigSet, PipelineSpec
from ..types import Evidence, ExpertOutcome, Query
from .base import Node, RunState, node_kind
from .early_exit import EarlyExit


def build_query(state: RunState) -> Query:
    c = state.classification
    assert c is not None
    projects = state.workspace.scoped_projects(state.request.scope, dict(state.config.priors.groups))
    fusion = state.config.priors.fusion
    if state.heads is None:  # once per run: every index-backed expert compares its HEADs with these
        state.heads = Heads(projects)
    return Query(
        question=state.question,
        klass=c.klass,
        features=c.features,
        scope=state.request.scope,
        projects=projects,
        limit=max(fusion.overfetch, state.request.limit),
        heads=state.heads,
    )


@node_kind
class FanoutNode(Node):
    kind = "fanout"
    settings_keys = frozenset({"experts", "lanes", "early_exit"})
    requires = ("gate",)

    def validate(self, config: ConfigSet, pipeline: PipelineSpec) -> None:
        self._check_experts(self.settings.get("experts"), config, pipeline, "experts")
        if "early_exit" in self.settings:
            try:
                EarlyExit.from_settings(self.settings["early_exit"])
            except (TypeError, ValueError) as exc:
                raise self.invalid(pipeline, f"settings.early_exit: {exc}") from None
            self._check_experts(self.settings["early_exit"].get("experts"), config, pipeline, "early_exit.experts")
            self._check_experts(self.settings["early_exit"].get("skip"), config, pipeline, "early_exit.skip")

    async def run(self, state: RunState) -> None:
        assert state.selection is not None  # guaranteed by `requires`
        only = self.settings.get("experts")
        names = [n for n in state.selection.experts if (not only or n in only) and n not in state.outcomes]
        lanes = [
            lane
            for lane in state.lanes.values()
            if self.settings.get("lanes", True)
            and lane.key not in state.outcomes
            and (not only or lane.expert in only)
            and state.config.experts[lane.expert].enabled
        ]
        query = build_query(state)
        exit_rule = EarlyExit.from_settings(self.settings["early_exit"]) if "early_exit" in self.settings else None
        jobs = [(n, n, query) for n in names] + [(lane.key, lane.expert, lane.query) for lane in lanes]
        # the slowest first (recent p95): the others start while it runs, not before it (issue 10)
        p95 = state.services.latency_p95
        jobs.sort(key=lambda job: -(p95(job[1]) or 0.0))
        leads, slowest_lead = lead_p95(state.selection.experts, state.services.latency_p95)
        if state.request.budget.latency_ms is not None and state.reserve_ms is None:
            state.reserve_ms = reserve(state.request.budget.latency_ms, state.services.latency_p95(TAIL))
        scopes = {key: anyio.CancelScope() for key, _, _ in jobs}
        finished: set[str] = set()
        decided = exit_rule is None

        async def one(key: str, expert: str, q: Query) -> None:
            nonlocal decided
            if scopes[key].cancel_called:
                return  # the fan-out already ended early: never started
            with scopes[key]:
                await self._one(state, key, q, expert, None if expert in leads else slowest_lead)
            if scopes[key].cancel_called:
                return
            finished.add(key)
            if decided:
                return
            assert exit_rule is not None
            running = [k for k, _, _ in jobs if k not in finished]
            why = exit_rule.agreed(state.outcomes, running)
            if why is None:
                # decided (no exit) once every listed expert has answered without agreeing
                decided = not any(name in exit_rule.experts for k, name, _ in jobs if k in running)
                return
            decided = True
            skipped = []
            for other, name, _ in jobs:
                if not exit_rule.skips(name):
                    continue
                scopes[other].cancel()
                spec = state.config.experts[name]
                outcome = state.outcomes.setdefault(
                    other,
                    ExpertOutcome(expert=name, precision_class=spec.precision_class, status="ok", sub_query={}),
                )
                EarlyExit.mark_skipped(outcome, why)
                skipped.append(other)
            if skipped:
                state.trace.append({"node": self.id, "early_exit": why, "skipped": sorted(skipped)})

        try:
            async with anyio.create_task_group() as tg:
                for key, expert, q in jobs:
                    tg.start_soon(one, key, expert, q)
        finally:
            state.fanout_end = state.services.clock()
        return None

    async def _one(self, state: RunState, key: str, query: Query, name: str, lead_p95_ms: float | None) -> None:
        spec = state.config.experts[name]
        outcome = ExpertOutcome(expert=name, precision_class=spec.precision_class, status="ok", sub_query={})
        state.outcomes[key] = outcome  # registered first, so even a crash leaves a row in the receipt
        clock = state.services.clock
        started = clock()
        try:
            expert = state.services.expert(name)
            with expert_errors(name):
                outcome.sub_query = expert.plan(query)
            deadline = plan(
                spec.timeout_ms,
                state.services.latency_p95(name),
                state.deadline_ms(),
                partial_results=expert.partial_results,
                lead_p95_ms=lead_p95_ms,
                reserve_ms=state.reserve_ms if state.reserve_ms is not None else BUDGET_TAIL_MS,
            )
            outcome.deadline = deadline.to_receipt()
            if deadline.skip:
                outcome.status, outcome.error_class, outcome.error = "skipped", "over_budget", deadline.skip
                return
            items = await self._search(state, expert, query, outcome, deadline)
            if outcome.error_class == "early_exit":
                # left out while its answer was on the way: a task whose awaited result is already
                # in is not cancelled, and (screen verdicts cached) it reaches here without a checkpoint
                return
            if outcome.status == "ok":
                with expert_errors(name):
                    outcome.freshness = expert.freshness(query)
                missing = (outcome.freshness or {}).get("not_indexed")
                if missing:  # its "nothing found" would not be an answer for these projects
                    whole = len(missing) >= sum(p.is_git for p in query.projects)
                    outcome.status = "unavailable" if whole else "partial"
                    outcome.error_class = "unavailable" if whole else None
                    outcome.error = f"not indexed for {', '.join(missing)}: run `engine index` on this workspace"
            outcome.items = list(items)[: query.limit]
        except ExpertUnconfigured as exc:
            outcome.status, outcome.error_class, outcome.error = exc.status, exc.code, exc.message
        except ExpertError as exc:
            outcome.status, outcome.error_class, outcome.error = exc.status, exc.code, exc.message
            outcome.items = []
            if spec.adapter not in TRUSTED_CONTENT and outcome.error:
                # an external tool's error text (an HTTP body, stderr) goes into the signed, stored
                # receipt: it is read for secrets as any external text is (found by an exploratory run)
                policy = policy_for(state.workspace.data_dir, state.config.raw_experts)
                outcome.error = policy.redact(outcome.error)[0]
        finally:
            outcome.latency_ms = (clock() - started) * 1000

    async def _search(
        self, state: RunState, expert: Expert, query: Query, outcome: ExpertOutcome, deadline: Deadline
    ) -> list[Evidence]:
        """The expert's screened items by its deadline: all of them, or (``partial_results``) what it
        had found when the deadline came."""
        name = outcome.expert
        found = Found()
        try:
            with anyio.fail_after(deadline.actual_ms / 1000):
                with expert_errors(name):
                    items = await expert.search_partial(query, outcome.sub_query, found)
                    screened = await _screen(state, expert, items, query)
        except TimeoutError:
            items = found.collect() if expert.partial_results else []
            if not items:
                raise ExpertTimeout(f"no answer within {deadline.actual_ms:.0f} ms", expert=name) from None
            # past the deadline: only files already judged are served (a content scan waits for nobody)
            screened = _screen_judged(state, expert, items, query)
            outcome.status = "partial"
            outcome.error = f"deadline {deadline.actual_ms:.0f} ms: answered with what it had found"
        outcome.withheld = dict(screened.counts)
        return screened.items


def _screen_cached(state: RunState, expert: Expert, items: Sequence[Evidence], query: Query) -> Screened | None:
    """The screen on the event loop, when it needs no content scan (engine.screen), else None."""
    if expert.spec.adapter not in TRUSTED_CONTENT:
        return None
    policy = policy_for(state.workspace.data_dir, state.config.raw_experts)
    try:
        return screen(
            items,
            query.projects,
            policy,
            adapter=expert.spec.adapter,
            data_dir=state.workspace.data_dir,
            cached_only=True,
            memo=state.file_verdicts,
        )
    except NotJudged:
        return None


async def _screen(state: RunState, expert: Expert, items: Sequence[Evidence], query: Query) -> Screened:
    """Containment + secrets policy, for every expert alone (engine/screen.py): on the event loop
    when every verdict is cached, else in a worker thread (a content scan can take a while)."""
    screened = _screen_cached(state, expert, items, query)
    if screened is None:
        policy = policy_for(state.workspace.data_dir, state.config.raw_experts)
        data_dir, adapter, memo = state.workspace.data_dir, expert.spec.adapter, state.file_verdicts
        screened = await anyio.to_thread.run_sync(
            partial(screen, items, query.projects, policy, adapter=adapter, data_dir=data_dir, memo=memo),
            abandon_on_cancel=True,
        )
        # the new verdicts are saved by Router.flush, after the answer: a save here (a thread
        # serialising the whole verdict cache) took the GIL from the fusion nodes for ~4 ms
    return screened


def _screen_judged(state: RunState, expert: Expert, items: Sequence[Evidence], query: Query) -> Screened:
    """The screen for partial items, past the deadline: those whose file has no cached verdict, and
    every item of an adapter whose snippets must be scanned (engine.screen.TRUSTED_CONTENT), are
    dropped (counted ``unjudged``) instead of scanned."""
    out = Screened()
    for e in items:
        one = _screen_cached(state, expert, [e], query)
        if one is None:
            out.counts["unjudged"] += 1
        else:
            out.items.extend(one.items)
            out.counts.update(one.counts)
    return out
