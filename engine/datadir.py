"""The data dir (DESIGN §1): private, never committed, files written whole.

Every module that creates something under the data dir (the store, the signing key, indexes)
goes through :func:`ensure_data_dir` first, so whichever runs first, the dir is created 0700 and
gets a ``.gitignore`` of ``*``: the default ``.engine/`` sits inside the user's repo, and the
signing key must never show up in ``git status`` (issue 8).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

GITIGNORE = "*\n"
#: files that say "this folder is an engine data dir" when it was created by an older version
_MARKERS = ("signing_key.ed25519", "engine.duckdb", "spool")


def ensure_data_dir(data_dir: Path) -> Path:
    """Create ``data_dir`` (0700) with a ``.gitignore`` of ``*``; idempotent and race-safe.

    An existing folder gets the ``.gitignore`` only when it already holds engine files (an older
    version's ``.engine/``): a user pointing ``ENGINE_HOME`` at some folder of theirs must not
    find it silently hidden from git.
    """
    created = not data_dir.exists()
    if created:
        data_dir.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):  # someone else's umask or an odd filesystem: keep going
            os.chmod(data_dir, 0o700)
    ignore = data_dir / ".gitignore"
    if ignore.exists() or not (created or any((data_dir / m).exists() for m in _MARKERS)):
        return data_dir
    with contextlib.suppress(FileExistsError):
        write_private(ignore, GITIGNORE.encode(), exclusive=True, mode=0o644)
    return data_dir


def private_dir(path: Path) -> Path:
    """A sub-folder of the data dir, 0700."""
    if not path.exists():
        path.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            os.chmod(path, 0o700)
    return path


def write_private(path: Path, data: bytes, *, exclusive: bool = False, mode: int = 0o600) -> None:
    """Write ``path`` whole or not at all (temp file, fsync, then rename or link).

    ``exclusive``: fail with FileExistsError when ``path`` exists (``link`` is atomic), so two
    processes racing to create the same file never see a half-written one.
    """
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)  # the umask may have narrowed a 0644 request; never widened a 0600 one
        if exclusive:
            os.link(tmp, path)
        else:
            os.replace(tmp, path)
        fsync_dir(path.parent)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def fsync_dir(path: Path) -> None:
    """Make a rename or a new file in ``path`` durable (POSIX: the directory entry needs its own fsync)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def mode_problems(paths: list[Path]) -> list[str]:
    """Files readable or writable by others (group/world bits set), for ``engine doctor``."""
    out = []
    for p in paths:
        with contextlib.suppress(OSError):
            if p.stat().st_mode & 0o077:
                out.append(f"{p} is mode {oct(p.stat().st_mode & 0o777)} (chmod {'700' if p.is_dir() else '600'})")
    return out
