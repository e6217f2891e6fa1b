"""What the Ask page shows of an answer: recent answers held in memory, and their view models.

An answer's items are not stored anywhere (the receipt records which items were returned, not
their text), so the page that follows a question (``/answer/<receipt_id>``, after the POST)
reads it from a small in-process memo of the latest answers. An answer that has left the memo
still has its receipt.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from ..spec import Priors

MEMO_SIZE = 64

#: what each label means without a calibration in priors.yaml (engine/fusion.py: the top item's
#: fused score over the best score an answer can reach, every selected expert ranking it first)
SHARE_MEANING = {
    "high": "The top item scored at least {low:.0%} of the best score an answer can reach (every selected expert "
    "ranking it first): the experts agree on it.",
    "low": "The top item scored under {low:.0%} of the best score an answer can reach: weak or single-source "
    "evidence. Check it before relying on it.",
    "none": "No evidence found.",
}
#: ... and with one (engine/confidence.py: a probability fitted on the eval suites' dev splits)
CALIBRATED_MEANING = {
    "high": "On the dev questions, answers with signals like these had a right first item at least {high:.0%} of "
    "the time: the score is that estimated probability.",
    "medium": "The first item is right about as often as not ({medium:.0%}–{high:.0%} on the dev questions): look "
    "at the next few too.",
    "low": "The first item was right less than {medium:.0%} of the time for answers like this (weak, "
    "semantic-only or missing the quoted text). Check it before relying on it.",
    "none": "No evidence found.",
}


@dataclass(frozen=True)
class Answer:
    form: dict[str, str]
    pipeline: str
    response: dict[str, Any]


class AnswerMemo:
    """The latest answers by receipt id (least recently asked dropped first)."""

    def __init__(self, size: int = MEMO_SIZE) -> None:
        self.size = size
        self._items: OrderedDict[str, Answer] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, receipt_id: str, answer: Answer) -> None:
        with self._lock:
            self._items[receipt_id] = answer
            self._items.move_to_end(receipt_id)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def get(self, receipt_id: str) -> Answer | None:
        with self._lock:
            return self._items.get(receipt_id)


def file_url(item: dict[str, Any]) -> str | None:
    """The file view of an item's lines (commits have none: their path is one file of many)."""
    if item.get("kind") == "commit" or not item.get("path"):
        return None
    r = item.get("range") or {}
    start, end = int(r.get("start_line") or 1), int(r.get("end_line") or 1)
    query = urlencode({"project": item.get("project", ""), "path": item["path"], "start": start, "end": end})
    return f"/file?{query}#L{start}"


def item_view(item: dict[str, Any], verdicts: dict[str, str]) -> dict[str, Any]:
    r = item.get("range") or {}
    return {
        "tier": None,
        "nuance": None,
        "symbol": None,
        "flags": [],
        "sources": [],
        **item,
        "lines": f"{r.get('start_line')}–{r.get('end_line')}",
        "file_url": file_url(item),
        "verdict": verdicts.get(str(item.get("id"))),
    }


def confidence_view(response: dict[str, Any], priors: Priors) -> dict[str, Any] | None:
    conf = response.get("confidence")
    if not isinstance(conf, dict):
        return None
    label = str(conf.get("label"))
    spec = priors.confidence
    if spec is not None and spec.model:
        meaning = CALIBRATED_MEANING.get(label, "").format(high=spec.high_at, medium=spec.medium_at)
    else:
        meaning = SHARE_MEANING.get(label, "").format(low=priors.fusion.low_confidence_below)
    return {"score": conf.get("score"), "label": label, "meaning": meaning}


def answer_view(answer: Answer, verdicts: dict[str, str], priors: Priors) -> dict[str, Any]:
    response = answer.response
    receipt = response.get("receipt") or {}
    separate = {
        name: {"error": None, **lane, "items": [item_view(it, verdicts) for it in lane.get("items", [])]}
        for name, lane in (response.get("separate") or {}).items()
    }
    return {
        "receipt": receipt,
        "receipt_id": receipt.get("receipt_id", ""),
        "items": [item_view(it, verdicts) for it in response.get("items", [])],
        "separate": separate,
        "mode": "separate" if "separate" in response else "fused",
        "confidence": confidence_view(response, priors),
        "error": response.get("error"),
        "question": answer.form.get("question", ""),
    }


def verdicts_of(feedback: list[Any]) -> dict[str, str]:
    """item id → the latest verdict recorded for it ("useful" / "not useful")."""
    out: dict[str, str] = {}
    for fb in feedback:  # oldest first: the latest wins
        for i in fb.useful_item_ids:
            out[i] = "useful"
        for i in fb.not_useful_item_ids:
            out[i] = "not useful"
    return out
