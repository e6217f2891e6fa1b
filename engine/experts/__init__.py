"""The closed registry of expert adapters, keyed by the short ``adapter:`` name in experts.yaml.

Adapters are imported lazily (the semantic one pulls in onnxruntime), but only from this
table: YAML can never name an arbitrary import path.
"""

from __future__ import annotations

from importlib import import_module

from ..errors import SpecError
from .base import Expert, ExpertEnv

ADAPTERS: dict[str, str] = {
    "ripgrep": "engine.experts.ripgrep:RipgrepExpert",
    "bm25": "engine.experts.bm25:BM25Expert",
    "git": "engine.experts.git:GitExpert",
    "fake": "engine.experts.fake:FakeExpert",
    "semantic": "engine.experts.semantic:SemanticExpert",
    "mcp": "engine.experts.mcp_client:McpExpert",
    "http": "engine.experts.http:HttpExpert",
    "command": "engine.experts.command:CommandExpert",
    "symbols": "engine.experts.symbols:SymbolsExpert",
    "typed": "engine.experts.typed:TypedExpert",
    "docs": "engine.experts.docs:DocsExpert",
}


def adapter_class(adapter: str) -> type[Expert]:
    try:
        target = ADAPTERS[adapter]
    except KeyError:
        raise SpecError(f"unknown expert adapter {adapter!r}; known adapters: {sorted(ADAPTERS)}") from None
    module, _, cls = target.partition(":")
    found: type[Expert] = getattr(import_module(module), cls)
    return found


__all__ = ["ADAPTERS", "Expert", "ExpertEnv", "adapter_class"]
