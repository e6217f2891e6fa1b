"""A worker process that parses files for the indexes ahead of need (:class:`OutlinePrefetch`).

Protocol on stdin/stdout, one frame (:mod:`engine.frames`) per group of files: requests are
``list[(path, bytes)]``; replies ``list[(tags, chunks)]`` in the same order. It exits at end of input.

A plain subprocess rather than :mod:`multiprocessing`: spawn re-imports the parent's
``__main__``, which breaks any script that calls the indexer without a ``__main__`` guard.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
from collections import deque
from concurrent.futures import Future
from typing import Any

from .. import frames


class ParseWorker:
    """The parent side: ``submit(items)`` returns a future of the outlines; ``close()`` ends it."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "engine.index.parse_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self._waiting: deque[Future[Any]] = deque()
        self._lock = threading.Lock()  # guards _waiting only: never held while a pipe may block
        # frames go out in the order their futures are queued; a writer blocked on a full pipe holds
        # only this lock, so the reader can still take replies off the worker's (full) output pipe
        self._write_lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, name="parse-worker-reader", daemon=True)
        self._reader.start()

    def submit(self, items: list[tuple[str, bytes]]) -> Future[Any]:
        fut: Future[Any] = Future()
        with self._write_lock:
            with self._lock:
                self._waiting.append(fut)
            assert self._proc.stdin is not None
            try:
                frames.write_frame(self._proc.stdin, items)
            except OSError as exc:  # the worker died: this and later groups are parsed in-process
                with self._lock:
                    mine = fut in self._waiting  # else the reader has failed it already
                    if mine:
                        self._waiting.remove(fut)
                if mine:
                    fut.set_exception(exc)
        return fut

    def _read(self) -> None:
        assert self._proc.stdout is not None
        try:
            while (reply := frames.read_frame(self._proc.stdout)) is not None:
                with self._lock:
                    fut = self._waiting.popleft()
                fut.set_result(reply)
        except Exception:  # noqa: BLE001 - a reader that stops must not leave a writer on a full pipe
            # with nobody taking its replies the worker stops reading, and submit() would block on
            # its input forever: killed, the worker's pipe breaks and submit() parses here instead
            self._proc.kill()
        finally:
            with self._lock:  # worker gone: nobody will answer these
                while self._waiting:
                    self._waiting.popleft().set_exception(EOFError("parse worker exited"))

    def close(self) -> None:
        if self._proc.stdin is not None:
            with contextlib.suppress(OSError):
                self._proc.stdin.close()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._reader.join(timeout=5)


def main() -> int:
    """The worker: the outlines (tags and chunks, :func:`engine.syntax.outline`) of each group of files."""
    from ..syntax import outline  # the grammars load in the worker, not in its parent's import

    src, out = sys.stdin.buffer, sys.stdout.buffer
    while (items := frames.read_frame(src)) is not None:
        frames.write_frame(out, [outline(path, data) for path, data in items])
    return 0


if __name__ == "__main__":
    sys.exit(main())
