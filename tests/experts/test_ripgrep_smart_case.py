"""Smart case for quoted literals (issue 12 item 4), with the real rg over a real repo.

ripgrep's ``--smart-case`` rule: a quoted literal with no upper-case letter matches in any case;
one with an upper-case letter matches exactly. The exact-case match ranks first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine.types import Evidence, Scope
from engine.workspace import Workspace
from tests.conftest import make_repo
from tests.external_support import planned_and_found
from tests.helpers import ask

pytestmark = pytest.mark.anyio

FILES = {
    # the case-insensitive matches come first by path and by match count: every other ranking
    # signal favours them, and the exact-case match must still rank first
    "net/refused.py": (
        "class Refused:\n    MESSAGE = 'Connection Refused'\n    TITLE = 'Connection Refused'\n"
        "    HINT = 'Connection Refused: is the server up?'\n"
    ),
    "net/client.py": "import logging\n\n\ndef connect():\n    logging.error('connection refused')\n",
    "net/other.py": "CONNECTION_REFUSED = 'CONNECTION REFUSED by peer'\n",
    "net/unrelated.py": "def ok():\n    return 'connected'\n",
}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "ws" / "net", FILES)


async def grep(ws: Workspace, question: str) -> tuple[list[Evidence], dict[str, Any]]:
    return await planned_and_found("ripgrep", ws, question)


async def test_a_lower_case_literal_matches_any_case_exact_case_first(repo: Path) -> None:
    items, plan = await grep(Workspace.open([repo]), '"connection refused"')
    assert plan["mode"] == "fixed-smart-case"
    assert items[0].path == "net/client.py"  # as written: first
    assert {e.path for e in items} == {"net/client.py", "net/refused.py", "net/other.py"}
    by_path = {e.path: e for e in items}
    assert "case-insensitive-match" not in by_path["net/client.py"].flags
    for other in ("net/refused.py", "net/other.py"):
        assert "case-insensitive-match" in by_path[other].flags
        assert by_path[other].score < by_path["net/client.py"].score


async def test_a_literal_with_an_upper_case_letter_matches_exactly(repo: Path) -> None:
    items, plan = await grep(Workspace.open([repo]), '"Connection Refused"')
    assert plan["mode"] == "fixed"
    assert [e.path for e in items] == ["net/refused.py"]
    assert "case-insensitive-match" not in items[0].flags


async def test_smart_case_is_decided_over_the_whole_literal_set(repo: Path) -> None:
    # as rg --smart-case does with several patterns: one upper-case letter makes the set exact
    _, plan = await grep(Workspace.open([repo]), 'find "connection refused" or "Refused"')
    assert plan["mode"] == "fixed"
    _, plan = await grep(Workspace.open([repo]), 'find "connection refused" or "peer"')
    assert plan["mode"] == "fixed-smart-case"


async def test_identifiers_stay_case_sensitive(repo: Path) -> None:
    _, plan = await grep(Workspace.open([repo]), "where is connect_timeout used")
    assert plan["mode"] == "fixed"


def test_router_answers_a_lower_case_quote_with_the_title_case_line(repo: Path, config_dir: Path) -> None:
    r = ask(config_dir, repo, '"connection refused"')
    assert r.error is None
    found = {it["path"]: it for it in r.response["items"]}
    assert "net/refused.py" in found and "Connection Refused" in found["net/refused.py"]["content"]
    ranked = [it["path"] for it in r.response["items"]]
    assert ranked.index("net/client.py") < ranked.index("net/refused.py")
    assert r.response["receipt"]["sub_queries"]["ripgrep"]["mode"] == "fixed-smart-case"


async def test_a_regex_rg_cannot_parse_is_searched_as_literal_text(repo: Path) -> None:
    """Found by an exploratory run: `/[unclosed/` made ripgrep `internal` (rg exited 2), counted
    against the expert's error rate for the user's typo. Its text is searched literally instead."""
    (repo / "net" / "pattern.py").write_text("BROKEN = '[unclosed'\n")
    items, plan = await grep(Workspace.open([repo]), "lines matching /[unclosed/")
    assert plan["mode"] == "fixed" and "searched as literal text" in plan["regex_error"]
    assert [e.path for e in items] == ["net/pattern.py"]
    items, plan = await grep(Workspace.open([repo]), "lines matching /Refuse[d]/")  # a good one stays a regex
    assert plan["mode"] == "regex" and "regex_error" not in plan and items


async def test_a_name_inside_a_longer_name_is_a_substring_match_not_exact(repo: Path) -> None:
    """Found by an exploratory run: `who calls tinyv18_fn_5` returned `tinyv18_fn_510` labelled
    `lexical-exact`. A name is matched exactly only as a whole name."""
    (repo / "net" / "names.py").write_text("def tinyv18_fn_510():\n    return 1\n")
    (repo / "net" / "uses.py").write_text("from names import tinyv18_fn_5\ntinyv18_fn_5()\n")
    items, _ = await grep(Workspace.open([repo]), "who calls tinyv18_fn_5")
    flags = {e.path: e.flags for e in items}
    assert "exact-match" in flags["net/uses.py"] and "substring-match" not in flags["net/uses.py"]
    assert "substring-match" in flags["net/names.py"] and "exact-match" not in flags["net/names.py"]


async def test_a_match_deep_in_a_long_line_is_shown_around_the_match(tmp_path: Path) -> None:
    """Found by an exploratory run: a match 1.9 MB into a minified bundle came back as the line's first
    800 characters, which did not hold it."""
    line = "function f0(a,b){return a+b}" * 300 + "var minimarker=1;" + "function g(a){return a}" * 100
    make_repo(tmp_path / "ws" / "web", {"bundle.min.js": line + "\n", "é.js": "é" * 700 + "minimarker\n"})
    items, _ = await grep(Workspace.open([tmp_path / "ws"]), '"minimarker"')
    assert len(items) == 2 and all("minimarker" in e.content for e in items)
    assert all(len(e.content) < 700 for e in items)


async def test_a_tracked_file_an_ignore_rule_matches_is_searched_and_indexed(tmp_path: Path) -> None:
    """Found by an exploratory run: rg walks by the ignore rules alone, so a committed file under a
    `.gitignore` pattern (a vendored `*.min.js`, a committed `generated/config.py`) was invisible to
    every expert while `git grep` found it. Untracked ignored files stay out."""
    from engine.index.files import list_paths
    from tests.conftest import git

    repo = make_repo(tmp_path / "ws" / "app", {"src/app.py": "X = 1\n", ".gitignore": "generated/\n"})
    (repo / "generated").mkdir()
    (repo / "generated" / "config.py").write_text("TRACKED_BUT_IGNORED = 'tracked marker'\n")
    git(repo, "add", "-f", "generated/config.py")
    git(repo, "commit", "-qm", "commit an ignored file on purpose")
    (repo / "generated" / "junk.py").write_text("UNTRACKED = 'tracked marker'\n")  # ignored and untracked
    ws = Workspace.open([repo])
    listed = list_paths(ws.projects[0])
    assert "generated/config.py" in listed and "generated/junk.py" not in listed
    items, _ = await grep(ws, '"tracked marker"')
    assert [e.path for e in items] == ["generated/config.py"]
    scoped, _ = await planned_and_found("ripgrep", ws, '"tracked marker"', scope=Scope(path="src"))
    assert scoped == []
