"""The files an index sees: every name rg lists, whatever characters it holds."""

from __future__ import annotations

from pathlib import Path

from engine.index.files import list_paths
from engine.workspace import Workspace
from tests.conftest import make_repo


def test_file_names_with_a_newline_or_spaces_are_listed_whole(tmp_path: Path) -> None:
    """Found by an exploratory run: `rg --files` output split on newlines cut `src/new\\nline.py`
    in two, so no index ever held it."""
    repo = make_repo(tmp_path / "ws" / "p", {"a.py": "x = 1\n", "src/new\nline.py": "y = 2\n", "sp ace.py": "z = 3\n"})
    assert list_paths(Workspace.open([repo]).projects[0]) == ["a.py", "sp ace.py", "src/new\nline.py"]
