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
import threading
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ..datadir import ensure_data_dir
from ..types import Project
from .files import read_indexable
from .manifest import CatchUp, Manifest

CATCHUP_FILE = "catchup.json"  # <index dir>/catchup.json: the pending background request


@contextlib.contextmanager
def index_lock(data_dir: Path, name: str | None = None, *, blocking: bool = True) -> Iterator[bool]:
    """Hold ``index.lock`` (scan + fast indexes) or, with ``name``, ``index.<name>.lock`` (one slow
    index). Yields False without waiting when ``blocking`` is off and another process holds it.
    The holder's pid is written into the file (``lock_holder`` reads it). Readers never lock."""
    ensure_data_dir(data_dir)  # 0700 with a .gitignore of `*`, whoever creates it first
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
            fh.write(f"{os.getpid()} {_started(os.getpid()) or ''}\n")
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
    pid_text, _, started = text.partition(" ")
    if not pid_text.isdigit():
        return None
    pid = int(pid_text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None  # killed while holding it: the kernel released the lock, the pid stayed
    except PermissionError:
        pass  # alive, another user's
    if started and _started(pid) not in (None, started.strip()):
        # the pid was reused (a container restart counts pids from 1 again): a live process that
        # is not the holder kept "engine index" from starting the background catch-up, for good
        return None
    return pid


def _started(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22): with
    the pid it names one process, never a later one given the same pid. None off Linux."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    fields = stat.rsplit(b")", 1)[-1].split()
    return fields[19].decode() if len(fields) > 19 else None


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
    if req.generation > m.catchup:
        return m, max(m.pending, req.files_pending)
    return m, m.pending


def catching_up(manifest_path: Path) -> bool:
    """Is this index partial (files seen by ``engine index`` but not in it yet)? Two cached stats."""
    return _pending(manifest_path)[1] > 0


def current_heads(projects: Iterable[Project]) -> dict[str, str | None]:
    """HEAD's sha of every git project."""
    return {p.name: read_head(p.root) for p in projects if p.is_git}


class Heads(Mapping[str, str | None]):
    """The git projects' HEADs for one request, read on first use (by the first index-backed
    expert's freshness, in its worker thread: ~30 µs a project, off the router's own path), then
    shared by every expert and stated once in the receipt."""

    def __init__(self, projects: Iterable[Project]) -> None:
        self._projects = tuple(projects)
        self._map: dict[str, str | None] | None = None
        self._lock = threading.Lock()

    def _read(self) -> dict[str, str | None]:
        with self._lock:
            if self._map is None:
                self._map = current_heads(self._projects)
            return self._map

    def read(self) -> dict[str, str | None] | None:
        """The HEADs if something asked for them, else None (nothing is read here)."""
        return self._map

    def __getitem__(self, key: str) -> str | None:
        return self._read()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._read())

    def __len__(self) -> int:
        return len(self._read())


def freshness(
    manifest_path: Path,
    projects: tuple[Project, ...] | list[Project],
    heads: Mapping[str, str | None] | None = None,
) -> dict[str, Any]:
    """The receipt's view of one index: when it was built, files pending (a catch-up request not
    yet started counts), how far a catching-up index got, and the projects whose indexed sha is not
    their HEAD (``stale``: project → indexed sha; empty when all are current), and those it was
    never built for (``not_indexed``, only when there are some).

    ``heads`` are the projects' current HEADs as the request read them once
    (:func:`current_heads`, stated once in the receipt); read here when not given. The receipt
    stays bounded: nothing is repeated per expert and project unless it is stale."""
    m, pending = _pending(manifest_path)
    if heads is None:
        heads = current_heads(projects)
    stale = {
        p.name: m.heads.get(p.name)
        for p in projects
        if p.is_git and p.name in heads and m.heads.get(p.name) != heads[p.name]
    }
    out: dict[str, Any] = {
        "indexed_at": m.updated_at or None,
        "files_indexed": len(m.files),
        "files_pending": pending,
        "partial": pending > 0,
        "stale": stale,
    }
    if pending:  # how far a catching-up index got: share of the files it knows of
        out["progress"] = round(len(m.files) / (len(m.files) + pending), 3)
    # git projects this index was never built for: indexed under other names (another set of
    # roots names two repos of one name by their parent folder too) or added to the workspace since
    missing = [p.name for p in projects if p.is_git and m.indexer_id and p.name not in m.heads]
    if missing:
        out["not_indexed"] = missing
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
