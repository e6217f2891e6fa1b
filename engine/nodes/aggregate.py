"""aggregate: roll chunk evidence up to files, for "which file" questions.

Experts that return chunks (BM25, semantic, ripgrep) rank places, and a file that matches in many
places is split over many middling ranks while a file with one lucky chunk takes the top. This
node, between ``score`` and ``fuse``, turns each listed expert's list into a list of *files*:
a file's score is its best chunk's normalised score plus a decayed sum of the others
(``s1 + d·s2 + d²·s3 …``), files are re-ranked by it, and each is represented by its best chunk
(sub-scores ``file_score`` and ``file_chunks`` say why). Every file then takes one rank of the
expert's list, so the fused answer reaches more distinct files.

Settings: ``experts`` (lists to roll up; default every expert and lane), ``decay`` (default 0.5).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..items import ScoredItem
from ..spec import ConfigSet, PipelineSpec
from .base import Node, RunState, node_kind


def roll_up(items: Sequence[ScoredItem], decay: float) -> list[ScoredItem]:
    """One item per file (its best chunk), ranked by max + decayed sum of its chunks' native scores."""
    files: dict[tuple[str, str], list[ScoredItem]] = {}
    passthrough: list[ScoredItem] = []
    for s in items:
        e = s.evidence
        if e.kind == "commit" or not e.path:
            passthrough.append(s)
        else:
            files.setdefault((e.project, e.path), []).append(s)
    scored = []
    for group in files.values():
        natives = sorted((float(s.subscores.get("native", 0.0)) for s in group), reverse=True)
        total = sum(n * decay**i for i, n in enumerate(natives))
        best = min(group, key=lambda s: s.rank)
        scored.append((total, best, len(group)))
    scored.sort(key=lambda t: (-t[0], t[1].rank))
    out = [
        ScoredItem(best.evidence, rank, {**best.subscores, "file_score": round(total, 4), "file_chunks": n}, best.flags)
        for rank, (total, best, n) in enumerate(scored, start=1)
    ]
    out += [ScoredItem(s.evidence, len(out) + i, s.subscores, s.flags) for i, s in enumerate(passthrough, start=1)]
    return out


@node_kind
class AggregateNode(Node):
    kind = "aggregate"
    settings_keys = frozenset({"experts", "decay"})
    requires = ("score",)

    def validate(self, config: ConfigSet, pipeline: PipelineSpec) -> None:
        self._check_experts(self.settings.get("experts"), config, pipeline, "experts")
        decay = self.settings.get("decay", 0.5)
        if isinstance(decay, bool) or not isinstance(decay, int | float) or not 0 <= decay <= 1:
            raise self.invalid(pipeline, f"settings.decay {decay!r} is not in [0, 1]")

    async def run(self, state: RunState) -> None:
        only = self.settings.get("experts")
        decay = float(self.settings.get("decay", 0.5))
        for key, items in state.scored.items():
            if only is None or state.outcomes[key].expert in only:
                state.scored[key] = roll_up(items, decay)
        return None
