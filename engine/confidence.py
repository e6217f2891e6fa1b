"""Calibrated confidence: how likely the answer's first item is a right one, and a label that means it.

The fused score alone says how much the experts agreed, not whether they were right: nonsense and
a question in another language still get a confident-looking top item from embeddings alone. The
answer's confidence is therefore a probability estimated from signals about the answer
(:func:`signals`), with a logistic model whose weights are fitted on the eval suites' dev splits
(``engine tune --confidence``, :mod:`engine.tune_confidence`) and kept in ``priors.yaml:
confidence``. Its label is ``high`` at ``high_at`` (0.8: the top item was right ≥ 80 % of the time
on the dev questions so scored), ``medium`` at ``medium_at``, else ``low``; ``none`` when there is
no item. Two caps hold whatever the model says:

* an answer without lexical support — no lexical, structural or typed expert returned anything,
  or the first item is supported by semantic similarity alone — is never ``high``;
* a question that quotes a literal whose first item does not contain it is ``low``.

The signals are in the response (``confidence.signals``), so an agent can see why. Without a
``confidence`` model in priors.yaml the label is the fused share against
``fusion.low_confidence_below`` (:func:`engine.fusion.confidence`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .items import AnswerItem, Confidence
from .types import Features

SIGNALS = (
    "share",
    "agree",
    "lexical",
    "lexical_any",
    "semantic_only",
    "literal_hit",
    "literal_miss",
    "ident_hit",
    "margin",
)
#: precision classes whose evidence is lexical support (the text or the code structure, not resemblance)
LEXICAL = frozenset({"lexical", "structural", "typed", "hybrid"})


@dataclass(frozen=True, slots=True)
class ConfidenceSpec:
    model: Mapping[str, float] = field(default_factory=dict)  # "bias" and a weight per signal
    high_at: float = 0.8
    medium_at: float = 0.5


def signals(
    items: Sequence[AnswerItem],
    *,
    precision: Mapping[str, str],
    returned: Mapping[str, int],
    features: Features,
    max_rrf: float,
) -> dict[str, float]:
    """What is known about the answer's first item, each in [0, 1].

    Args:
        precision: each expert's or lane's precision class, by its key.
        returned: how many items each expert or lane returned.
        features: what the question names (literals, identifiers).
        max_rrf: the best fused score possible (every expert ranking one item first).
    """
    top = items[0]
    keys = [s.expert for s in top.sources]
    hay = f"{top.path} {top.symbol or ''} {top.content}".lower()
    literals = [lit.lower() for lit in features.literals if len(lit) >= 3]
    idents = [i.split(".")[-1].lower() for i in features.identifiers if len(i.split(".")[-1]) >= 3]
    scores = [it.score for it in items[:2]]
    margin = (scores[0] - scores[1]) / abs(scores[0]) if len(scores) == 2 and scores[0] else 1.0
    rrf = float(top.subscores.get("rrf", top.score))
    out = {
        "share": min(1.0, rrf / max_rrf) if max_rrf > 0 else 0.0,
        "agree": min(len(keys), 4) / 4,
        "lexical": float(any(precision.get(k) in LEXICAL for k in keys)),
        "lexical_any": float(any(precision.get(k) in LEXICAL and n > 0 for k, n in returned.items())),
        "semantic_only": float(top.tier == "semantic-only"),
        "literal_hit": float(bool(literals) and any(lit in hay for lit in literals)),
        "literal_miss": float(bool(literals) and not any(lit in hay for lit in literals)),
        "ident_hit": float(bool(idents) and any(i in hay for i in idents)),
        "margin": max(0.0, min(1.0, margin)),
    }
    return {k: round(v, 4) for k, v in out.items()}


def assess(sig: Mapping[str, float] | None, spec: ConfidenceSpec) -> Confidence:
    """The calibrated probability and its label (``none`` when there is no item: ``sig`` is None)."""
    if sig is None:
        return Confidence(0.0, "none")
    z = spec.model.get("bias", 0.0) + math.fsum(spec.model.get(k, 0.0) * v for k, v in sig.items())
    p = 1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, z))))
    label = "high" if p >= spec.high_at else "medium" if p >= spec.medium_at else "low"
    if label == "high" and (not sig.get("lexical_any") or sig.get("semantic_only")):
        label = "medium"  # never high without lexical support
    if sig.get("literal_miss"):
        label = "low"  # the quoted text is not in the first item
    return Confidence(round(p, 4), label, dict(sig))
