"""IndexedExpert: the shared half of every expert whose data ``engine index`` builds.

Such an expert keeps its index under ``<data>/index/<name>/`` with a manifest (file hashes,
HEAD at index time, files pending), searches the committed index synchronously in a worker
thread (so a deadline cancels the wait, never the event loop), flags items whose file changed
since it was indexed, and reports the index's freshness in the receipt. Subclasses implement
``indexer()``, ``plan()`` and ``_search_sync()``.
"""

from __future__ import annotations

from abc import abstractmethod
from pathlib import Path
from typing import Any

import anyio

from ..index.build import Indexer, changed_since_indexed, freshness
from ..types import Evidence, Project, Query
from .base import Expert, expert_errors

STALE = "file-changed-since-indexed"


class IndexedExpert(Expert):
    @property
    def _dir(self) -> Path:
        return self.env.index_dir(self.name)

    @property
    def manifest_path(self) -> Path:
        return self._dir / "manifest.json"

    def stale_flags(self, project: Project, path: str) -> tuple[str, ...]:
        """``(STALE,)`` when the file changed since this index saw it, else ``()``."""
        return (STALE,) if changed_since_indexed(self.manifest_path, project, path) else ()

    @abstractmethod
    def indexer(self) -> Indexer:
        """A fresh writer of this expert's index (``engine index`` opens, fills and closes it)."""

    @abstractmethod
    def _search_sync(self, query: Query, plan: dict[str, Any]) -> list[Evidence]:
        """Search the committed index (runs in a worker thread)."""

    async def search(self, query: Query, plan: dict[str, Any]) -> list[Evidence]:
        with expert_errors(self.name):
            return await anyio.to_thread.run_sync(self._search_sync, query, plan, abandon_on_cancel=True)

    def freshness(self, query: Query) -> dict[str, Any] | None:
        return freshness(self.manifest_path, query.projects)
