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


def test_every_expert_has_the_same_size_limit(tmp_path: Path) -> None:
    """Found by an exploratory run: rg's `--max-filesize 2M` is 2,097,152 bytes, the indexers'
    limit 2,000,000; a 2,049,935-byte file was found by ripgrep alone."""
    import anyio

    from tests.external_support import planned_and_found

    big = "x = 1\n" * 340_000 + "unique_marker_zq = 2\n"  # ~2.04 MB
    repo = make_repo(tmp_path / "ws" / "p", {"small.py": "unique_marker_zq = 1\n", "big.py": big})
    assert 2_000_000 < len(big.encode()) < 2_097_152
    assert list_paths(Workspace.open([repo]).projects[0]) == ["small.py"]
    items, _ = anyio.run(planned_and_found, "ripgrep", Workspace.open([repo]), '"unique_marker_zq"')
    assert [e.path for e in items] == ["small.py"]
