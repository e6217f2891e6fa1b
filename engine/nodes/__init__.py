"""The closed set of node kinds a pipeline may use (``kind:`` in YAML), listed in one place."""

from .base import NODE_KINDS, Directive, Node, RunPipeline, RunState, Selection, Services, Skip
from .cache import CacheNode
from .classify import ClassifyNode
from .dispatch import DispatchNode
from .fanout import FanoutNode
from .fuse import FuseNode
from .gate import GateNode
from .receipt import ReceiptNode
from .score import ScoreNode

__all__ = [
    "NODE_KINDS",
    "CacheNode",
    "ClassifyNode",
    "Directive",
    "DispatchNode",
    "FanoutNode",
    "FuseNode",
    "GateNode",
    "Node",
    "ReceiptNode",
    "RunPipeline",
    "RunState",
    "ScoreNode",
    "Selection",
    "Services",
    "Skip",
]
