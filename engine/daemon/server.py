"""The CLI daemon: one per workspace (and environment), started by the first ``engine run``.

``python -m engine.daemon --data-dir D --key K --root R … --idle-s N`` (the client starts it;
docs/adr/0014-cli-daemon.md). It

* holds ``<key>.lock`` (flock) for its whole life — a crashed daemon's lock is released by the
  kernel, so a client that finds the socket dead and the lock free knows it is stale;
* listens on ``<key>.sock`` (0600, in a 0700 folder; peers of another uid are refused);
* keeps one :class:`~engine.runtime.Router` per config folder, sharing one store and key, each
  hot-reloading its config and following index changes exactly like ``engine serve``;
* parses each call's argv with the ``run`` command's own parser and answers with the code path the
  in-process command uses (:mod:`engine.cli_run`), so stdout, stderr and the exit code are the same;
* flushes deferred work (events, cache rows, DuckDB ingest) after each answer, off the caller's
  clock;
* steps down when idle for ``--idle-s``, when its socket is removed or replaced, on SIGTERM/SIGINT,
  on ``engine daemon stop``, or when a client of another fingerprint (engine version, Python,
  code) calls — releasing socket and lock at once so a successor can start while it finishes.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import logging
import os
import signal
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

from ..cli_run import Reply, RunCall, answer_reply, error_reply
from ..configdir import ConfigRef
from ..errors import EngineError
from ..keys import KeyRing
from ..runtime import Router
from ..store import Store, open_store
from ..workspace import Workspace
from . import MAX_MESSAGE, PROTOCOL, Address, fingerprint, frame, unframe

log = logging.getLogger("engine.daemon")


def _run_command() -> Any:
    """The ``run`` command's click object: its parser is the one the in-process command uses."""
    import typer.main

    from ..cli import app

    return typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]


class Daemon:
    def __init__(self, addr: Address, idle_s: float, lock_fd: int) -> None:
        self.addr, self.idle_s, self.lock_fd = addr, idle_s, lock_fd
        self.fp = fingerprint()
        self.command = _run_command()
        self.started = time.time()
        self.last_call = time.monotonic()
        self.active = 0
        self.served = 0
        self.stop_reason: str | None = None
        self.socket_ino: int | None = None
        self.workspace: Workspace | None = None
        self.routers: dict[ConfigRef, Router] = {}
        self.retired: list[Router] = []
        self._store: Store | None = None
        self._keys: KeyRing | None = None
        self._dirty = anyio.Event()
        self._stop = anyio.Event()

    # ------------------------------------------------------------------ life
    def bind(self) -> socket.socket:
        """Listen on the socket: a file left there is stale (this process holds the life lock)."""
        path = self.addr.socket_path
        with contextlib.suppress(FileNotFoundError):
            if os.path.isdir(path) and not os.path.islink(path):
                os.rmdir(path)  # an empty folder made there by mistake (not empty: OSError, logged)
            else:
                os.unlink(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # born 0600: no window in which another user could connect
        try:
            sock.bind(path)
        finally:
            os.umask(old)
        sock.listen(128)
        self.socket_ino = os.stat(path).st_ino
        info = {
            "pid": os.getpid(),
            "key": self.addr.key,
            "fp": self.fp,
            "roots": list(self.addr.roots),
            "socket": path,
            "started": self.started,
            "idle_s": self.idle_s,
        }
        tmp = self.addr.info_path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(info))
        os.replace(tmp, self.addr.info_path)
        return sock

    def stop(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
            log.info("stopping: %s", reason)
        self._stop.set()

    def _socket_is_ours(self) -> bool:
        try:
            return os.stat(self.addr.socket_path).st_ino == self.socket_ino
        except OSError:
            return False

    def _step_down(self) -> None:
        """Give the socket and the life lock up now; in-flight calls still finish."""
        if self._socket_is_ours():
            with contextlib.suppress(OSError):
                os.unlink(self.addr.socket_path)
        with contextlib.suppress(OSError):
            os.unlink(self.addr.info_path)
        os.close(self.lock_fd)  # releases the flock: a successor may start

    async def serve(self, sock: socket.socket) -> None:
        listener = await anyio.abc.SocketListener.from_socket(sock)
        async with anyio.create_task_group() as calls:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._watch)
                tg.start_soon(self._flusher)
                tg.start_soon(self._signals)
                tg.start_soon(listener.serve, self._handle, calls)
                await self._stop.wait()
                tg.cancel_scope.cancel()
            await listener.aclose()
            self._step_down()
        with anyio.CancelScope(shield=True):
            await self._close()

    async def _close(self) -> None:
        routers = [*self.routers.values(), *self.retired]
        await anyio.to_thread.run_sync(_flush_all, routers, 10.0)
        for r in routers:
            await r.pool.aclose()
        if self._store is not None:
            self._store.close()
        log.info("stopped after %d calls", self.served)

    async def _watch(self) -> None:
        while True:
            await anyio.sleep(min(1.0, self.idle_s / 4))
            if self.active == 0 and self.retired:
                retired, self.retired = self.retired, []
                await anyio.to_thread.run_sync(_flush_all, retired)
                for r in retired:
                    await r.pool.aclose()
            if self.active == 0 and time.monotonic() - self.last_call > self.idle_s:
                self.stop(f"idle for {self.idle_s:g} s")
            elif not self._socket_is_ours():
                self.stop("socket removed or replaced")

    async def _signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            async for signum in signals:
                self.stop(f"signal {signal.Signals(signum).name}")
                return

    async def _flusher(self) -> None:
        """After each answer: events, cache rows and DuckDB ingest, in a worker thread."""
        while True:
            await self._dirty.wait()
            self._dirty = anyio.Event()
            routers = list(self.routers.values())
            try:
                await anyio.to_thread.run_sync(_flush_all, routers)
            except Exception:  # noqa: BLE001 - a failed flush is retried after the next answer
                log.exception("flush failed")

    # ------------------------------------------------------------------ calls
    async def _handle(self, stream: anyio.abc.SocketStream) -> None:
        async with stream:
            if not _same_user(stream):
                return
            try:
                received = BufferedByteReceiveStream(stream)
                size = int.from_bytes(await received.receive_exactly(4), "big")
                if size > MAX_MESSAGE:
                    return
                message = unframe(await received.receive_exactly(size))
            except (anyio.EndOfStream, anyio.IncompleteRead):
                return
            if message is None:
                return
            if message.get("v") != PROTOCOL:  # a client of another engine version
                await _send(stream, {"restart": "protocol changed"})
                self.stop("a client speaking another protocol version called")
                return
            op = message.get("op")
            if op == "status":
                await _send(stream, self.status())
            elif op == "stop":
                await _send(stream, {"stopping": True, "pid": os.getpid()})
                self.stop("asked to stop")
            elif op == "run" and message.get("fp") != self.fp:
                await _send(stream, {"restart": "engine version, Python or code changed"})
                self.stop("a client of another engine version, Python or code called")
            elif op == "run":
                await self._run(stream, message)

    async def _run(self, stream: anyio.abc.SocketStream, message: dict[str, Any]) -> None:
        self.active += 1
        self.last_call = time.monotonic()
        try:
            prepared = self._prepare(message)
            if prepared is None:
                await _send(stream, {"fallback": "argv or workspace"})
                return
            await _send(stream, {"ack": True})
            call, cwd = prepared
            reply = await self._answer(call, cwd)
            await _send(stream, {"stdout": reply.stdout, "stderr": reply.stderr, "code": reply.code})
            self.served += 1
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            log.info("a client left before its answer")
        finally:
            self.active -= 1
            self.last_call = time.monotonic()

    def _prepare(self, message: dict[str, Any]) -> tuple[RunCall, Path] | None:
        """The call, when this daemon should answer it: argv that parses and names our workspace."""
        argv, cwd = message.get("argv"), message.get("cwd")
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv) or not isinstance(cwd, str):
            return None
        try:
            ctx = self.command.make_context("run", list(argv))
        except Exception:  # noqa: BLE001 - usage errors and --help: the in-process command prints them
            return None
        if ctx.params.get("no_daemon"):
            return None
        call = RunCall.from_params(ctx.params)
        if tuple(str(r) for r in call.roots(Path(cwd))) != self.addr.roots:
            return None
        return call, Path(cwd)

    async def _answer(self, call: RunCall, cwd: Path) -> Reply:
        try:
            roots, ref, target = call.locate(cwd, os.environ)
            router = self._router(ref, Workspace.open(roots))
            router.config()  # the files as they are now, like the in-process command reads them
            if router.reload_error is not None:
                raise router.reload_error
            result = await router.run(target, call.request)
        except EngineError as exc:
            return error_reply(exc)
        finally:
            self._dirty.set()
        return answer_reply(result.response, result.exit_code, call.fmt)

    def _router(self, ref: ConfigRef, ws: Workspace) -> Router:
        """The warm Router for this config folder; all of them anew when the workspace changed
        (a repo added to or removed from a multi-project root)."""
        if ws != self.workspace:
            if self.workspace is not None:
                log.info("workspace changed: %s", [p.name for p in ws.projects])
            self.retired.extend(self.routers.values())
            self.routers = {}
            self.workspace = ws
        if self._store is None:
            self._store, self._keys = open_store(ws.data_dir), KeyRing(ws.data_dir)
        router = self.routers.get(ref)
        if router is None:
            router = Router(ref.path, ws, store=self._store, keys=self._keys, config_source=ref.source)
            self.routers[ref] = router
        return router

    def status(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "key": self.addr.key,
            "fp": self.fp,
            "roots": list(self.addr.roots),
            "data_dir": self.addr.data_dir,
            "socket": self.addr.socket_path,
            "started": self.started,
            "served": self.served,
            "active": self.active,
            "idle_s": self.idle_s,
            "idle_for_s": round(time.monotonic() - self.last_call, 3),
            "configs": [r.to_dict() for r in self.routers],
        }


def _flush_all(routers: list[Router], timeout_s: float = 5.0) -> None:
    for r in routers:
        r.flush(timeout_s=timeout_s)


def _same_user(stream: anyio.abc.SocketStream) -> bool:
    raw = stream.extra(anyio.abc.SocketAttribute.raw_socket)
    creds = raw.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return bool(uid == os.getuid())


async def _send(stream: anyio.abc.SocketStream, value: dict[str, Any]) -> None:
    await stream.send(frame(value))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.daemon", description="The engine run daemon.")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--root", action="append", required=True)
    parser.add_argument("--idle-s", type=float, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"
    )
    addr = Address(tuple(args.root), args.data_dir, args.key)
    lock_fd = os.open(addr.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        log.info("another daemon serves %s", addr.key)
        os.close(lock_fd)
        return 0
    daemon = Daemon(addr, args.idle_s, lock_fd)  # the imports above are done: bind, and callers connect
    sock = daemon.bind()
    log.info("serving %s on %s (idle %g s)", list(addr.roots), addr.socket_path, args.idle_s)
    anyio.run(daemon.serve, sock)
    return 0
