"""when: a branch on the classification, the fused confidence or the result count.

``settings.if`` holds conditions that must all be true; the node then skips the nodes listed in
``settings.else`` (the heads of the branch not taken), otherwise those in ``settings.then``. With
the scheduler's skip rule (a node all of whose predecessors were skipped is skipped too) the rest
of the branch not taken follows, while a join after both branches still runs. So "broaden when
weak" is a ``when`` after a first fuse whose ``then`` is a second pass; "stop early when strong"
is one whose ``then`` skips the expensive stage. The receipt's ``trace`` records the values seen
and the branch taken.

Conditions (``if``): ``class_in`` / ``rule_in`` (lists), ``confidence_below`` /
``confidence_at_least`` (the fused confidence score; no answer yet counts as 0),
``results_below`` / ``results_at_least`` (fused items), ``words_at_least`` / ``words_below``
(the question's words), ``has`` (any of literals, regex, identifiers, paths found in the question).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..spec import ConfigSet, PipelineSpec
from ..types import CLASSES
from .base import Node, RunState, Skip, node_kind

FEATURES = ("literals", "regex", "identifiers", "paths")


def _observed(state: RunState) -> dict[str, Any]:
    c = state.classification
    return {
        "class": c.klass if c else None,
        "rule": c.rule if c else None,
        "confidence": state.confidence.score if state.confidence else 0.0,
        "results": len(state.fused),
        "words": len(state.question.split()),
    }


#: condition → (what it reads, the test)
CONDITIONS: dict[str, tuple[str, Callable[[Any, Any], bool]]] = {
    "class_in": ("class", lambda seen, want: seen in want),
    "rule_in": ("rule", lambda seen, want: seen in want),
    "confidence_below": ("confidence", lambda seen, want: seen < want),
    "confidence_at_least": ("confidence", lambda seen, want: seen >= want),
    "results_below": ("results", lambda seen, want: seen < want),
    "results_at_least": ("results", lambda seen, want: seen >= want),
    "words_below": ("words", lambda seen, want: seen < want),
    "words_at_least": ("words", lambda seen, want: seen >= want),
}


def evaluate(conditions: Mapping[str, Any], state: RunState) -> tuple[bool, dict[str, Any]]:
    """Whether every condition holds, and what was seen for each (for the trace)."""
    seen = _observed(state)
    ok, report = True, {}
    for name, want in conditions.items():
        if name == "has":
            c = state.classification
            found = [f for f in want if c is not None and getattr(c.features, f)]
            report[name] = found
            ok = ok and bool(found)
        else:
            field, test = CONDITIONS[name]
            report[name] = seen[field]
            ok = ok and test(seen[field], want)
    return ok, report


def _downstream(pipeline: PipelineSpec, node_id: str) -> set[str]:
    children: dict[str, set[str]] = {}
    for n in pipeline.nodes:
        for a in n.after:
            children.setdefault(a, set()).add(n.id)
    out: set[str] = set()
    stack = [node_id]
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in out:
                out.add(child)
                stack.append(child)
    return out


@node_kind
class WhenNode(Node):
    kind = "when"
    settings_keys = frozenset({"if", "then", "else"})
    requires = ("classify",)

    def validate(self, config: ConfigSet, pipeline: PipelineSpec) -> None:
        cond = self.settings.get("if")
        if not isinstance(cond, Mapping) or not cond:
            raise self.invalid(pipeline, f"needs settings.if: {{condition: value}}; conditions: {[*CONDITIONS, 'has']}")
        for name, want in cond.items():
            if name == "has":
                if not isinstance(want, list) or not want or any(f not in FEATURES for f in want):
                    raise self.invalid(pipeline, f"settings.if.has must list some of {list(FEATURES)}")
            elif name not in CONDITIONS:
                raise self.invalid(pipeline, f"unknown condition {name!r}; conditions: {[*CONDITIONS, 'has']}")
            elif name in ("class_in", "rule_in"):
                if not isinstance(want, list) or not want:
                    raise self.invalid(pipeline, f"settings.if.{name} must be a list")
                bad = [k for k in want if name == "class_in" and k not in CLASSES]
                bad += [r for r in want if name == "rule_in" and r not in config.classifier.rule_names()]
                if bad:
                    raise self.invalid(pipeline, f"settings.if.{name} names unknown values {bad}")
            elif isinstance(want, bool) or not isinstance(want, int | float):
                raise self.invalid(pipeline, f"settings.if.{name} must be a number")
        below = _downstream(pipeline, self.id)
        branches = [self.settings.get("then", []), self.settings.get("else", [])]
        if not any(branches) or not all(isinstance(b, list) for b in branches):
            raise self.invalid(
                pipeline, "needs settings.then and/or settings.else: the heads of each branch (node ids)"
            )
        for ids in branches:
            stray = [i for i in ids if i not in below]
            if stray:
                raise self.invalid(pipeline, f"branch heads {stray} are not nodes downstream of this one")

    async def run(self, state: RunState) -> Skip:
        holds, seen = evaluate(self.settings["if"], state)
        took, skip = ("then", self.settings.get("else", [])) if holds else ("else", self.settings.get("then", []))
        state.trace.append({"node": self.id, "when": seen, "took": took, "skipped": list(skip)})
        return Skip(nodes=frozenset(skip))
