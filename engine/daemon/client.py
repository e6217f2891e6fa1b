"""``engine run`` through the workspace's daemon: find it (or start it), send the argv, print the reply.

Standard library only, and only what this path needs (see :mod:`engine.daemon`): the whole point
is not to pay for the engine's imports on every call. Every doubt falls back to the in-process
command, which prints the same output: :func:`run` returns ``None`` when the workspace cannot be
told from the argv, the daemon cannot be reached or started, it asks for a fallback (argv it
cannot parse, a workspace it does not serve) or it dies mid-call.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import sys
import time

from . import MAX_MESSAGE, PROTOCOL, Address, emit, fingerprint, frame, idle_seconds, private_folder, unframe

TYPE_CHECKING = False  # not typing's: importing typing costs the path this module exists to keep short
if TYPE_CHECKING:
    import subprocess
    from pathlib import Path
    from typing import Any

#: ``engine run`` options that take no value (tests/test_daemon.py checks this against the command)
NO_VALUE = frozenset({"--no-cache", "--no-daemon", "--help"})
ACK_TIMEOUT_S = 5.0  # a live daemon acknowledges within milliseconds
#: an acknowledged call without a budget: every expert has its own timeout (seconds), so a daemon
#: silent this long is stalled; with ``--budget-ms`` the wait is the budget and this grace
ANSWER_TIMEOUT_S = 120.0
ANSWER_GRACE_S = 10.0
START_TIMEOUT_S = 30.0  # a daemon starting on a loaded 2-core machine imports for a second or more
RESTART = "restart"


def workspace_roots(args: list[str], cwd: str) -> list[str] | None:
    """The ``--workspace`` roots in ``args`` (``run``'s own arguments), resolved like the command
    does; ``cwd`` when none is given; None when one is not a directory (the command says why)."""
    given: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            break
        if arg in ("-w", "--workspace"):
            if i + 1 == len(args):
                return None
            given.append(args[i + 1])
            i += 2
        elif arg.startswith("--workspace="):
            given.append(arg.split("=", 1)[1])
            i += 1
        elif arg.startswith("-w"):
            given.append(arg[2:])
            i += 1
        elif arg.startswith("--") and "=" not in arg and arg not in NO_VALUE:
            i += 2  # an option and its value (a value may start with "-")
        elif arg.startswith("-") and len(arg) == 2:
            i += 2
        else:
            i += 1
    roots = []
    for raw in given or ["."]:
        path = os.path.realpath(os.path.join(cwd, os.path.expanduser(raw)))
        if not os.path.isdir(path):
            return None
        roots.append(path)
    return roots


def address(args: list[str], cwd: str) -> Address | None:
    roots = workspace_roots(args, cwd)
    if roots is None:
        return None
    home = os.environ.get("ENGINE_HOME")
    data_dir = (
        os.path.realpath(os.path.join(cwd, os.path.expanduser(home))) if home else os.path.join(roots[0], ".engine")
    )
    return Address.of(roots, data_dir)


def run(args: list[str]) -> int | None:
    """Answer ``engine run ARGS`` through the daemon; the exit code, or None to run in-process."""
    try:
        cwd = os.getcwd()
    except OSError:  # the current directory was deleted: let the command report it
        return None
    addr = address(args, cwd)
    if addr is None:
        return None
    message = {"op": "run", "v": PROTOCOL, "fp": fingerprint(), "argv": args, "cwd": cwd}
    for _ in range(2):  # a second round after a daemon of another version stepped down
        conn = connect(addr.socket_path) or start(addr)
        if conn is None:
            return None
        with conn:
            try:
                reply = call(conn, message, answer_timeout(args))
            except Stalled:
                # answering in-process now would ask a second time (two receipts, and the daemon's
                # answer may still come): say so, as the command reports an environment problem
                emit("", _stalled_error(addr, answer_timeout(args)))
                return 1
        if reply == RESTART:
            wait_released(addr)
            continue
        if not isinstance(reply, dict):
            return None
        emit(str(reply.get("stdout", "")), str(reply.get("stderr", "")))
        code = reply.get("code", 1)
        return code if isinstance(code, int) else 1
    return None


def _stalled_error(addr: Address, waited_s: float) -> str:
    import json  # an error path: the import the common path avoids is fine here

    message = (
        f"the workspace's daemon acknowledged the call and did not answer within {waited_s:.0f} s "
        f"(its log: {addr.log_path}); `engine daemon stop` ends it, --no-daemon answers in this process"
    )
    return json.dumps({"error": "environment_error", "message": message}, ensure_ascii=False) + "\n"


def connect(path: str) -> socket.socket | None:
    """A connection to the daemon listening there, or None (no socket file, nobody listening, or a
    listener that is not this user: a socket in a shared ``/tmp`` folder another local user made
    first would otherwise read every question and answer anything)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        if peer_uid(sock) != os.getuid():
            sock.close()
            return None
    except OSError:
        sock.close()
        return None
    return sock


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end (``SO_PEERCRED``: pid, uid, gid as native ints)."""
    cred = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
    return int.from_bytes(cred[4:8], sys.byteorder)


def _recv_exactly(conn: socket.socket, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = conn.recv(min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive(conn: socket.socket) -> dict[str, Any] | None:
    head = _recv_exactly(conn, 4)
    if head is None or int.from_bytes(head, "big") > MAX_MESSAGE:
        return None
    body = _recv_exactly(conn, int.from_bytes(head, "big"))
    return None if body is None else unframe(body)


def answer_timeout(args: list[str]) -> float:
    """How long to wait for an acknowledged call's answer: its ``--budget-ms`` and
    :data:`ANSWER_GRACE_S`, else :data:`ANSWER_TIMEOUT_S` (a stalled daemon must not hang the shell)."""
    for i, arg in enumerate(args):
        raw = arg.split("=", 1)[1] if arg.startswith("--budget-ms=") else None
        if arg == "--budget-ms" and i + 1 < len(args):
            raw = args[i + 1]
        if raw is not None:
            try:
                return max(0.0, float(raw)) / 1000 + ANSWER_GRACE_S
            except ValueError:
                break  # the command reports the bad value
    return ANSWER_TIMEOUT_S


class Stalled(Exception):
    """The daemon acknowledged the call and then did not answer in time."""


def call(
    conn: socket.socket, message: dict[str, Any], timeout_s: float = ANSWER_TIMEOUT_S
) -> dict[str, Any] | str | None:
    """Send one request; the daemon's answer, :data:`RESTART`, or None (fallback, or it went away).
    Raises :class:`Stalled` when an acknowledged call is not answered within ``timeout_s``."""
    try:
        conn.sendall(frame(message))
        conn.settimeout(ACK_TIMEOUT_S)
        ack = receive(conn)
        if ack is None or not ack.get("ack"):
            return RESTART if ack is not None and ack.get("restart") else None
        conn.settimeout(timeout_s)
        try:
            return receive(conn)
        except TimeoutError:
            raise Stalled from None
    except OSError:
        return None


def start(addr: Address) -> socket.socket | None:
    """Start the daemon (one per workspace however many shells ask at once) and connect to it."""
    from pathlib import Path

    from ..datadir import ensure_data_dir

    try:
        ensure_data_dir(Path(addr.data_dir))
    except OSError:
        return None
    if not private_folder(addr.folder) or not private_folder(os.path.dirname(addr.socket_path)):
        return None
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        gate = os.open(addr.start_lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return None
    try:  # closing the descriptor releases the gate
        if not _flock(gate, deadline):
            return None
        conn = connect(addr.socket_path)  # another shell started it while this one waited
        if conn is not None:
            return conn
        proc = _spawn(addr) if _lock_free(addr) else None
        held_since = time.monotonic()
        while time.monotonic() < deadline:
            conn = connect(addr.socket_path)
            if conn is not None:
                return conn
            if proc is not None and proc.poll() is not None:
                return None  # it could not start: its log says why, the command answers in-process
            if proc is None:
                # a live daemon holds the life lock but is not listening here: it is stepping down
                # (its socket was removed) — start the next one once it is gone — or it listens
                # elsewhere; either way this call does not wait for it past ACK_TIMEOUT_S
                if _lock_free(addr):
                    proc = _spawn(addr)
                elif time.monotonic() - held_since > ACK_TIMEOUT_S:
                    return None
            time.sleep(0.01)
    finally:
        os.close(gate)
    return None


def _flock(fd: int, deadline: float) -> bool:
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN) or time.monotonic() > deadline:
                return False
            time.sleep(0.01)


def _lock_free(addr: Address) -> bool:
    """No live daemon holds the life lock (a crashed one released it with its last breath)."""
    try:
        fd = os.open(addr.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    finally:
        os.close(fd)  # releases the probe's lock
    return True


def wait_released(addr: Address, timeout_s: float = 10.0) -> None:
    """Wait until the daemon that stepped down has released its life lock."""
    deadline = time.monotonic() + timeout_s
    while not _lock_free(addr) and time.monotonic() < deadline:
        time.sleep(0.01)


def _spawn(addr: Address) -> subprocess.Popen[bytes]:
    import subprocess  # only when a daemon is started: ~8 ms the common path does not pay

    env = dict(os.environ)
    if env.get("ENGINE_HOME"):
        env["ENGINE_HOME"] = addr.data_dir  # a relative ENGINE_HOME means this shell's directory
    roots = [a for r in addr.roots for a in ("--root", r)]
    argv = [sys.executable, "-m", "engine.daemon", "--data-dir", addr.data_dir, "--key", addr.key, *roots]
    argv += ["--idle-s", str(idle_seconds())]
    log_fd = os.open(addr.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log_fd,
            stderr=log_fd,
            cwd="/",  # hold no directory of the caller's
            env=env,
            start_new_session=True,  # not the shell's process group: a Ctrl-C there does not stop it
            close_fds=True,
        )
    finally:
        os.close(log_fd)


# ---------------------------------------------------------------------------------------------- control
# (engine daemon status|stop, keys rotate, store repair: the full CLI is loaded there anyway)


def control(socket_path: str, op: str) -> dict[str, Any] | None:
    """A control request (``status``, ``stop``) to the daemon listening there; None when none is."""
    conn = connect(socket_path)
    if conn is None:
        return None
    with conn:
        try:
            conn.settimeout(ACK_TIMEOUT_S)
            conn.sendall(frame({"op": op, "v": PROTOCOL, "fp": fingerprint()}))
            return receive(conn)
        except OSError:
            return None


def daemons(data_dir: Path) -> list[dict[str, Any]]:
    """Every daemon a data dir knows of: its info file, ``alive`` and, when it answers, its status."""
    import json

    out = []
    for info_path in sorted((data_dir / "daemon").glob("*.json")):
        try:
            info = json.loads(info_path.read_text())
        except (OSError, ValueError):
            continue
        status = control(str(info.get("socket", "")), "status")
        out.append({**info, **(status or {}), "alive": status is not None, "info_file": str(info_path)})
    return out


def stop_all(data_dir: Path, timeout_s: float = 10.0) -> list[dict[str, Any]]:
    """Ask every daemon of a data dir to stop (``engine daemon stop``, key rotation, store repair)
    and wait until each has let its socket go; a dead one's files are removed."""
    found = daemons(data_dir)
    for d in found:
        if d["alive"]:
            control(d["socket"], "stop")
        else:
            for stale in (d["info_file"], d.get("socket", "")):
                try:
                    os.unlink(stale)
                except OSError:  # already gone (or never named): nothing to clean
                    continue
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(os.path.exists(d["info_file"]) for d in found if d["alive"]):
        time.sleep(0.02)
    return found
