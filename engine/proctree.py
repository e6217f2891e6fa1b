"""Process-tree hygiene: every process an expert starts, and everything *it* starts, ends with the call.

A process group is not enough: a child that calls ``setsid`` (``setsid sleep 32 &``, a daemon)
leaves the group and would outlive the request. So every process the engine spawns carries a
unique environment variable (:data:`TAG_VAR`), inherited by all its descendants whatever session
or group they move to; :func:`kill_tagged` sweeps ``/proc`` for it and SIGKILLs what it finds.

At a deadline there is no SIGTERM grace: the budget is spent, and a tool that ignores SIGTERM
must not stretch it (the old SIGTERM → 0.3 s → SIGKILL ladder: p50 overrun 326 ms on a 1,000 ms
budget; ``benchmarks/budget_overrun.py``). Search tools are read-only: SIGKILL loses nothing.

Limit: a descendant that ``exec``s with a scrubbed environment (``env -i``) loses the tag; it is
still killed when it stayed in the process group. Linux only (``/proc``); elsewhere only the
process group is killed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import uuid
from collections.abc import Mapping

TAG_VAR = "ENGINE_PROC_TAG"
_PROC = "/proc"


def new_tag() -> str:
    return f"{os.getpid()}-{uuid.uuid4().hex}"


def tagged_env(tag: str, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's environment) plus the tag every descendant inherits."""
    out = dict(os.environ if env is None else env)
    out[TAG_VAR] = tag
    return out


def tagged_pids(tag: str, skip: set[int] | frozenset[int] = frozenset()) -> list[int]:
    """Live processes whose environment carries ``tag`` (unreadable ones — other users' — skipped).

    ``skip``: pids already signalled. Reading a dying process's environment waits for the kernel
    to tear its memory down (measured: up to ~15 ms), so those are never read again."""
    needle = f"{TAG_VAR}={tag}\0".encode()
    me = os.getpid()
    found = []
    try:
        names = os.listdir(_PROC)
    except OSError:
        return []
    for name in names:
        if not name.isdigit() or int(name) == me or int(name) in skip:
            continue
        try:
            with open(f"{_PROC}/{name}/environ", "rb") as fh:
                if needle in fh.read():
                    found.append(int(name))
        except OSError:
            continue
    return found


def kill_tagged(tag: str, *, rounds: int = 5) -> int:
    """SIGKILL every process carrying ``tag``; sweep again while a sweep finds a new one (a child
    forked mid-sweep). A process already signalled may still show for a moment while the kernel
    tears it down: it does not cost another round. Returns how many were signalled."""
    killed: set[int] = set()
    for _ in range(rounds):
        new = tagged_pids(tag, killed)
        if not new:
            break
        for pid in new:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
            killed.add(pid)
    return len(killed)


def kill_group(pid: int) -> None:
    """SIGKILL the process group led by ``pid`` (the process was started with a new session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


_SWEEPS: set[threading.Thread] = set()


def kill_tagged_soon(tag: str) -> None:
    """:func:`kill_tagged` from a thread, so the caller does not wait for the ``/proc`` scan (a
    non-daemon thread: it finishes before the process exits, unless it ends by ``os._exit``: see
    :func:`join_sweeps`)."""
    thread = threading.Thread(target=kill_tagged, args=(tag,), name=f"kill-{tag[-8:]}")
    _SWEEPS.add(thread)
    thread.start()
    for done in [t for t in _SWEEPS if not t.is_alive() and t is not thread]:
        _SWEEPS.discard(done)


def join_sweeps(timeout_s: float = 5.0) -> None:
    """Wait for the sweeps started so far (before an ``os._exit``, which would cut them short)."""
    for thread in list(_SWEEPS):
        thread.join(timeout_s)
        _SWEEPS.discard(thread)


def kill_tree_soon(pid: int, tag: str) -> None:
    """At a deadline: SIGKILL the group now, and every tagged descendant right after."""
    kill_group(pid)
    kill_tagged_soon(tag)
