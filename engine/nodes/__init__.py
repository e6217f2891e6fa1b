"""The closed set of node kinds a pipeline may use (``kind:`` in YAML), listed in one place."""

from .base import NODE_KINDS, FusedItem, Node, RunState, Selection
from .classify import ClassifyNode
from .dispatch import DispatchNode
from .fanout import FanoutNode
from .fuse import FuseNode
from .gate import GateNode
from .receipt import ReceiptNode
from .score import ScoreNode

__all__ = [
    "NODE_KINDS",
    "ClassifyNode",
    "DispatchNode",
    "FanoutNode",
    "FuseNode",
    "FusedItem",
    "GateNode",
    "Node",
    "ReceiptNode",
    "RunState",
    "ScoreNode",
    "Selection",
]
