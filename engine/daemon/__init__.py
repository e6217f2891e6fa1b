"""The per-workspace CLI daemon (docs/adr/0009-cli-daemon.md): where it lives and who it is.

``engine run`` from a shell pays for Python imports, config loading and index opens on every call
(1.7–2.0 s). A daemon that keeps one :class:`~engine.runtime.Router` per config folder warm, the
way ``engine serve`` does, answers the same call in tens of milliseconds. This package:

* :mod:`engine.daemon` (this module): addressing shared by client and server — the daemon's
  *key* (which workspace and environment it serves), its files in ``<data dir>/daemon/`` and the
  *fingerprint* (engine version, Python, code) a client checks so that an upgraded engine never
  talks to an old daemon. Standard library only: the client path must import as little as possible.
* :mod:`engine.daemon.client`: find or start the daemon, send the argv, print its reply.
* :mod:`engine.daemon.server`: the daemon itself (``python -m engine.daemon``).

Wire protocol: one connection per call, newline-delimited JSON objects (UTF-8). The client sends
``{"op", "v", "fp", ...}``; for ``run`` the server answers ``{"ack": true}`` (or ``restart`` /
``fallback``) and then ``{"stdout", "stderr", "code"}``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from .. import __version__

PROTOCOL = 1
IDLE_ENV = "ENGINE_DAEMON_IDLE_S"
OFF_ENV = "ENGINE_NO_DAEMON"
DEFAULT_IDLE_S = 900.0
#: AF_UNIX paths are limited to 108 bytes on Linux; longer data dirs use a private runtime dir
MAX_SOCKET_PATH = 100
_PACKAGE = Path(__file__).resolve().parent.parent


def idle_seconds(env: dict[str, str] | None = None) -> float:
    """``$ENGINE_DAEMON_IDLE_S`` (seconds without a call before the daemon exits), else the default."""
    raw = (os.environ if env is None else env).get(IDLE_ENV, "")
    try:
        value = float(raw)
    except ValueError:
        return DEFAULT_IDLE_S
    return value if value > 0 else DEFAULT_IDLE_S


def disabled(env: dict[str, str] | None = None) -> bool:
    """``ENGINE_NO_DAEMON=1`` (any value but empty or 0) makes every call run in-process."""
    return (os.environ if env is None else env).get(OFF_ENV, "") not in ("", "0")


def fingerprint() -> str:
    """Engine version, interpreter and the code's newest mtime: a change means a new daemon.

    Walking the package costs ~0.5 ms (≈100 files) and catches an editable checkout's edits as
    well as a reinstall.
    """
    newest, count = 0, 0
    for folder, dirs, files in os.walk(_PACKAGE):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            if name.endswith((".py", ".json")):
                count += 1
                newest = max(newest, os.stat(os.path.join(folder, name)).st_mtime_ns)
    ident = [__version__, os.path.realpath(sys.executable), sys.version, str(_PACKAGE), newest, count]
    return hashlib.sha256(json.dumps(ident).encode()).hexdigest()[:24]


class Address:
    """One daemon: the workspace roots and data dir it serves and the files that belong to it.

    A plain class, not a dataclass: ``dataclasses`` imports ``inspect`` (~10 ms on the client path).
    """

    __slots__ = ("data_dir", "key", "roots")

    def __init__(self, roots: tuple[str, ...], data_dir: Path, key: str) -> None:
        self.roots, self.data_dir, self.key = roots, data_dir, key

    @classmethod
    def of(cls, roots: list[Path], data_dir: Path, env: dict[str, str] | None = None) -> Address:
        """The daemon for these roots and this environment. ``ENGINE_*`` variables and ``PATH``
        change what an answer is made of (the data dir, cache TTL, which ``git`` runs), so a
        different environment gets its own daemon; ``ENGINE_NO_DAEMON`` and the idle setting do not."""
        env = dict(os.environ if env is None else env)
        skip = (OFF_ENV, IDLE_ENV)
        relevant = {k: v for k, v in sorted(env.items()) if (k.startswith("ENGINE_") or k == "PATH") and k not in skip}
        ident = {"roots": [str(r) for r in roots], "data_dir": str(data_dir), "env": relevant}
        key = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]
        return cls(tuple(str(r) for r in roots), data_dir, key)

    @property
    def folder(self) -> Path:
        return self.data_dir / "daemon"

    @property
    def lock_path(self) -> Path:
        """Held (flock) by the live daemon for its whole life: free means no daemon."""
        return self.folder / f"{self.key}.lock"

    @property
    def start_lock_path(self) -> Path:
        """Held by a client while it starts a daemon, so that shells starting at once start one."""
        return self.folder / f"{self.key}.start"

    @property
    def info_path(self) -> Path:
        return self.folder / f"{self.key}.json"

    @property
    def log_path(self) -> Path:
        return self.folder / f"{self.key}.log"

    @property
    def socket_path(self) -> Path:
        """``<data dir>/daemon/<key>.sock``, or, when that path is too long for AF_UNIX, a socket in
        a private (0700) runtime folder named by the data dir and key."""
        inside = self.folder / f"{self.key}.sock"
        if len(os.fsencode(inside)) <= MAX_SOCKET_PATH:
            return inside
        base = os.environ.get("XDG_RUNTIME_DIR") or "/tmp"
        digest = hashlib.sha256(f"{self.data_dir}\0{self.key}".encode()).hexdigest()[:20]
        return Path(base) / f"engine-daemon-{os.getuid()}" / f"{digest}.sock"


def private_folder(path: Path) -> bool:
    """Create ``path`` 0700 if missing; True when it is ours and private (else: no daemon there)."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.stat(path)
    except OSError:
        return False
    return st.st_uid == os.getuid() and not st.st_mode & 0o077


def emit(stdout: str, stderr: str) -> None:
    """Print a reply exactly as the command does, whether the daemon or this process made it."""
    if stdout:
        sys.stdout.write(stdout)
        sys.stdout.flush()
    if stderr:
        sys.stderr.write(stderr)
        sys.stderr.flush()
