"""IndexedExpert: the shared half of every expert whose data ``engine index`` builds.

Such an expert keeps its index under ``<data>/index/<name>/`` with a manifest (file hashes,
HEAD at index time, files pending), searches the committed index synchronously in a worker
thread (so a deadline cancels the wait, never the event loop), flags items whose file changed
since it was indexed, and reports the index's freshness in the receipt. Subclasses implement
``indexer()``, ``plan()`` and ``_search_sync()``, and may narrow ``accepts()`` (the files their
index wants) and set ``slow_index`` (indexed after the fast ones, so it never holds them back).

``engine index``, ``engine doctor`` and ``engine eval`` find index-backed experts with
``isinstance(expert, IndexedExpert)`` (or the class flag ``needs_index``), never by probing
for methods.
"""

from __future__ import annotations

import os
from abc import abstractmethod
from pathlib import Path
from typing import Any, ClassVar

import anyio

from ..errors import ExpertOutputError
from ..index.build import Indexer, changed_since_indexed, freshness
from ..index.files import SourceFile
from ..types import Evidence, Project, Query
from .base import Expert, expert_errors

STALE = "file-changed-since-indexed"


class IndexedExpert(Expert):
    needs_index: ClassVar[bool] = True
    live: ClassVar[bool] = False
    slow_index: ClassVar[bool] = False

    @abstractmethod
    def indexer(self) -> Indexer:
        """The writer ``engine index`` drives for this expert's index (cheap to build; opened by the indexer)."""

    def accepts(self, f: SourceFile) -> bool:
        """Whether ``f`` belongs in this expert's index (called by ``engine index``); every file by default."""
        return True

    @property
    def _dir(self) -> Path:
        return self.env.index_dir(self.name)

    @property
    def manifest_path(self) -> Path:
        return self._dir / "manifest.json"

    def stale_flags(self, project: Project, path: str) -> tuple[str, ...]:
        """``(STALE,)`` when the file changed since this index saw it, else ``()``. A file the
        manifest does not know and that is gone is stale too: an index interrupted between its
        data commit and its manifest save keeps a deleted file's items, which came back unflagged."""
        changed = changed_since_indexed(self.manifest_path, project, path)
        if changed is None:
            changed = not os.path.lexists(os.path.join(project.root, path))
        return (STALE,) if changed else ()

    @abstractmethod
    def _search_sync(self, query: Query, plan: dict[str, Any]) -> list[Evidence]:
        """Search the committed index (runs in a worker thread)."""

    async def search(self, query: Query, plan: dict[str, Any]) -> list[Evidence]:
        try:
            with expert_errors(self.name):
                return await anyio.to_thread.run_sync(self._search_sync, query, plan, abandon_on_cancel=True)
        except ExpertOutputError as exc:
            # an index file that reads as the wrong shape is damaged (truncated, overwritten): say
            # which and what repairs it — the raw "Data corrupted" / "file is not a database" did not
            raise ExpertOutputError(
                f"the {self.name} index cannot be read ({exc.message}); fix: delete {self._dir} and run "
                f"`engine index --only {self.name}`",
                expert=self.name,
            ) from exc

    def freshness(self, query: Query) -> dict[str, Any] | None:
        return freshness(self.manifest_path, query.projects, query.heads)
