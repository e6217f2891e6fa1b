"""Which files of a workspace are indexable, and their content hashes.

Listing uses ``rg --files`` (fast, respects ``.gitignore``, never follows a symlink) plus the files
git tracks although an ignore rule matches them (rg walks by the rules alone), then the
engine's own exclusions (``.git/``, the data dir, the secrets policy's name rules); a file is read
only through its real path inside its project, and skipped when binary or when the secrets
policy withholds it (:mod:`engine.secrets`, verdicts cached). Hashes are reused from the previous
scan when size and mtime are unchanged, so a re-scan of an unchanged tree reads no file contents.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import IndexingError
from ..secrets import SecretsPolicy
from ..types import Project
from ..workspace import (
    DEFAULT_NAMES,
    MAX_FILE_BYTES,
    contained,
    in_excluded_dir,
    is_excluded,
    looks_binary,
    rg_binary,
)


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


#: root → (stamp of the files git's ignore answer depends on, tracked files its rules ignore)
_TRACKED_IGNORED: dict[str, tuple[tuple[int, ...], tuple[str, ...]]] = {}
#: more than this many tracked-but-ignored files are not all handed to rg by name (argv length)
MAX_TRACKED_IGNORED = 2000


def tracked_ignored(project: Project) -> tuple[str, ...]:
    """Files git tracks although an ignore rule matches them (``git ls-files --cached --ignored
    --exclude-standard``): ``rg`` walks by the ignore rules alone, so a committed file under
    ``*.min.js`` or a committed ``generated/config.py`` was invisible to every expert while ``git
    grep`` found it. Excluded folders, excluded names and links leading out of the project are
    left out here, once: the list is remembered until git's index or the top ignore files change
    (one ``stat`` each on the query path), and rg follows a link it is handed by name."""
    if not project.is_git:
        return ()
    known = tracked_ignored_known(project)
    if known is not None:
        return known
    stamp = _ignore_stamp(project)
    try:
        res = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--ignored", "--exclude-standard"],
            cwd=project.root,
            capture_output=True,
            check=False,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ()
    names = res.stdout.decode("utf-8", "replace").split("\0") if res.returncode == 0 else []
    found = tuple(
        sorted(
            n
            for n in names
            if n and not in_excluded_dir(n) and not is_excluded(n) and contained(project.root, n) is not None
        )
    )
    if stamp:
        _TRACKED_IGNORED[str(project.root)] = (stamp, found)
    return found


def tracked_ignored_known(project: Project) -> tuple[str, ...] | None:
    """:func:`tracked_ignored` when it is remembered and still current (no subprocess), else None."""
    if not project.is_git:
        return ()
    stamp = _ignore_stamp(project)
    cached = _TRACKED_IGNORED.get(str(project.root))
    return cached[1] if stamp and cached is not None and cached[0] == stamp else None


def _ignore_stamp(project: Project) -> tuple[int, ...]:
    """mtimes of git's index and the top ignore files; () when ``.git`` is a file (worktree,
    submodule: not remembered)."""
    git_dir = project.root / ".git"
    if not git_dir.is_dir():
        return ()
    return tuple(_mtime(f) for f in (git_dir / "index", project.root / ".gitignore", git_dir / "info" / "exclude"))


def _mtime(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return -1


def list_paths(project: Project, policy: SecretsPolicy | None = None, *, withheld: bool = False) -> list[str]:
    """Project-relative paths ``rg --files`` lists (no symlink followed) and the tracked files git's
    ignore rules match (:func:`tracked_ignored`), minus excluded folders and, unless ``withheld``,
    the files the policy's name rules withhold."""
    policy = policy or DEFAULT_NAMES
    # NUL-separated: a file name may hold a newline (it was split in two and never indexed)
    argv = [rg_binary(), "--files", "--null", "--no-config", "--max-filesize", str(MAX_FILE_BYTES)]
    for g in () if withheld else policy.globs:
        argv += ["--glob", f"!{g}"]
    try:
        res = subprocess.run(argv, cwd=project.root, capture_output=True, check=False)
    except OSError as exc:  # rg missing or not executable, project folder gone
        raise IndexingError(f"cannot list the files of {project.root}: {exc}") from exc
    if res.returncode not in (0, 1):
        raise IndexingError(f"rg --files failed in {project.root}: {res.stderr.decode(errors='replace')[-300:]}")
    paths = set()
    for raw in res.stdout.decode("utf-8", "replace").split("\0"):
        p = raw[2:] if raw.startswith("./") else raw
        if p and not in_excluded_dir(p) and (withheld or not is_excluded(p)):
            paths.add(p)
    for p in tracked_ignored(project):
        if withheld or not policy.name_rule(p):
            paths.add(p)
    return sorted(paths)


def read_indexable(root: Path, path: str, policy: SecretsPolicy | None = None) -> bytes | None:
    """The file's bytes, or None when it is gone, outside its project (symlink), too big, binary,
    or withheld by the secrets policy."""
    got = read_candidate(root, path)
    if got is None:
        return None
    full, data = got
    if (policy or DEFAULT_NAMES).file_rule(full, path, data):
        return None
    return data


def read_candidate(root: Path, path: str) -> tuple[Path, bytes] | None:
    """(real path, bytes) of a file that may be indexed, before the secrets policy judges it: None
    when it is gone, outside its project (symlink), too big or binary."""
    full = contained(root, path)
    if full is None:
        return None
    try:
        with open(full, "rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAX_FILE_BYTES or looks_binary(data):
        return None
    return full, data


#: changed files are read and judged in batches of about this many bytes (memory stays bounded;
#: each batch's content scan is shared with a second process, SecretsPolicy.prejudge)
SCAN_BATCH_BYTES = 64_000_000


def scan(
    projects: tuple[Project, ...] | list[Project],
    previous: Mapping[str, SourceFile] | None = None,
    policy: SecretsPolicy | None = None,
) -> dict[str, SourceFile]:
    """Current indexable files by key; hashes only what changed since ``previous``."""
    previous = previous or {}
    out: dict[str, SourceFile] = {}
    for project in projects:
        changed: list[tuple[str, int, int]] = []  # (path, size, mtime) to read, judge and hash
        for path in list_paths(project, policy):
            full = project.root / path
            try:
                st = full.stat()
            except OSError:
                continue
            key = f"{project.name}:{path}"
            old = previous.get(key)
            if old and old.size == st.st_size and old.mtime_ns == st.st_mtime_ns:
                real = contained(project.root, path)
                # unchanged, and still served under the current policy (a cached verdict: no read)
                if real is not None and not (policy or DEFAULT_NAMES).file_rule(real, path):
                    out[key] = old
                continue
            changed.append((path, st.st_size, st.st_mtime_ns))
        start = 0
        while start < len(changed):
            batch: list[tuple[str, int, int]] = []
            size = 0
            while start < len(changed) and (not batch or size + changed[start][1] <= SCAN_BATCH_BYTES):
                batch.append(changed[start])
                size += changed[start][1]
                start += 1
            _judge_and_hash(project, batch, policy, out)
    return out


def _judge_and_hash(
    project: Project, batch: list[tuple[str, int, int]], policy: SecretsPolicy | None, out: dict[str, SourceFile]
) -> None:
    read = [(path, size, mtime, read_candidate(project.root, path)) for path, size, mtime in batch]
    if policy is not None:
        policy.prejudge([(got[0], path, got[1]) for path, _, _, got in read if got is not None])
    for path, size, mtime, got in read:
        if got is None or (policy or DEFAULT_NAMES).file_rule(got[0], path, got[1]):
            continue
        out[f"{project.name}:{path}"] = SourceFile(project.name, path, size, mtime, hashlib.sha256(got[1]).hexdigest())
