"""The source of truth for what a pipeline node is and what it may touch.

A node is a small class registered under a short ``kind`` (never an import path) with
:func:`node_kind`. It is built from its YAML ``settings`` (cheap, validated by
``validate(config)`` before anything runs) and runs as ``async run(state)``.

Nodes communicate through one :class:`RunState` per request, each kind writing the field it
owns and reading only fields of kinds it declares in ``requires`` (checked at graph load:
a ``fuse`` node needs a ``fanout`` upstream). The scheduler runs a node as soon as every node
in its ``after:`` list finished; independent nodes (two fan-outs) run concurrently.

A node that raises an :class:`~engine.errors.EngineError` stops the nodes downstream of it,
except ``finalizer`` nodes (the receipt), which always run so that no request goes unlogged.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..errors import EngineError, SpecError
from ..spec import ConfigSet, NodeSpec, PipelineSpec
from ..types import Classification, ExpertOutcome, Request
from ..workspace import Workspace


@dataclass
class Selection:
    """The gate's decision: which experts run, with which weights, and why each did or did not."""

    experts: dict[str, float]  # name → prior weight
    reasons: dict[str, str]  # every expert of experts.yaml → why it was or was not selected
    single_expert: bool = False


@dataclass
class FusedItem:
    item: dict[str, Any]  # the response item, JSON-safe
    score: float


@dataclass
class RunState:
    request: Request
    config: ConfigSet
    pipeline: PipelineSpec
    workspace: Workspace
    config_version: str
    services: Any  # engine.runtime.Services: expert pool, store, signing key (typed there)
    started: float = field(default_factory=time.perf_counter)
    created_at: str = ""
    pipelines_run: list[str] = field(default_factory=list)
    classification: Classification | None = None
    selection: Selection | None = None
    outcomes: dict[str, ExpertOutcome] = field(default_factory=dict)
    scored: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    fused: list[FusedItem] = field(default_factory=list)
    fusion_info: dict[str, Any] = field(default_factory=dict)
    confidence: dict[str, Any] = field(default_factory=dict)
    cache: dict[str, Any] = field(default_factory=lambda: {"hit": False, "key": None})
    cached_response: dict[str, Any] | None = None
    error: EngineError | None = None
    receipt: dict[str, Any] | None = None
    response: dict[str, Any] | None = None

    def elapsed_ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000

    def deadline_ms(self) -> float | None:
        """Time left in the caller's latency budget, if one was given."""
        if self.request.budget.latency_ms is None:
            return None
        return self.request.budget.latency_ms - self.elapsed_ms()


class Node(ABC):
    kind: ClassVar[str] = ""
    requires: ClassVar[tuple[str, ...]] = ()  # kinds that must be upstream
    finalizer: ClassVar[bool] = False

    def __init__(self, spec: NodeSpec) -> None:
        self.id = spec.id
        self.settings: Mapping[str, Any] = spec.settings

    def validate(self, config: ConfigSet, pipeline: PipelineSpec) -> None:
        """Raise SpecError when settings name experts, pipelines or values that do not exist."""
        return None  # most kinds have nothing to check beyond the graph itself

    @abstractmethod
    async def run(self, state: RunState) -> None:
        """Do this node's part of the run, reading and writing only the fields of ``state`` it owns."""

    def _check_experts(self, names: Any, config: ConfigSet, pipeline: PipelineSpec, key: str) -> None:
        for name in names or ():
            if name not in config.experts:
                raise SpecError(
                    f"{pipeline.file.name}: node {self.id!r} settings.{key} names unknown expert "
                    f"{name!r}; experts.yaml defines {sorted(config.experts)}"
                )


NODE_KINDS: dict[str, type[Node]] = {}


def node_kind(cls: type[Node]) -> type[Node]:
    NODE_KINDS[cls.kind] = cls
    return cls
