"""The per-workspace CLI daemon (docs/adr/0014-cli-daemon.md): where it lives, who it is, how it talks.

``engine run`` from a shell pays for Python imports, config loading and index opens on every call
(1.7–2.0 s). A daemon that keeps one :class:`~engine.runtime.Router` per config folder warm, the
way ``engine serve`` does, answers the same call in tens of milliseconds. This package:

* :mod:`engine.daemon` (this module): what client and server share — the daemon's *key* (which
  workspace and environment it serves), its files in ``<data dir>/daemon/``, the *fingerprint*
  (engine version, Python, code) a client checks so that an upgraded engine never talks to an old
  daemon, and the wire format.
* :mod:`engine.daemon.client`: find or start the daemon, send the argv, print its reply.
* :mod:`engine.daemon.server`: the daemon itself (``python -m engine.daemon``).

This module and the client import only ``os``, ``sys``, ``zlib``, ``marshal``, ``socket`` and
``fcntl``: no ``pathlib``, ``json`` or ``hashlib`` (each pulls in ``re``, ``urllib`` or OpenSSL;
together ~6 ms of a ~10 ms client on an idle core, measured with ``python -X importtime``).

Wire protocol: one connection per call; each message is a 4-byte big-endian length and a
``marshal`` dump of a dict of plain values (str, int, float, bool, None, list, dict). marshal is
not meant for untrusted input: the server only reads peers of its own uid (``SO_PEERCRED``), who
could run anything as that user anyway. The client sends ``{"op", "v", "fp", …}``; for ``run`` the
server answers ``{"ack": True}`` (or ``restart`` / ``fallback``), then ``{"stdout", "stderr", "code"}``.
"""

from __future__ import annotations

import marshal
import os
import sys
import zlib

from .. import __version__

PROTOCOL = 2
IDLE_ENV = "ENGINE_DAEMON_IDLE_S"
OFF_ENV = "ENGINE_NO_DAEMON"
DEFAULT_IDLE_S = 900.0
MAX_MESSAGE = 64 * 1024 * 1024
#: AF_UNIX paths are limited to 108 bytes on Linux; longer data dirs use a private runtime dir
MAX_SOCKET_PATH = 100
_PACKAGE = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def frame(message: dict[str, object]) -> bytes:
    data = marshal.dumps(message, 4)
    return len(data).to_bytes(4, "big") + data


def unframe(data: bytes) -> dict[str, object] | None:
    """A message's payload back to a dict (None when it is not one)."""
    try:
        value = marshal.loads(data)
    except (EOFError, ValueError, TypeError):
        return None
    return value if isinstance(value, dict) else None


def _digest(data: str) -> str:
    """64 bits of checksum: names a daemon, never guards anything (the socket's permissions do; a
    daemon checks the roots it is asked about). zlib, not hashlib: _hashlib costs the client ~2 ms."""
    raw = data.encode("utf-8", "surrogateescape")
    return f"{zlib.crc32(raw):08x}{zlib.adler32(raw):08x}"


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
    ident = [__version__, os.path.realpath(sys.executable), sys.version, _PACKAGE, newest, count]
    return _digest(repr(ident))


class Address:
    """One daemon: the workspace roots and data dir it serves and the files that belong to it
    (absolute paths as strings: a plain class, no pathlib or dataclasses on the client path)."""

    __slots__ = ("data_dir", "key", "roots")

    def __init__(self, roots: tuple[str, ...], data_dir: str, key: str) -> None:
        self.roots, self.data_dir, self.key = roots, data_dir, key

    @classmethod
    def of(cls, roots: list[str], data_dir: str, env: dict[str, str] | None = None) -> Address:
        """The daemon for these roots and this environment. ``ENGINE_*`` variables and ``PATH``
        change what an answer is made of (the data dir, cache TTL, which ``git`` runs), so a
        different environment gets its own daemon; ``ENGINE_NO_DAEMON`` and the idle setting do not.
        ``XDG_RUNTIME_DIR`` can hold the socket (a long data dir): two shells that differ in it must
        not find each other's daemon by its life lock and then wait at a socket path it never bound."""
        env = dict(os.environ if env is None else env)
        skip = (OFF_ENV, IDLE_ENV)
        relevant = {
            k: v
            for k, v in sorted(env.items())
            if (k.startswith("ENGINE_") or k in ("PATH", "XDG_RUNTIME_DIR")) and k not in skip
        }
        return cls(tuple(roots), data_dir, _digest(repr([list(roots), data_dir, sorted(relevant.items())])))

    @property
    def folder(self) -> str:
        return os.path.join(self.data_dir, "daemon")

    def _file(self, suffix: str) -> str:
        return os.path.join(self.folder, self.key + suffix)

    @property
    def lock_path(self) -> str:
        """Held (flock) by the live daemon for its whole life: free means no daemon."""
        return self._file(".lock")

    @property
    def start_lock_path(self) -> str:
        """Held by a client while it starts a daemon, so that shells starting at once start one."""
        return self._file(".start")

    @property
    def info_path(self) -> str:
        return self._file(".json")

    @property
    def log_path(self) -> str:
        return self._file(".log")

    @property
    def socket_path(self) -> str:
        """``<data dir>/daemon/<key>.sock``, or, when that path is too long for AF_UNIX, a socket in
        a private (0700) runtime folder named by the data dir and key."""
        inside = self._file(".sock")
        if len(os.fsencode(inside)) <= MAX_SOCKET_PATH:
            return inside
        base = os.environ.get("XDG_RUNTIME_DIR") or "/tmp"
        name = _digest(f"{self.data_dir}\0{self.key}")
        return os.path.join(base, f"engine-daemon-{os.getuid()}", f"{name}.sock")


def private_folder(path: str) -> bool:
    """Create ``path`` 0700 if missing; True when it is ours and private (else: no daemon there)."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.stat(path)
    except OSError:
        return False
    return st.st_uid == os.getuid() and not st.st_mode & 0o077


def emit(stdout: str, stderr: str) -> None:
    """Print a reply exactly as the command does, whether the daemon or this process made it."""
    try:
        if stdout:
            sys.stdout.write(stdout)
            sys.stdout.flush()
        if stderr:
            sys.stderr.write(stderr)
            sys.stderr.flush()
    except BrokenPipeError:
        # the reader went away (`engine run … | head -c1`): exit 1 quietly, as the command does —
        # stdout is pointed at /dev/null so the interpreter's own flush at exit cannot fail again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        sys.exit(1)
