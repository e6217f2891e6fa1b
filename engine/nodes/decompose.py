"""decompose: sub-queries from one question, each routed to the experts that fit it.

A long question (an issue, a pasted traceback, a paragraph) mixes parts that different experts
answer best, and searched whole it drowns the precise parts in prose. This node reads the parts
out (:func:`parts_of`) and plans one :class:`~engine.nodes.base.Lane` per (part, expert) named in
``settings.parts``; the next ``fanout`` runs them beside the gate's experts and fusion weighs each
with its weight. Parts:

* ``paths`` — file paths, the files of stack-trace frames (``File "…/a/b.py", line 3``) and dotted
  module paths (``pkg.sub.mod`` → ``pkg/sub/mod.py``), for the ``paths`` expert;
* ``identifiers`` — code identifiers (inline code, code blocks, camelCase / snake_case / dotted
  names and the functions of stack-trace frames), language builtins left out, for definitions;
* ``literals`` — quoted strings (an error message), for exact search;
* ``title`` — the first line (or sentence) when the question goes on after it: an issue's title
  is its summary, for ranked and semantic search.

Settings: ``parts: {part: {expert: weight}}`` (required), ``min_words`` (decompose only questions
at least this long; default 0), ``max_items`` per part (default 8). The parts found are in the
receipt's ``trace`` and each lane's plan in ``sub_queries``.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..spec import ConfigSet, PipelineSpec
from ..types import Features
from .base import Lane, Node, RunState, node_kind
from .fanout import build_query

PARTS = ("paths", "identifiers", "literals", "title")
FRAME = re.compile(r'File "([^"\n]+)", line \d+(?:, in ([A-Za-z_]\w*))?')
#: a dotted module path, maybe ending in a name defined there: two dots at least, the module's
#: parts lower-case (``django.db.models.query``, ``django.db.models.query.QuerySet``)
MODULE = re.compile(r"(?<![\w.])[a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)+(?:\.[A-Za-z_]\w*)(?![\w(])")
CODE_BLOCK = re.compile(r"```[^\n]*\n(.*?)```", re.S)
CODE_NAME = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*\b")
INLINE_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*(?:\(\))?")
BUILTIN_NAMES = frozenset(dir(builtins)) | {"self", "cls", "None", "True", "False"}
SENTENCE_END = re.compile(r"(?<=[.!?])\s")
MAX_TITLE_WORDS = 30


def _code_names(question: str) -> list[str]:
    """Names used in code blocks that look like code (dotted, camel, snake, or called)."""
    out = []
    for block in CODE_BLOCK.findall(question):
        for m in CODE_NAME.finditer(block):
            name = m.group(0)
            called = block[m.end() : m.end() + 1] == "("
            if (
                "." in name
                or "_" in name.strip("_")
                or (name[:1].isupper() and any(c.islower() for c in name))
                or called
            ):
                out.append(name)
    return out


def _keep_name(name: str) -> bool:
    last = name.split(".")[-1]
    return len(last) >= 3 and last not in BUILTIN_NAMES and not last.isdigit()


def parts_of(question: str, features: Features, max_items: int = 8) -> dict[str, list[str]]:
    """Every part :data:`PARTS` names, read out of ``question`` (empty parts left out)."""
    frames = FRAME.findall(question)
    paths = [p for p, _ in frames] + list(features.paths) + MODULE.findall(question)
    paths = [p for p in paths if not any(o != p and o.endswith(p) for o in paths)]  # a path's tail is that path
    inline = [lit.removesuffix("()") for lit in features.literals if INLINE_NAME.fullmatch(lit)]  # `Cls.method()`
    names = [f for _, f in frames if f] + inline + list(features.identifiers) + _code_names(question)
    names = [n for n in names if _keep_name(n) and n not in paths]
    literals = [lit for lit in features.literals if lit not in names and lit not in paths and len(lit) >= 4]
    text = question.strip()
    first = text.split("\n", 1)[0].strip()
    if first == text:  # one paragraph: its first sentence
        first = SENTENCE_END.split(text, 1)[0].strip()
    title = [first] if first != text and 3 <= len(first.split()) <= MAX_TITLE_WORDS else []
    found = {
        "paths": list(dict.fromkeys(paths))[:max_items],
        "identifiers": list(dict.fromkeys(names))[:max_items],
        "literals": list(dict.fromkeys(literals))[:max_items],
        "title": title,
    }
    return {part: items for part, items in found.items() if items}


def part_features(part: str, items: list[str], features: Features) -> tuple[str, str | None, Features]:
    """The sub-query's text, the class it is asked as (None: the question's) and its features."""
    if part == "paths":
        return " ".join(items), None, Features(paths=tuple(items))
    if part == "identifiers":  # asked as a symbol question: definitions of the names
        return " ".join(items), "typed-symbol", Features(identifiers=tuple(items))
    if part == "literals":
        return " ".join(f'"{lit}"' for lit in items), "identifier", Features(literals=tuple(items))
    title = items[0]
    words = set(re.findall(r"\w+", title.lower()))
    return (
        title,
        None,
        Features(
            identifiers=tuple(i for i in features.identifiers if i in title),
            keywords=tuple(k for k in features.keywords if k in words),
            paths=tuple(p for p in features.paths if p in title),
        ),
    )


def check_weights(node: Node, raw: Any, config: ConfigSet, pipeline: PipelineSpec, key: str) -> None:
    """``settings.<key>`` is ``{expert: weight}`` with known experts and weights in [0, 1]."""
    if not isinstance(raw, Mapping) or not raw:
        raise node.invalid(pipeline, f"settings.{key} must map experts to weights ({{expert: weight}})")
    node._check_experts(raw, config, pipeline, key)
    for expert, w in raw.items():
        if isinstance(w, bool) or not isinstance(w, int | float) or not 0 <= w <= 1:
            raise node.invalid(pipeline, f"settings.{key}.{expert}: weight {w!r} is not in [0, 1]")


@node_kind
class DecomposeNode(Node):
    kind = "decompose"
    settings_keys = frozenset({"parts", "min_words", "max_items"})
    requires = ("gate",)

    def validate(self, config: ConfigSet, pipeline: PipelineSpec) -> None:
        for key, least in (("min_words", 0), ("max_items", 1)):
            v = self.settings.get(key, least)
            if isinstance(v, bool) or not isinstance(v, int) or v < least:
                raise self.invalid(pipeline, f"settings.{key} {v!r} must be an integer >= {least}", key)
        parts = self.settings.get("parts")
        if not isinstance(parts, Mapping) or not parts:
            raise self.invalid(pipeline, "needs settings.parts: {part: {expert: weight}}")
        unknown = [p for p in parts if p not in PARTS]
        if unknown:
            raise self.invalid(pipeline, f"settings.parts names unknown parts {unknown}; parts: {list(PARTS)}")
        for part, experts in parts.items():
            check_weights(self, experts, config, pipeline, f"parts.{part}")

    async def run(self, state: RunState) -> None:
        c = state.classification
        assert c is not None  # guaranteed by `requires`
        question = state.question
        words = len(question.split())
        if words < int(self.settings.get("min_words", 0)):
            state.trace.append({"node": self.id, "decompose": f"not decomposed: {words} words"})
            return None
        parts = parts_of(question, c.features, int(self.settings.get("max_items", 8)))
        base = build_query(state)
        planned: dict[str, list[str]] = {}
        for part, experts in self.settings["parts"].items():
            items = parts.get(part)
            if not items:
                continue
            text, klass, features = part_features(part, items, c.features)
            query = replace(base, question=text, klass=klass or base.klass, features=features)
            planned[part] = items
            for expert, weight in experts.items():
                key = f"{expert}:{part}"
                state.lanes[key] = Lane(key, expert, part, query, float(weight), self.id)
        state.trace.append({"node": self.id, "sub_queries": planned})
        return None
