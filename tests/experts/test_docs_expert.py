"""The docs expert: Markdown / reST sections ranked by keyword, with heading paths, kept incremental."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..conftest import git
from ..helpers import ask
from ..symbol_repos import ask_expert, index


@pytest.fixture
def docsws(tmp_path: Path, config_dir: Path) -> Path:
    from ..symbol_repos import make_workspace

    ws = make_workspace(tmp_path)
    index(ws, config_dir, "docs")
    return ws


def test_sections_ranked_with_heading_path(docsws: Path, config_dir: Path) -> None:
    _, items = ask_expert(config_dir, docsws, "docs", "how do I install from source")
    assert items and all(e.kind == "doc" for e in items)
    assert all(e.path.endswith((".md", ".rst")) for e in items)  # only doc files are in this index
    top = items[0]
    assert (top.project, top.path, top.symbol) == ("shop", "docs/guide.md", "Shop guide > Install > From source")
    assert (top.start_line, top.end_line) == (9, 11) and "make install" in top.content
    assert items[0].score > items[1].score
    _, items = ask_expert(config_dir, docsws, "docs", "where do I set the currency configuration")
    assert (items[0].project, items[0].path, items[0].symbol) == ("billing", "README.rst", "Billing > Configuration")


def test_docs_index_follows_edits_and_deletes(docsws: Path, config_dir: Path) -> None:
    guide = docsws / "shop" / "docs" / "guide.md"
    guide.write_text(guide.read_text() + "\n## Shipping\n\nParcels leave the warehouse every Tuesday.\n")
    git(docsws / "billing", "rm", "-q", "README.rst")
    r = index(docsws, config_dir, "docs")["docs"]
    assert (r.added, r.removed) == (1, 1)
    _, items = ask_expert(config_dir, docsws, "docs", "when do parcels leave the warehouse")
    assert items[0].symbol == "Shop guide > Shipping"
    _, items = ask_expert(config_dir, docsws, "docs", "currency configuration")
    assert all(e.path != "README.rst" for e in items)


def test_router_sends_docs_questions_to_docs(docsws: Path, config_dir: Path) -> None:
    r = ask(config_dir, docsws, "how do I install the shop from source")
    receipt = r.response["receipt"]
    assert receipt["classifier"]["class"] == "docs" and receipt["per_expert"]["docs"]["status"] == "ok"
    docs_items = [it for it in r.response["items"] if any(s["expert"] == "docs" for s in it["sources"])]
    assert docs_items and docs_items[0]["kind"] == "doc"
    assert docs_items[0]["symbol"] == "Shop guide > Install > From source"
    assert docs_items[0]["tier"] in ("docs", "hybrid-confirmed")
