"""Feedback names a receipt that exists and items of its answer, else ``invalid_request`` with the
field (issue 12 item 6): over a real MCP client talking to ``engine serve`` on stdio, and on the
store port every surface records feedback through.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from engine.store import DuckDBStore
from engine.workspace import Workspace
from tests.external_support import PYTHON, copy_config, ws  # noqa: F401 - ws is a fixture

pytestmark = pytest.mark.anyio


def refused(reply: Any, field: str) -> bool:
    """A classified tool error naming the field at fault, in text and in structured content."""
    error = (reply.structured_content or {}).get("error", {})
    return bool(
        reply.is_error
        and reply.content[0].text.startswith("invalid_request:")
        and error.get("error") == "invalid_request"
        and error.get("field") == field
    )


async def test_feedback_over_mcp_names_a_real_receipt_and_its_items(ws: Workspace, tmp_path: Path) -> None:
    config = copy_config(tmp_path / "config")
    argv = ["-m", "engine.cli", "serve", "--workspace", str(ws.roots[0]), "--config-dir", str(config)]
    async with Client(StdioServerParameters(command=PYTHON, args=argv, cwd=str(tmp_path))) as client:
        first = (await client.call_tool("router", {"question": 'find "PaymentGateway"'})).structured_content
        other = (await client.call_tool("router", {"question": "retry budget from the environment"})).structured_content
        rid = first["receipt"]["receipt_id"]
        ids = [it["id"] for it in first["items"]]
        assert ids and [r["id"] for r in first["receipt"]["returned"]] == ids  # the signed receipt lists its answer
        foreign = next(it["id"] for it in other["items"] if it["id"] not in ids)

        async def feedback(**args: Any) -> Any:
            return await client.call_tool("feedback", args)

        ok = await feedback(receipt_id=rid, useful_item_ids=ids[:2], note="both helped")
        assert not ok.is_error, ok.content[0].text
        assert not (await feedback(receipt_id=rid, useful_item_ids=[])).is_error  # "nothing helped" is feedback too

        assert refused(await feedback(receipt_id="0" * 32, useful_item_ids=ids[:1]), "receipt_id")
        assert refused(await feedback(receipt_id="", useful_item_ids=[]), "receipt_id")
        assert refused(await feedback(receipt_id=rid, useful_item_ids=[foreign]), "useful_item_ids")
        mixed = await feedback(receipt_id=rid, useful_item_ids=[ids[0], "made-up-id"])
        assert refused(mixed, "useful_item_ids") and "made-up-id" in mixed.content[0].text
        assert refused(await feedback(receipt_id=rid, useful_item_ids="not-a-list"), "useful_item_ids")
        # the tool's own input schema holds (found by an exploratory run: all of these were accepted)
        assert refused(await feedback(receipt_id=rid, useful_item_ids=ids[:1], foo=1), "(arguments)")
        assert refused(await feedback(receipt_id=rid, useful_item_ids=ids[:1] * 2), "useful_item_ids")
        assert refused(await feedback(receipt_id=rid, useful_item_ids=[], note=7), "note")
        long_note = await feedback(receipt_id=rid, useful_item_ids=[], note="n" * 5000)
        assert refused(long_note, "note") and "n" * 100 not in long_note.content[0].text  # never echoed
        assert refused(await feedback(receipt_id=rid, useful_item_ids=[], session_id=3), "session_id")
        both = await feedback(receipt_id=rid, useful_item_ids=ids[:1], not_useful_item_ids=ids[:1])
        assert refused(both, "not_useful_item_ids")

        # separate mode: any expert list's item may be named
        sep = (
            await client.call_tool("router", {"question": 'find "PaymentGateway"', "mode": "separate"})
        ).structured_content
        sep_id = next(it["id"] for s in sep["separate"].values() for it in s["items"])
        assert not (await feedback(receipt_id=sep["receipt"]["receipt_id"], useful_item_ids=[sep_id])).is_error

        # an answer from the cache has a receipt of its own, listing the cached items
        again = (await client.call_tool("router", {"question": 'find "PaymentGateway"'})).structured_content
        assert again["receipt"]["cache"]["hit"] and [r["id"] for r in again["receipt"]["returned"]] == ids
        assert not (await feedback(receipt_id=again["receipt"]["receipt_id"], useful_item_ids=ids[:1])).is_error
    # only the valid feedback was recorded
    rows = DuckDBStore(ws.data_dir).list_feedback()
    assert sorted(len(r.useful_item_ids) for r in rows) == [0, 1, 1, 2]
    assert all(set(r.useful_item_ids) <= set(ids) | {sep_id} for r in rows)
