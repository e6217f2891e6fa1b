"""Workspace mode of ``engine eval``: the corpus is a live workspace of git repos, not a BEIR corpus.

``engine eval SUITE --workspace DIR`` asks every question of the suite through the normal
:class:`~engine.runtime.Router` on ``DIR`` itself (one project per git repo, the data dir and
indexes ``engine index -w DIR`` built), the way a user or a hidden check with ``engine run``
would. Qrels name files as ``<project>/<path inside the project>``; an answer item maps to that
id directly, so there is no materialized copy and no ``corpus.jsonl``. The ``bm25-peer`` arm
reads the same indexable files (the engine's own listing: ``.gitignore``, exclusions, no
binaries or secrets), so the baseline and the router search the same corpus.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..index.build import read_head
from ..index.files import read_indexable, scan
from ..workspace import Workspace
from .suite import ALL, Doc, Suite, SuiteError


@dataclass(frozen=True)
class LiveWorkspace:
    """The workspace an eval searches in place; quacks like a materialized snapshot for the runner."""

    snapshot: str
    ws: Workspace
    doc_ids: frozenset[str]  # every indexable file as project/path
    heads: dict[str, str | None]  # project → git HEAD (what was searched)

    def workspace(self) -> Workspace:
        return self.ws

    def doc_id(self, item: Mapping[str, Any]) -> str | None:
        project, path = item.get("project"), item.get("path")
        return f"{project}/{path}" if project and path else None


def open_live(roots: Sequence[Path]) -> LiveWorkspace:
    """Open the workspace (its default data dir, as ``engine index -w`` uses) and list its files."""
    ws = Workspace.open(list(roots))
    files = scan(ws.projects)
    ids = frozenset(f"{f.project}/{f.path}" for f in files.values())
    return LiveWorkspace(ALL, ws, ids, {p.name: read_head(p.root) for p in ws.projects})


def peer_docs(live: LiveWorkspace) -> list[Doc]:
    """Every indexable file as a doc for the ``bm25-peer`` arm (title = path, as the BEIR suites do)."""
    roots = {p.name: p.root for p in live.ws.projects}
    docs = []
    for doc_id in sorted(live.doc_ids):
        project, _, path = doc_id.partition("/")
        data = read_indexable(roots[project], path)
        if data is not None:
            docs.append(Doc(doc_id, path, data.decode("utf-8", "replace"), ALL, path))
    return docs


def check_qrels(suite: Suite, live: LiveWorkspace, *, drop: bool = False) -> list[str]:
    """Every relevant corpus id must be a file the engine can return, else the score is meaningless.

    With ``drop``, such ids (e.g. files the secrets policy withholds) are removed from the qrels
    instead, a query left with no relevant file is removed too, and the dropped ids are returned
    (the run's metrics list them)."""
    missing = sorted({cid for rel in suite.qrels.values() for cid in rel if cid not in live.doc_ids})
    if missing and drop:
        gone = set(missing)
        suite.qrels = {
            q: kept for q, rel in suite.qrels.items() if (kept := {c: g for c, g in rel.items() if c not in gone})
        }
        suite.queries = [q for q in suite.queries if q.id in suite.qrels]
        return missing
    if missing:
        projects = sorted(p.name for p in live.ws.projects)
        raise SuiteError(
            f"{len(missing)} qrels corpus ids are not indexable files of the workspace (projects {projects}), "
            f"e.g. {missing[:3]}; corpus ids are <project>/<path> (--drop-unreturnable scores without them)"
        )
    return []
