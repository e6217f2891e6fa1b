"""A pipeline as a validated networkx DAG, checked before anything runs.

Checks: every ``after:`` reference resolves, node ids are unique, the graph is acyclic, every
``kind`` is a registered node kind, each node's ``requires`` kinds are upstream of it, and each
node's own ``validate`` (experts and pipelines it names exist).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import networkx as nx

from .errors import GraphError
from .nodes import NODE_KINDS, Node
from .spec import ConfigSet, PipelineSpec, graph_error, line_of


@dataclass(frozen=True)
class PipelineGraph:
    spec: PipelineSpec
    graph: nx.DiGraph
    nodes: dict[str, Node]

    def order(self) -> list[str]:
        """A deterministic topological order (ties by node id)."""
        return list(self._order)

    # a graph is built once per config version and run for every request: derived views are kept
    @cached_property
    def _order(self) -> tuple[str, ...]:
        return tuple(nx.lexicographical_topological_sort(self.graph))

    @cached_property
    def predecessors(self) -> dict[str, tuple[str, ...]]:
        """Each node's ``after:`` nodes."""
        return {n: tuple(self.graph.predecessors(n)) for n in self.graph.nodes}

    @cached_property
    def successors(self) -> dict[str, tuple[str, ...]]:
        """The nodes that name each node in their ``after:``, in :meth:`order`."""
        rank = {n: i for i, n in enumerate(self._order)}
        return {n: tuple(sorted(self.graph.successors(n), key=rank.__getitem__)) for n in self.graph.nodes}


def build_graph(spec: PipelineSpec, config: ConfigSet) -> PipelineGraph:
    g = nx.DiGraph()
    nodes: dict[str, Node] = {}
    for i, n in enumerate(spec.nodes):
        if n.id in nodes:
            # graph_error locates the first node of that id: point at this one instead
            line = line_of(spec.file, ["nodes", i, "id"])
            raise GraphError(
                f"duplicate node id {n.id!r}",
                pipeline=spec.file.name,
                node_id=n.id,
                file=str(spec.file),
                line=line,
                path=f"nodes/{i}/id",
            )
        cls = NODE_KINDS.get(n.kind)
        if cls is None:
            raise graph_error(
                spec, f"node {n.id!r} has unknown kind {n.kind!r}; known kinds: {sorted(NODE_KINDS)}", n.id, "kind"
            )
        nodes[n.id] = cls(n)
        g.add_node(n.id)
    for n in spec.nodes:
        for j, dep in enumerate(n.after):
            if dep not in nodes:
                message = f"node {n.id!r} runs after unknown node {dep!r}; nodes: {sorted(nodes)}"
                raise graph_error(spec, message, n.id, "after", j)
            g.add_edge(dep, n.id)
    if not nx.is_directed_acyclic_graph(g):
        cycle = nx.find_cycle(g)
        message = f"pipeline has a cycle: {' → '.join(a for a, _ in cycle)} → {cycle[0][0]}"
        raise graph_error(spec, message, cycle[0][0], "after")
    for node_id, node in nodes.items():
        upstream_kinds = {nodes[a].kind for a in nx.ancestors(g, node_id)}
        missing = [k for k in node.requires if k not in upstream_kinds]
        if missing and not (node.kind == "classify"):
            raise graph_error(
                spec, f"node {node_id!r} ({node.kind}) needs a {' and a '.join(missing)} node upstream", node_id
            )
        node.check_settings_keys(spec)
        node.validate(config, spec)
    _check_one_end(spec, g, nodes)
    return PipelineGraph(spec, g, nodes)


def _check_one_end(spec: PipelineSpec, g: nx.DiGraph, nodes: dict[str, Node]) -> None:
    """Every node leads to the pipeline's end: its receipt node (at most one), or, in a pipeline
    run only through a dispatch (no receipt of its own), its one last node. A node off that path
    does work no answer shows — and a second fan-out raced the first for the same outcomes
    (an empty answer under a receipt saying every expert was fine)."""
    receipts = [node_id for node_id, node in nodes.items() if node.kind == "receipt"]
    if len(receipts) > 1:
        raise graph_error(spec, f"a pipeline has at most one receipt node; it has {len(receipts)}", receipts[1])
    ends = receipts or [n for n in g.nodes if g.out_degree(n) == 0]
    if len(ends) > 1:
        message = f"a pipeline without a receipt node ends in one node; {', '.join(map(repr, ends))} all end it"
        raise graph_error(spec, message, ends[1])
    if not ends:
        return
    feeding = nx.ancestors(g, ends[0]) | {ends[0]}
    for n in spec.nodes:
        if n.id not in feeding:
            raise graph_error(spec, f"node {n.id!r} has no path to the pipeline's end {ends[0]!r}", n.id)
