"""Feedback on an answer, checked against its signed receipt before it is stored.

The receipt lists what the answer returned (``returned``: each item's id, fused rank and the
experts that found it), so feedback can be held to it: the receipt must exist and every item
named must be one it returned. Every surface that takes feedback (MCP ``feedback``, the web UI)
goes through :func:`record_feedback`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import InvalidRequest
from .store import Feedback, Store


def returned_ids(receipt: Mapping[str, Any]) -> set[str]:
    """The ids of the items a receipt says its answer returned."""
    returned = receipt.get("returned")
    if not isinstance(returned, list):
        return set()
    return {str(r["id"]) for r in returned if isinstance(r, Mapping) and "id" in r}


def check_feedback(store: Store, feedback: Feedback) -> dict[str, Any]:
    """The receipt ``feedback`` names, once the feedback is known to fit it.

    Raises:
        InvalidRequest: no stored receipt has that id, or an item id is not one it returned.
        StoreError: the store cannot be read.
    """
    receipt = store.get_receipt(feedback.receipt_id)
    if receipt is None:
        raise InvalidRequest(f"no receipt {feedback.receipt_id!r}", field="receipt_id")
    known = returned_ids(receipt)
    named = {"useful_item_ids": feedback.useful_item_ids, "not_useful_item_ids": feedback.not_useful_item_ids}
    for field, ids in named.items():
        unknown = sorted(set(ids) - known)
        if unknown:
            raise InvalidRequest(
                f"item ids {unknown[:5]} are not items of receipt {feedback.receipt_id!r} "
                f"(it returned {len(known)} items)",
                field=field,
            )
    return receipt


def record_feedback(store: Store, feedback: Feedback) -> dict[str, Any]:
    """Check ``feedback`` against its receipt, then store it durably; returns the receipt body."""
    receipt = check_feedback(store, feedback)
    store.put_feedback(feedback)
    return receipt
