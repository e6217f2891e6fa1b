"""Run a validated pipeline graph: one anyio task group per run, nodes start when their inputs are ready.

Readiness comes from the graph: a node is ready once every node it comes ``after:`` has
finished (whatever the outcome). When it is the only node ready and none is running, it runs
right in the scheduler's task (a chain of nodes costs no task hops: 12 chained tasks took
0.18 ms against 0.03 ms inline, per request, after the slowest expert — issue 10); nodes ready
together run as concurrent tasks (two fan-outs side by side overlap). A node whose upstream
failed is skipped, except finalizers (the receipt), which always run. The first
:class:`~engine.errors.EngineError` is kept on the state; anything else a node raises is
wrapped in :class:`~engine.errors.NodeError` (failures become values, never a half-cancelled
task group).

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
    failed: set[str] = set()
    skipped: set[str] = set()
    waiting = {n: len(p) for n, p in pg.predecessors.items()}
    ready = [n for n in pg.order() if not waiting[n]]

    def skip(node_id: str, directive: Skip) -> None:
        named = set(directive.nodes)
        if directive.descendants:
            named |= set(nx.descendants(pg.graph, node_id))
        skipped.update(n for n in named if n in pg.nodes and not pg.nodes[n].finalizer)

    def finished(node_id: str) -> None:
        for s in pg.successors[node_id]:
            waiting[s] -= 1
            if not waiting[s]:
                ready.append(s)

    async def run_node(node_id: str) -> None:
        preds = pg.predecessors[node_id]
        node = pg.nodes[node_id]
        if not node.finalizer:  # a finalizer always runs: no request goes unlogged
            if node_id in skipped or (preds and all(p in skipped for p in preds)):
                skipped.add(node_id)
                return
            if any(p in failed for p in preds):
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

    state.pipelines_run.append(pg.spec.name)
    done_send, done_recv = anyio.create_memory_object_stream[str](len(pg.nodes))

    async def task(node_id: str) -> None:
        try:
            await run_node(node_id)
        finally:
            done_send.send_nowait(node_id)  # buffered for every node: never blocks

    running = 0
    with done_send, done_recv:
        async with anyio.create_task_group() as tg:
            while ready or running:
                if len(ready) == 1 and not running:
                    node_id = ready.pop()
                    await run_node(node_id)
                    finished(node_id)
                    continue
                for node_id in ready:
                    tg.start_soon(task, node_id, name=f"{pg.spec.name}.{node_id}")
                running += len(ready)
                ready.clear()
                finished(await done_recv.receive())
                running -= 1


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
