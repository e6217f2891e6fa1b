"""Run a validated pipeline graph: one anyio task group per run, nodes start when their inputs are ready.

Readiness comes from the graph: one ``anyio.Event`` per node, set when it finishes (whatever
the outcome). A node whose upstream failed is skipped, except finalizers (the receipt), which
always run. The first :class:`~engine.errors.EngineError` is kept on the state; anything else a
node raises is wrapped in :class:`~engine.errors.NodeError` (failures become values, never a
half-cancelled task group).
"""

from __future__ import annotations

import anyio

from .errors import EngineError, NodeError
from .graph import PipelineGraph
from .nodes.base import RunState


async def run_graph(pg: PipelineGraph, state: RunState) -> None:
    done = {n: anyio.Event() for n in pg.graph.nodes}
    failed: set[str] = set()

    async def run_node(node_id: str) -> None:
        preds = list(pg.graph.predecessors(node_id))
        for p in preds:
            await done[p].wait()
        node = pg.nodes[node_id]
        try:
            if any(p in failed for p in preds) and not node.finalizer:
                failed.add(node_id)
                return
            try:
                await node.run(state)
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
