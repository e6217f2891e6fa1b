"""Run a validated pipeline graph: one anyio task group per run, nodes start when their inputs are ready.

Readiness comes from the graph: one ``anyio.Event`` per node, set when it finishes (whatever
the outcome). A node whose upstream failed is skipped, except finalizers (the receipt), which
always run. The first :class:`~engine.errors.EngineError` is kept on the state; anything else a
node raises is wrapped in :class:`~engine.errors.NodeError` (failures become values, never a
half-cancelled task group).

Nodes steer the run only through the directives they return (:mod:`engine.nodes.base`): a
:class:`~engine.nodes.base.RunPipeline` is run here, on the same state, before the node counts
as done; a :class:`~engine.nodes.base.Skip` marks nodes downstream as skipped.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
import networkx as nx

from .errors import EngineError, GraphError, NodeError
from .graph import PipelineGraph
from .nodes.base import Directive, RunPipeline, RunState, Skip

#: how the scheduler finds the graph of a pipeline a node asks it to run (the runtime's graph cache)
GraphLoader = Callable[[str], PipelineGraph]


async def run_graph(pg: PipelineGraph, state: RunState, load: GraphLoader) -> None:
    done = {n: anyio.Event() for n in pg.graph.nodes}
    failed: set[str] = set()
    skipped: set[str] = set()

    def skip(node_id: str, directive: Skip) -> None:
        named = set(directive.nodes)
        if directive.descendants:
            named |= set(nx.descendants(pg.graph, node_id))
        skipped.update(n for n in named if n in pg.nodes and not pg.nodes[n].finalizer)

    async def run_node(node_id: str) -> None:
        preds = pg.predecessors[node_id]
        for p in preds:
            await done[p].wait()
        node = pg.nodes[node_id]
        try:
            if node.finalizer:
                pass  # a finalizer always runs: no request goes unlogged
            elif node_id in skipped or (preds and all(p in skipped for p in preds)):
                skipped.add(node_id)
                return
            elif any(p in failed for p in preds):
                failed.add(node_id)
                return
            try:
                started = state.services.clock()
                directive = await node.run(state)
                # what each node cost (a sub-pipeline it ran is counted in its own nodes, not here)
                state.node_ms[f"{pg.spec.name}.{node_id}"] = round((state.services.clock() - started) * 1000, 2)
                await _follow(node_id, directive, state, load, skip)
            except EngineError as exc:
                failed.add(node_id)
                if state.error is None:
                    state.error = exc
            except Exception as exc:  # noqa: BLE001 - a node bug is reported, never a silent half-run
                failed.add(node_id)
                if state.error is None:
                    state.error = NodeError.from_exception(node_id, node.kind, exc)
        finally:
            done[node_id].set()

    state.pipelines_run.append(pg.spec.name)
    async with anyio.create_task_group() as tg:
        for node_id in pg.order():
            tg.start_soon(run_node, node_id)


async def _follow(
    node_id: str, directive: Directive | None, state: RunState, load: GraphLoader, skip: Callable[[str, Skip], None]
) -> None:
    if isinstance(directive, RunPipeline):
        if directive.name in state.pipelines_run:  # A → B → A would never end
            path = " → ".join([*state.pipelines_run, directive.name])
            raise GraphError(
                f"pipelines dispatch in a cycle: {path}", pipeline=state.pipeline.file.name, node_id=node_id
            )
        await run_graph(load(directive.name), state, load)
    elif isinstance(directive, Skip):
        skip(node_id, directive)
