"""The source of truth for what a pipeline node is, what it may touch and what it may ask for.

**A node** is a small class registered under a short ``kind`` (never an import path) with
:func:`node_kind`. It is built from its YAML ``settings`` (cheap, validated by
``validate(config, pipeline)`` before anything runs; a bad setting raises
:class:`~engine.errors.GraphError` naming the pipeline and node) and runs as
``async run(state) -> Directive | None``.

**Data.** Nodes communicate through one :class:`RunState` per request, each kind writing the
field it owns and reading only fields of kinds it declares in ``requires`` (checked at graph
load: a ``fuse`` node needs a ``score`` upstream). Payloads are typed and frozen
(:mod:`engine.items`): the score node writes :class:`~engine.items.ScoredItem` lists, the fuse
node :class:`~engine.items.AnswerItem` s.

**The runtime.** What a node may ask of the runtime that runs it is :class:`Services` and
nothing else: an expert instance and its recent latency, the answer cache, the clock, and the
one call that signs and stores a receipt. Nodes never call back into the runtime or the scheduler to run more of the
graph; they *return* a directive and the scheduler acts on it, so control flows one way
(runtime → scheduler → nodes → experts/store → spec/types).

**Directives** (what ``run`` may return; ``None`` means "carry on"):

* :class:`RunPipeline` — run another pipeline (by name) on this same state before anything
  downstream of this node starts. ``dispatch`` uses it to hand a classified question to its
  class pipeline; the receipt then shows the whole path (``router → identifier``).
* :class:`Skip` — do not run some nodes downstream of this one. ``Skip(descendants=True)``
  skips every node downstream except finalizers (the ``cache`` node on a hit: fan-out, score
  and fuse are skipped, the receipt still runs); ``Skip(nodes={...})`` skips the named nodes,
  and a node *all* of whose predecessors were skipped is skipped too — so a branch node can skip
  the head of the branch it does not take and the rest of that branch follows, while a join
  node with one live predecessor still runs. A skipped node is not a failure: its successors
  become ready as usual, and the receipt records nothing for it.

**Lanes.** A node may plan *sub-queries*: one expert asked one part of the question
(``decompose``: a path, the identifiers, a quoted message; ``expand``: names found in the first
answer). Each is a :class:`Lane` in ``state.lanes`` keyed ``<expert>:<part>``; the next ``fanout``
runs the lanes it has not run yet beside the gate's experts, their outcomes are kept under the lane
key (so the receipt's ``per_expert`` and ``sub_queries`` show every lane), and fusion weighs each
lane with its own weight. Branch nodes and sub-query planners note what they decided in
``state.trace`` (the receipt's ``trace``).

**Scheduling.** A node runs as soon as every node in its ``after:`` list finished (ran, failed
or was skipped); independent nodes (two fan-outs) run concurrently. A node that raises an
:class:`~engine.errors.EngineError` stops the nodes downstream of it, except ``finalizer``
nodes (the receipt), which always run so that no request goes unlogged.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from ..bandit import Bandit, Draw
from ..errors import EngineError, GraphError
from ..experts.base import Expert
from ..hints import HINT_LANE, HintBook, HintPlan
from ..index.build import Heads
from ..items import AnswerItem, CachedAnswer, Confidence, ScoredItem
from ..spec import ConfigSet, NodeSpec, PipelineSpec, graph_error
from ..types import Classification, ExpertOutcome, Query, Request
from ..workspace import Workspace


class Services(Protocol):
    """What a node may ask of its runtime (implemented by :class:`engine.runtime.Router`)."""

    def clock(self) -> float:
        """Monotonic seconds; budgets and latencies are measured on it."""
        ...

    def expert(self, name: str) -> Expert:
        """The ready instance of an expert of experts.yaml (sessions are reused across runs)."""
        ...

    def latency_p95(self, expert: str) -> float | None:
        """The expert's recent p95 latency in ms (None without enough history); a dict lookup,
        kept fresh off the hot path (:class:`engine.deadlines.LatencyModel`)."""
        ...

    def cache_key(self, request: Request, config_version: str) -> str:
        """The answer-cache key: config, request, workspace, HEADs and index states."""
        ...

    def cached_answer(self, key: str) -> CachedAnswer | None:
        """A fresh cached answer for ``key``, or None (a busy store is a miss, never a wait)."""
        ...

    def hint_book(self) -> HintBook:
        """What earlier answers taught (engine.hints), in memory: lookups are dict reads."""
        ...

    def bandit(self) -> Bandit:
        """The feedback bandit's arms (engine.bandit), in memory: draws are reads."""
        ...

    def store_receipt(self, receipt: dict[str, Any]) -> dict[str, Any]:
        """Sign ``receipt`` and store it (written now, fsync'ed after the answer); return the signed receipt.

        Raises:
            ReceiptError: it could not be signed or stored (the request then fails: no unlogged path).
        """
        ...


@dataclass(frozen=True, slots=True)
class RunPipeline:
    """Directive: run the pipeline ``name`` on this state before this node's successors."""

    name: str


@dataclass(frozen=True, slots=True)
class Skip:
    """Directive: do not run ``nodes`` (and, with ``descendants``, every non-finalizer downstream)."""

    nodes: frozenset[str] = frozenset()
    descendants: bool = False


Directive = RunPipeline | Skip


@dataclass
class Selection:
    """The gate's decision: which experts run, with which weights, and why each did or did not."""

    experts: dict[str, float]  # name → prior weight
    reasons: dict[str, str]  # every expert of experts.yaml → why it was or was not selected
    single_expert: bool = False


@dataclass(frozen=True, slots=True)
class Lane:
    """A sub-query: ``expert`` asked ``query`` (one part of the question); its own list in fusion."""

    key: str  # "<expert>:<part>": the outcome's key, the receipt's per_expert / sub_queries key
    expert: str
    part: str  # what was asked: paths, identifiers, literals, title, references, definitions, …
    query: Query
    weight: float  # its weight in fusion (the gate's priors weigh the whole-question experts)
    node: str  # the node that planned it

    def to_receipt(self) -> dict[str, Any]:
        return {"expert": self.expert, "part": self.part, "node": self.node, "weight": self.weight}


@dataclass
class RunState:
    request: Request
    config: ConfigSet
    pipeline: PipelineSpec
    workspace: Workspace
    config_version: str
    services: Services
    started: float
    created_at: str = ""
    pipelines_run: list[str] = field(default_factory=list)
    classification: Classification | None = None
    selection: Selection | None = None
    lanes: dict[str, Lane] = field(default_factory=dict)  # sub-queries planned, by key
    outcomes: dict[str, ExpertOutcome] = field(default_factory=dict)  # by expert name or lane key
    scored: dict[str, list[ScoredItem]] = field(default_factory=dict)
    fused: list[AnswerItem] = field(default_factory=list)
    separate: dict[str, dict[str, Any]] = field(default_factory=dict)  # mode=separate: expert → its list
    fusion_info: dict[str, Any] = field(default_factory=dict)
    confidence: Confidence | None = None
    cache: dict[str, Any] = field(default_factory=lambda: {"hit": False, "key": None})
    heads: Heads | None = None  # git HEAD per project in scope, read once when first needed
    file_verdicts: dict[tuple[str, str], str | None] = field(default_factory=dict)  # engine.screen memo
    reserve_ms: float | None = None  # with a budget: what the fan-out kept for after its deadline
    fanout_end: float | None = None  # clock() when the (last) fan-out ended
    error: EngineError | None = None
    receipt: dict[str, Any] | None = None
    trace: list[dict[str, Any]] = field(default_factory=list)  # branch decisions, sub-query plans
    hints: HintPlan | None = None  # the hints node's lookup: the hint lane, skips the gate applied
    bandit: Draw | None = None  # the gate's bandit draw (priors.yaml bandit.enabled)
    node_ms: dict[str, float] = field(default_factory=dict)  # "<pipeline>.<node>" → its run time

    @property
    def question(self) -> str:
        """What the experts search and the nodes read: the request's question, without what the
        classifier ignored in it (embedded instructions, classifier.yaml ``ignore``); the receipt
        keeps the request as asked."""
        c = self.classification
        return c.routed if c is not None and c.routed else self.request.question

    def weights(self) -> dict[str, float]:
        """Fusion weights: the gate's per-expert priors, then each lane's own weight."""
        out = dict(self.selection.experts) if self.selection else {}
        out.update({key: lane.weight for key, lane in self.lanes.items()})
        if self.hints is not None and self.hints.lane:
            out[HINT_LANE] = self.hints.weight
        return out

    def elapsed_ms(self) -> float:
        return (self.services.clock() - self.started) * 1000

    def deadline_ms(self) -> float | None:
        """Time left in the caller's latency budget, if one was given."""
        if self.request.budget.latency_ms is None:
            return None
        return self.request.budget.latency_ms - self.elapsed_ms()


class Node(ABC):
    kind: ClassVar[str] = ""
    requires: ClassVar[tuple[str, ...]] = ()  # kinds that must be upstream
    finalizer: ClassVar[bool] = False
    #: the settings this kind reads: any other key is a typo the graph check names (``expert:``
    #: for ``experts:`` ran every expert, silently)
    settings_keys: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, spec: NodeSpec) -> None:
        self.id = spec.id
        self.settings: Mapping[str, Any] = spec.settings

    def validate(self, config: ConfigSet, pipeline: PipelineSpec) -> None:
        """Raise GraphError when settings name experts, pipelines or values that do not exist."""
        return None  # most kinds have nothing to check beyond the graph itself

    @abstractmethod
    async def run(self, state: RunState) -> Directive | None:
        """Do this node's part of the run, reading and writing only the fields of ``state`` it owns."""

    def check_settings_keys(self, pipeline: PipelineSpec) -> None:
        unknown = sorted(set(self.settings) - self.settings_keys)
        if unknown:
            known = sorted(self.settings_keys)
            raise self.invalid(pipeline, f"unknown settings {unknown}; known: {known or 'none'}", unknown[0])

    def invalid(self, pipeline: PipelineSpec, message: str, *setting: Any) -> GraphError:
        """The error for a bad setting of this node, naming the pipeline file, the line of the node
        (of ``settings/<setting…>`` when given, e.g. ``"routes", "docs"``) and the node."""
        field = ("settings", *setting) if setting else ()
        return graph_error(pipeline, f"node {self.id!r} ({self.kind}): {message}", self.id, *field)

    def _check_experts(self, names: Iterable[str] | None, config: ConfigSet, pipeline: PipelineSpec, key: str) -> None:
        for name in names or ():
            if name not in config.experts:
                raise self.invalid(
                    pipeline,
                    f"settings.{key} names unknown expert {name!r}; experts.yaml defines {sorted(config.experts)}",
                    key,
                )


NODE_KINDS: dict[str, type[Node]] = {}


def node_kind(cls: type[Node]) -> type[Node]:
    NODE_KINDS[cls.kind] = cls
    return cls
