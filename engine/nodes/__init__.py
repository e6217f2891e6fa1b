"""The closed set of node kinds a pipeline may use (``kind:`` in YAML), listed in one place."""

from .aggregate import AggregateNode
from .base import NODE_KINDS, Directive, Lane, Node, RunPipeline, RunState, Selection, Services, Skip
from .cache import CacheNode
from .classify import ClassifyNode
from .decompose import DecomposeNode
from .dispatch import DispatchNode
from .expand import ExpandNode
from .fanout import FanoutNode
from .fuse import FuseNode
from .gate import GateNode
from .hints import HintsNode
from .receipt import ReceiptNode
from .rerank import RerankNode
from .score import ScoreNode
from .when import WhenNode

__all__ = [
    "NODE_KINDS",
    "AggregateNode",
    "CacheNode",
    "ClassifyNode",
    "DecomposeNode",
    "Directive",
    "DispatchNode",
    "ExpandNode",
    "FanoutNode",
    "FuseNode",
    "GateNode",
    "HintsNode",
    "Lane",
    "Node",
    "ReceiptNode",
    "RerankNode",
    "RunPipeline",
    "RunState",
    "ScoreNode",
    "Selection",
    "Services",
    "Skip",
    "WhenNode",
]
