"""fanout: run the selected experts concurrently, each under its own deadline (DESIGN §6.3).

Each expert gets ``min(timeout_ms, time left in budget.latency_ms)``; a slow expert never
blocks a fast one, and every failure becomes a classified :class:`~engine.types.ExpertOutcome`
(timeout · unavailable · internal · malformed · unconfigured) with zero items. No silent retry.

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

from functools import partial

import anyio

from ..errors import ExpertError, ExpertTimeout, ExpertUnconfigured
from ..experts.base import expert_errors
from ..screen import screen
from ..secrets import policy_for
from ..spec import ConfigSet, PipelineSpec
from ..types import ExpertOutcome, Query
from .base import Node, RunState, node_kind
from .early_exit import EarlyExit

#: the part of ``budget.latency_ms`` kept for what follows the fan-out deadline: killing the
#: late experts' process trees, scoring, fusion, signing and spooling the receipt. Measured by
#: benchmarks/budget_overrun.py (numbers in docs/security.md): p99 overrun 15 ms at 1,000 ms.
BUDGET_TAIL_MS = 25.0


def build_query(state: RunState) -> Query:
    c = state.classification
    assert c is not None
    projects = state.workspace.scoped_projects(state.request.scope, dict(state.config.priors.groups))
    fusion = state.config.priors.fusion
    return Query(
        question=state.request.question,
        klass=c.klass,
        features=c.features,
        scope=state.request.scope,
        projects=projects,
        limit=max(fusion.overfetch, state.request.limit),
    )


@node_kind
class FanoutNode(Node):
    kind = "fanout"
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
        scopes = {key: anyio.CancelScope() for key, _, _ in jobs}
        finished: set[str] = set()
        decided = exit_rule is None

        async def one(key: str, expert: str, q: Query) -> None:
            nonlocal decided
            if scopes[key].cancel_called:
                return  # the fan-out already ended early: never started
            with scopes[key]:
                await self._one(state, key, q, expert)
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
                state.trace.append({"node": self.id, "early_exit": why, "skipped": skipped})

        async with anyio.create_task_group() as tg:
            for key, expert, q in jobs:
                tg.start_soon(one, key, expert, q)
        return None

    async def _one(self, state: RunState, key: str, query: Query, name: str) -> None:
        spec = state.config.experts[name]
        outcome = ExpertOutcome(expert=name, precision_class=spec.precision_class, status="ok", sub_query={})
        state.outcomes[key] = outcome  # registered first, so even a crash leaves a row in the receipt
        clock = state.services.clock
        started = clock()
        try:
            expert = state.services.expert(name)
            with expert_errors(name):
                outcome.sub_query = expert.plan(query)
            left = state.deadline_ms()
            if left is not None:  # the budget is end to end: leave the tail (kill, fuse, sign) its time
                left -= BUDGET_TAIL_MS
            timeout_ms = spec.timeout_ms if left is None else max(1.0, min(spec.timeout_ms, left))
            try:
                with anyio.fail_after(timeout_ms / 1000):
                    with expert_errors(name):
                        items = await expert.search(query, outcome.sub_query)
                        # containment + secrets policy, for every expert alone (engine/screen.py)
                        policy = policy_for(state.workspace.data_dir, state.config.raw_experts)
                        screened = await anyio.to_thread.run_sync(
                            partial(
                                screen,
                                items,
                                query.projects,
                                policy,
                                adapter=spec.adapter,
                                data_dir=state.workspace.data_dir,
                            ),
                            abandon_on_cancel=True,
                        )
                        items, outcome.withheld = screened.items, dict(screened.counts)
                        policy.save_soon()
            except TimeoutError:
                raise ExpertTimeout(f"no answer within {timeout_ms:.0f} ms", expert=name) from None
            with expert_errors(name):
                outcome.freshness = expert.freshness(query)
            outcome.items = list(items)[: query.limit]
        except ExpertUnconfigured as exc:
            outcome.status, outcome.error_class, outcome.error = exc.status, exc.code, exc.message
        except ExpertError as exc:
            outcome.status, outcome.error_class, outcome.error = exc.status, exc.code, exc.message
            outcome.items = []
        finally:
            outcome.latency_ms = (clock() - started) * 1000
