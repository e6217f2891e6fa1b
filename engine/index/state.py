"""What the query path and the indexers share about an index's state: locks, HEADs, freshness.

Readers (the query path) never lock; they read each index's manifest and catch-up request
(cached by mtime, so a question costs a couple of ``stat`` calls) and HEAD straight from
``.git`` (no subprocess on the hot path).

Locks: one indexing run per data dir holds ``index.lock`` for the scan and the fast indexes; a
slow index (embeddings) has its own, ``index.<name>.lock``, held by whoever writes it — a
foreground run or the background catch-up (:mod:`engine.catchup`). The holder's pid is in the file.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..types import Project
from .files import read_indexable
from .manifest import CatchUp, Manifest

CATCHUP_FILE = "catchup.json"  # <index dir>/catchup.json: the pending background request


@contextlib.contextmanager
def index_lock(data_dir: Path, name: str | None = None, *, blocking: bool = True) -> Iterator[bool]:
    """Hold ``index.lock`` (scan + fast indexes) or, with ``name``, ``index.<name>.lock`` (one slow
    index). Yields False without waiting when ``blocking`` is off and another process holds it.
    The holder's pid is written into the file (``lock_holder`` reads it). Readers never lock."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / (f"index.{name}.lock" if name else "index.lock")
    with open(path, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            fh.seek(0)
            fh.truncate()
            fh.write(f"{os.getpid()}\n")
            fh.flush()
            yield True
        finally:
            fh.seek(0)
            fh.truncate()
            fcntl.flock(fh, fcntl.LOCK_UN)


def lock_holder(data_dir: Path, name: str | None = None) -> int | None:
    """Pid of the live process holding that index lock, or None. Reads the pid the holder wrote
    (never probes with flock: a probe could make a real writer's non-blocking attempt fail)."""
    path = data_dir / (f"index.{name}.lock" if name else "index.lock")
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if not text.isdigit():
        return None
    pid = int(text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None  # killed while holding it: the kernel released the lock, the pid stayed
    except PermissionError:
        pass  # alive, another user's
    return pid


def read_head(root: Path) -> str | None:
    """HEAD's sha read from the .git files directly (no subprocess: it runs on the query path)."""
    git = root / ".git"
    try:
        if git.is_file():  # worktree / submodule: "gitdir: <path>"
            git = (root / git.read_text().split(":", 1)[1].strip()).resolve()
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref:"):
            return head or None
        ref = head[4:].strip()
        ref_file = git / ref
        if ref_file.is_file():
            return ref_file.read_text().strip() or None
        common = git
        if (git / "commondir").is_file():
            common = (git / (git / "commondir").read_text().strip()).resolve()
            if (common / ref).is_file():
                return (common / ref).read_text().strip() or None
        packed = common / "packed-refs"
        if packed.is_file():
            for line in packed.read_text().splitlines():
                if line.endswith(" " + ref):
                    return line.split(" ", 1)[0]
    except OSError:
        return None
    return None


def _pending(manifest_path: Path) -> tuple[Manifest, int]:
    """The manifest and how many files it still lacks, counting a catch-up request it has not
    started on yet (``engine index`` handed the work to a background process a moment ago)."""
    m = Manifest.load(manifest_path)
    req = CatchUp.load(manifest_path.parent / CATCHUP_FILE)
    if req.generation > m.generation:
        return m, max(m.pending, req.files_pending)
    return m, m.pending


def catching_up(manifest_path: Path) -> bool:
    """Is this index partial (files seen by ``engine index`` but not in it yet)? Two cached stats."""
    return _pending(manifest_path)[1] > 0


def freshness(manifest_path: Path, projects: tuple[Project, ...] | list[Project]) -> dict[str, Any]:
    """The receipt's view of one index: indexed sha vs HEAD per project, and how far it got."""
    m, pending = _pending(manifest_path)
    per_project = {}
    for p in projects:
        if not p.is_git:
            continue
        indexed, head = m.heads.get(p.name), read_head(p.root)
        per_project[p.name] = {"indexed_sha": indexed, "head_sha": head, "stale": indexed != head}
    out: dict[str, Any] = {
        "indexed_at": m.updated_at or None,
        "files_indexed": len(m.files),
        "files_pending": pending,
        "partial": pending > 0,
        "projects": per_project,
    }
    if pending:  # how far a catching-up index got: share of the files it knows of
        out["progress"] = round(len(m.files) / (len(m.files) + pending), 3)
    return out


def changed_since_indexed(manifest_path: Path, project: Project, path: str) -> bool | None:
    """Has this file changed since it was indexed? None when the index does not know the file."""
    m = Manifest.load(manifest_path)
    rec = m.files.get(f"{project.name}:{path}")
    if rec is None:
        return None
    try:
        st = (project.root / path).stat()
    except OSError:
        return True  # deleted since
    if st.st_size == rec.get("size") and st.st_mtime_ns == rec.get("mtime_ns"):
        return False
    data = read_indexable(project.root, path)
    return data is None or hashlib.sha256(data).hexdigest() != rec.get("sha256")
