"""Turn a suite snapshot into a workspace folder the router can search, once, cached by content.

Each snapshot's docs are written as files (at ``metadata.path``, else at the title when it looks
like a path, else ``<doc id><ext>``) into ``<eval home>/snapshots/<content hash>/<snapshot>/``,
with the snapshot's data dir (indexes, signing key) beside it in ``data/``. The folder name is
the sha256 of every (path, text) pair, so an unchanged snapshot is written and indexed exactly
once, however many suites, runs or arms use it; a changed one gets a new folder. Writing goes to
a temporary folder renamed into place, so an interrupted run never leaves a half-written
snapshot that later runs would trust.

The eval home is never inside the suite (public suites live on read-only storage): it defaults
to ``$ENGINE_EVAL_HOME``, else ``$XDG_CACHE_HOME/engine-eval``, else ``~/.cache/engine-eval``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ..index.build import IndexReport
from ..indexing import index_workspace
from ..spec import ConfigSet
from ..workspace import Workspace
from .suite import Doc

#: bump when the file layout written for a snapshot changes (invalidates every cached snapshot)
LAYOUT_VERSION = "1"
_UNSAFE = re.compile(r"[^A-Za-z0-9._@+-]+")


def eval_home(override: Path | None = None) -> Path:
    """Where snapshots, arm configs, the eval store and default run folders live (must be writable)."""
    if override is not None:
        return override.expanduser().resolve()
    env = os.environ.get("ENGINE_EVAL_HOME")
    if env:
        return Path(env).expanduser().resolve()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return (base / "engine-eval").resolve()


def safe_name(text: str) -> str:
    return _UNSAFE.sub("_", text).strip("._") or "doc"


def _relative_ok(path: str) -> bool:
    p = PurePosixPath(path)
    return bool(path) and not p.is_absolute() and ".." not in p.parts and "" not in p.parts and "\\" not in path


def doc_paths(docs: Iterable[Doc], default_ext: str) -> dict[str, str]:
    """``file path → doc id`` for one snapshot; every doc gets a distinct, safe relative path."""
    out: dict[str, str] = {}
    for d in docs:
        candidates = [d.path or "", d.title if PurePosixPath(d.title).suffix and " " not in d.title else ""]
        path = next((c.strip("/") for c in candidates if c and _relative_ok(c.strip("/"))), "")
        if not path:
            path = safe_name(d.id) + default_ext
        if path in out:  # two docs claim one path: keep both, the later one renamed by its id
            p = PurePosixPath(path)
            path = str(p.with_name(f"{p.stem}__{safe_name(d.id)}{p.suffix}"))
        out[path] = d.id
    return out


@dataclass(frozen=True)
class SnapshotWorkspace:
    """One materialized snapshot: its project folder, data dir and the file → doc id map."""

    snapshot: str
    root: Path  # <eval home>/snapshots/<hash>/
    project_dir: Path  # root/<snapshot name>: the workspace (one project, named like the snapshot)
    data_dir: Path
    path_to_doc: dict[str, str]
    content_hash: str

    def workspace(self) -> Workspace:
        return Workspace.open([self.project_dir], data_dir=self.data_dir)

    def doc_id(self, item: Mapping[str, Any]) -> str | None:
        """The corpus id of an answer item (its path inside the one project), if it is a doc."""
        return self.path_to_doc.get(item.get("path") or "")


def content_hash(paths: dict[str, str], texts: dict[str, str]) -> str:
    h = hashlib.sha256(f"layout {LAYOUT_VERSION}\n".encode())
    for path in sorted(paths):
        h.update(path.encode("utf-8", "surrogatepass") + b"\0")
        h.update(hashlib.sha256(texts[paths[path]].encode("utf-8", "surrogatepass")).digest())
    return h.hexdigest()


def materialize(snapshot: str, docs: list[Doc], home: Path, default_ext: str = ".py") -> tuple[SnapshotWorkspace, bool]:
    """Write (or reuse) the snapshot's workspace. Returns it and whether it was written now."""
    paths = doc_paths(docs, default_ext)
    texts = {d.id: d.text for d in docs}
    digest = content_hash(paths, texts)
    root = home / "snapshots" / digest[:24]
    name = safe_name(snapshot)
    made = False
    if not (root / "paths.json").is_file():
        tmp = root.with_name(f"{root.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        project = tmp / name
        for path, doc_id in paths.items():
            target = project / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(texts[doc_id].encode("utf-8", "replace"))
        (tmp / "data").mkdir(parents=True, exist_ok=True)
        (tmp / "paths.json").write_text(json.dumps({"snapshot": snapshot, "paths": paths}, ensure_ascii=False))
        root.parent.mkdir(parents=True, exist_ok=True)
        try:
            tmp.rename(root)
            made = True
        except OSError:  # another process materialized it first: theirs is as good as ours
            shutil.rmtree(tmp, ignore_errors=True)
    saved = json.loads((root / "paths.json").read_text())
    project_dirs = [p for p in root.iterdir() if p.is_dir() and p.name != "data"]
    project_dir = root / name if (root / name).is_dir() else project_dirs[0]
    return SnapshotWorkspace(snapshot, root, project_dir, root / "data", dict(saved["paths"]), digest), made


def index_snapshot(
    sw: SnapshotWorkspace, cfg: ConfigSet, experts: set[str], progress: bool = False
) -> list[IndexReport]:
    """Bring the snapshot's indexes for ``experts`` up to date (a no-op scan when already indexed)."""
    if not experts:
        return []
    return index_workspace(sw.workspace(), cfg, only=sorted(experts), progress=progress)
