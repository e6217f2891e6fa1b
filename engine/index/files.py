"""Which files of a workspace are indexable, and their content hashes.

Listing uses ``rg --files`` (fast, respects ``.gitignore``), then the engine's own exclusions
(secrets, key material, ``.git/``, the data dir); content that is binary or that a secret
scanner would flag is skipped when read. Hashes are reused from the previous scan when size
and mtime are unchanged, so a re-scan of an unchanged tree reads no file contents.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import IndexingError
from ..types import Project
from ..workspace import MAX_FILE_BYTES, SECRET_GLOBS, is_excluded, looks_binary_or_secret, rg_binary


@dataclass(frozen=True, slots=True)
class SourceFile:
    project: str
    path: str  # posix, relative to the project root
    size: int
    mtime_ns: int
    sha256: str

    @property
    def key(self) -> str:
        return f"{self.project}:{self.path}"


def list_paths(project: Project) -> list[str]:
    argv = [rg_binary(), "--files", "--no-config", "--max-filesize", str(MAX_FILE_BYTES)]
    for g in SECRET_GLOBS:
        argv += ["--glob", f"!{g}"]
    try:
        res = subprocess.run(argv, cwd=project.root, capture_output=True, check=False)
    except OSError as exc:  # rg missing or not executable, project folder gone
        raise IndexingError(f"cannot list the files of {project.root}: {exc}") from exc
    if res.returncode not in (0, 1):
        raise IndexingError(f"rg --files failed in {project.root}: {res.stderr.decode(errors='replace')[-300:]}")
    paths = []
    for raw in res.stdout.decode("utf-8", "replace").splitlines():
        p = raw[2:] if raw.startswith("./") else raw
        if p and not is_excluded(p):
            paths.append(p)
    return sorted(paths)


def read_indexable(root: Path, path: str) -> bytes | None:
    """The file's bytes, or None when it is gone, too big, binary or holds a secret."""
    try:
        data = (root / path).read_bytes()
    except OSError:
        return None
    if len(data) > MAX_FILE_BYTES or looks_binary_or_secret(data):
        return None
    return data


def scan(
    projects: tuple[Project, ...] | list[Project], previous: Mapping[str, SourceFile] | None = None
) -> dict[str, SourceFile]:
    """Current indexable files by key; hashes only what changed since ``previous``."""
    previous = previous or {}
    out: dict[str, SourceFile] = {}
    for project in projects:
        for path in list_paths(project):
            full = project.root / path
            try:
                st = full.stat()
            except OSError:
                continue
            key = f"{project.name}:{path}"
            old = previous.get(key)
            if old and old.size == st.st_size and old.mtime_ns == st.st_mtime_ns:
                out[key] = old
                continue
            data = read_indexable(project.root, path)
            if data is None:
                continue
            out[key] = SourceFile(project.name, path, st.st_size, st.st_mtime_ns, hashlib.sha256(data).hexdigest())
    return out
