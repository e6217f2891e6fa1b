"""expand: a second hop — names from the question and from the first answer, sent back to the
structural / typed experts for their definitions or their references.

"Who calls X" is answered by X's callers, but a first pass mostly finds X itself: its definition
file ranks first and its project fills the list. This node reads names from the question's
identifiers and from the top fused items (the symbol an item is, and the names defined in its
lines), and plans one :class:`~engine.nodes.base.Lane` per expert in ``settings.experts`` asking
for those names' ``references`` (callers, importers, subclasses, across every project in scope)
or ``definitions``. A later ``fanout`` → ``score`` → ``fuse`` runs the lanes and fuses their
evidence with the first pass, each lane under its own weight and label (``symbols:references``).

Settings: ``experts: {expert: weight}`` (required), ``mode``: ``references`` (default) or
``definitions``, ``top`` (fused items read, default 3), ``from``: any of ``question``, ``items``
(default both), ``max_names`` (default 6).
"""

from __future__ import annotations

import re
from dataclasses import replace

from ..items import AnswerItem
from ..spec import ConfigSet, PipelineSpec
from ..types import Features
from .base import Lane, Node, RunState, node_kind
from .decompose import BUILTIN_NAMES, check_weights
from .fanout import build_query

MODES = ("references", "definitions")
#: a name defined on a line: ``def x``, ``class X``, ``function x``, ``interface X``, ``x = (…) =>``
DEFINES = re.compile(
    r"^\s*(?:export\s+)?(?:async\s+)?(?:def|class|function|interface|type|struct|fn|func)\s+([A-Za-z_]\w*)", re.M
)


def item_names(item: AnswerItem) -> list[str]:
    """The symbol an item is (a definition names itself, a reference its caller) and what it defines."""
    names = [item.symbol.split(".")[-1]] if item.symbol else []
    names += DEFINES.findall(item.content)
    return names


def seed_names(question_ids: tuple[str, ...], items: list[AnswerItem], sources: list[str], max_names: int) -> list[str]:
    names: list[str] = []
    if "question" in sources:
        names += [i for i in question_ids if "/" not in i]
    if "items" in sources:
        for it in items:
            names += item_names(it)
    keep = [n for n in names if len(n.split(".")[-1]) >= 3 and n.split(".")[-1] not in BUILTIN_NAMES]
    return list(dict.fromkeys(keep))[:max_names]


@node_kind
class ExpandNode(Node):
    kind = "expand"
    settings_keys = frozenset({"experts", "mode", "from", "top", "max_names"})
    requires = ("fuse",)

    def validate(self, config: ConfigSet, pipeline: PipelineSpec) -> None:
        check_weights(self, self.settings.get("experts"), config, pipeline, "experts")
        if self.settings.get("mode", "references") not in MODES:
            raise self.invalid(pipeline, f"settings.mode must be one of {list(MODES)}")
        sources = self.settings.get("from", ["question", "items"])
        if not isinstance(sources, list) or not sources or any(s not in ("question", "items") for s in sources):
            raise self.invalid(pipeline, "settings.from must list question and/or items")

    async def run(self, state: RunState) -> None:
        c = state.classification
        assert c is not None  # a fuse upstream implies a classify upstream
        mode = str(self.settings.get("mode", "references"))
        names = seed_names(
            c.features.identifiers,
            state.fused[: int(self.settings.get("top", 3))],
            list(self.settings.get("from", ["question", "items"])),
            int(self.settings.get("max_names", 6)),
        )
        state.trace.append({"node": self.id, "expand": mode, "names": names})
        if not names:
            return None
        base = build_query(state)
        # asked as a symbol question of the mode's class: the symbol experts read the mode from it
        klass = "cross-repo-impact" if mode == "references" else "typed-symbol"
        query = replace(base, question=" ".join(names), klass=klass, features=Features(identifiers=tuple(names)))
        for expert, weight in self.settings["experts"].items():
            key = f"{expert}:{mode}"
            state.lanes[key] = Lane(key, expert, mode, query, float(weight), self.id)
        return None
