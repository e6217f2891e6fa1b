"""History by file name (issue 12 item 3), over real git repos with real history.

A bare or partial file name is resolved against the files at HEAD (all matches, each labelled in
the sub-query) before ``git log --``; a commit item points at the file the question named, with
that commit's diff hunk for it as content, bounded and redacted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.experts.git_files import MAX_HUNK_CHARS, Resolved, path_matches, resolve
from engine.types import Evidence, Scope
from engine.workspace import Workspace
from tests.conftest import commit_files, git, make_repo
from tests.external_support import planned_and_found
from tests.helpers import ask

pytestmark = pytest.mark.anyio


def commit(root: Path, files: dict[str, str], message: str, date: str) -> str:
    """One commit of ``files`` authored at ``date`` (the repo is made by the first)."""
    if not (root / ".git").exists():
        make_repo(root, files, message, date)
        return git(root, "rev-parse", "HEAD").strip()
    return commit_files(root, files, message, date)


@pytest.fixture
def requests_repo(tmp_path: Path) -> Path:
    """A repo shaped like requests: the file lives in src/requests/, HISTORY.md sorts first in every commit."""
    root = tmp_path / "ws" / "requests"
    commit(
        root,
        {"HISTORY.md": "# History\n", "src/requests/sessions.py": "class Session:\n    pass\n", "README.md": "hi\n"},
        "Initial import",
        "2024-01-01T10:00:00+00:00",
    )
    commit(
        root,
        {"HISTORY.md": "# History\n\n1.1\n", "src/requests/sessions.py": "class Session:\n    retries = 3\n"},
        "Give sessions a retry count",
        "2024-01-02T10:00:00+00:00",
    )
    commit(root, {"HISTORY.md": "# History\n\n1.2\n", "README.md": "hello\n"}, "Docs only", "2024-01-03T10:00:00+00:00")
    commit(
        root,
        {
            "HISTORY.md": "# History\n\n1.3\n",
            "src/requests/sessions.py": "class Session:\n    retries = 5\n    timeout = 30\n",
            "tests/sessions.py": "# a second file of the same name\n",
        },
        "Raise the retry count and add a timeout",
        "2024-01-04T10:00:00+00:00",
    )
    return root


async def run_git(ws: Workspace, question: str, scope: Scope | None = None) -> tuple[list[Evidence], dict[str, Any]]:
    return await planned_and_found("git", ws, question, precision="history", scope=scope)


async def test_a_bare_file_name_finds_the_commits_that_changed_it(requests_repo: Path) -> None:
    ws = Workspace.open([requests_repo])
    items, plan = await run_git(ws, "which commit last changed sessions.py")
    # resolved against the files at HEAD: both files named sessions.py, each labelled
    assert plan["resolved"] == [
        {"name": "sessions.py", "project": "requests", "match": "basename", "path": "src/requests/sessions.py"},
        {"name": "sessions.py", "project": "requests", "match": "basename", "path": "tests/sessions.py"},
    ]
    # the question's own words ("commit", "last", "changed") and the file's are not message searches
    assert [s["kind"] for s in plan["searches"]] == ["file-history"]
    subjects = [e.meta["subject"] for e in items]
    assert subjects[0] == "Raise the retry count and add a timeout"  # the last change first
    assert "Docs only" not in subjects
    top = items[0]
    # the item points at the named file, not the commit's first file (HISTORY.md)
    assert top.path == "src/requests/sessions.py"
    assert "+    timeout = 30" in top.content and "-    retries = 3" in top.content
    assert "HISTORY" not in top.content.split("\n", 1)[1]  # only that file's hunk
    assert (top.start_line, top.end_line) == (1, 3)  # the hunk's new-side lines
    assert top.meta["diff_of"] == "src/requests/sessions.py"
    assert "HISTORY.md" in top.meta["files"]  # the file list stays complete
    first = next(e for e in items if e.meta["subject"] == "Give sessions a retry count")
    assert first.path == "src/requests/sessions.py" and "+    retries = 3" in first.content


async def test_a_partial_path_resolves_to_its_one_file(requests_repo: Path) -> None:
    ws = Workspace.open([requests_repo])
    items, plan = await run_git(ws, "who changed requests/sessions.py")
    assert plan["resolved"] == [
        {"name": "requests/sessions.py", "project": "requests", "match": "suffix", "path": "src/requests/sessions.py"}
    ]
    assert {e.path for e in items} == {"src/requests/sessions.py"}
    assert all(e.meta["found_by"] == ["file-history"] for e in items)


async def test_message_words_search_only_the_named_file(requests_repo: Path) -> None:
    ws = Workspace.open([requests_repo])
    items, plan = await run_git(ws, "when was timeout added to requests/sessions.py")
    assert {"kind": "message", "arg": "--grep=timeout"} in plan["searches"]
    assert items[0].meta["subject"] == "Raise the retry count and add a timeout"
    assert sorted(items[0].meta["found_by"]) == ["file-history", "message"]


async def test_a_deleted_file_is_searched_by_history_glob(requests_repo: Path) -> None:
    commit(requests_repo, {"src/requests/old_auth.py": "OLD = 1\n"}, "Add old auth", "2024-01-05T10:00:00+00:00")
    git(requests_repo, "rm", "-q", "src/requests/old_auth.py")
    git(requests_repo, "commit", "-q", "-m", "Drop old auth")
    ws = Workspace.open([requests_repo])
    items, plan = await run_git(ws, "which commit changed old_auth.py")
    assert plan["resolved"] == [
        {"name": "old_auth.py", "project": "requests", "match": "history-glob", "pathspec": ":(glob)**/old_auth.py"}
    ]
    assert [e.meta["subject"] for e in items] == ["Drop old auth", "Add old auth"]
    assert all(e.path == "src/requests/old_auth.py" for e in items)
    assert "-OLD = 1" in items[0].content and "+OLD = 1" in items[1].content


async def test_scope_path_limits_the_matches(requests_repo: Path) -> None:
    ws = Workspace.open([requests_repo])
    _, plan = await run_git(ws, "which commit last changed sessions.py", scope=Scope(path="src"))
    assert [r["path"] for r in plan["resolved"]] == ["src/requests/sessions.py"]


async def test_question_text_is_never_pathspec_magic(requests_repo: Path) -> None:
    # a name with glob characters reaches git quoted: it matches itself only, never every file
    r = Resolved("*.py", "requests", "history-glob")
    assert r.pathspec == r":(glob)**/\*.py"
    assert Resolved("x.py", "p", "exact", path=":(top)x.py").pathspec == ":(literal):(top)x.py"
    assert not path_matches("sessions.py", "src/requests/my_sessions.py")


def test_resolve_labels_and_caps() -> None:
    files = ["a.py", "pkg/a.py", ".env", "node_modules/x/a.py"] + [f"m{i}/b.py" for i in range(30)]
    found, dropped = resolve("p", ["a.py", "b.py", ".env"], files)
    labels = [(r.path, r.match) for r in found if r.path and r.path.endswith("a.py")]
    assert labels == [("a.py", "exact"), ("pkg/a.py", "basename")]  # excluded folders never match
    assert len([r for r in found if r.path and r.path.endswith("b.py")]) == 20 and dropped == 10
    assert not [r for r in found if r.name == ".env"]  # a withheld name is never resolved, nor globbed


async def test_a_long_diff_is_bounded(tmp_path: Path) -> None:
    root = tmp_path / "big"
    commit(root, {"big.py": "x = 0\n"}, "Start", "2024-01-01T10:00:00+00:00")
    commit(root, {"big.py": "".join(f"line_{i} = {i}\n" for i in range(2000))}, "Grow", "2024-01-02T10:00:00+00:00")
    items, _ = await run_git(Workspace.open([root]), "which commit changed big.py")
    assert items[0].meta["subject"] == "Grow"
    hunk = items[0].content.split("\n", 1)[1]
    assert len(hunk) <= MAX_HUNK_CHARS + 2 and hunk.endswith("…")


def test_end_to_end_commit_item_names_the_file_and_redacts_its_hunk(tmp_path: Path, config_dir: Path) -> None:
    root = tmp_path / "ws" / "svc"
    commit(root, {"HISTORY.md": "h\n", "src/svc/settings.py": "DEBUG = False\n"}, "Start", "2024-01-01T10:00:00+00:00")
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    leaked = {"HISTORY.md": "h2\n", "src/svc/settings.py": f"DEBUG = False\nGITHUB_TOKEN = '{token}'\n"}
    commit(root, leaked, "Wire the deploy token", "2024-01-02T10:00:00+00:00")
    # while the file holds the token it is withheld: the commit item keeps no hunk of it and points elsewhere
    r = ask(config_dir, root, "which commit last changed settings.py")
    top = next(it for it in r.response["items"] if it["kind"] == "commit")
    assert top["meta"]["subject"] == "Wire the deploy token" and top["path"] != "src/svc/settings.py"
    assert token not in json.dumps(r.response) and "GITHUB_TOKEN" not in top["content"]
    assert r.response["receipt"]["per_expert"]["git"]["withheld"]["secret"] >= 1

    commit(root, {"src/svc/settings.py": "DEBUG = False\n"}, "Move the token to the vault", "2024-01-03T10:00:00+00:00")
    r = ask(config_dir, root, "which commit last changed settings.py")
    receipt = r.response["receipt"]
    assert receipt["classifier"]["class"] == "history"
    assert receipt["sub_queries"]["git"]["resolved"] == [
        {"name": "settings.py", "project": "svc", "match": "basename", "path": "src/svc/settings.py"}
    ]
    commits = [it for it in r.response["items"] if it["kind"] == "commit"]
    assert [c["meta"]["subject"] for c in commits[:2]] == ["Move the token to the vault", "Wire the deploy token"]
    assert all(c["path"] == "src/svc/settings.py" for c in commits[:2])
    # the hunk that removed the token is shown, the token itself redacted
    assert "-GITHUB_TOKEN" in commits[0]["content"] and "[REDACTED]" in commits[0]["content"]
    assert "redacted" in commits[0]["flags"] and token not in json.dumps(r.response)


async def test_a_shallow_clones_oldest_commit_is_flagged_history_truncated(requests_repo: Path, tmp_path: Path) -> None:
    """Found by an exploratory run: in a `git clone --depth 1` the one commit holds every file as if
    it had added it, and was shown as where the code was introduced."""
    shallow = tmp_path / "shallow" / "requests"
    shallow.parent.mkdir()
    git(shallow.parent, "clone", "-q", "--depth", "1", f"file://{requests_repo}", str(shallow))
    items, _ = await run_git(Workspace.open([shallow]), "when was sessions.py changed")
    assert items and all("history-truncated" in e.flags for e in items)
    full, _ = await run_git(Workspace.open([requests_repo]), "when was sessions.py changed")
    assert full and not any("history-truncated" in e.flags for e in full)
