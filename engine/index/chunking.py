"""The chunks every index shares: :func:`engine.syntax.outline` (function / class / section chunks
where a grammar exists, line windows for any other text; never raises), imported on first use
so that loading an expert module does not load the tree-sitter grammars.

:func:`file_outline` parses a file once for both its chunks (bm25, semantic) and its tags
(symbols, typed) and remembers the last few files: ``engine index`` feeds each group of files
to every index in turn (:func:`engine.index.build.update_indexes`), so the indexes after the
first find the analysis ready instead of parsing again (parsing + tag queries are most of the
fast indexes' time). On a big update the parsing itself moves to a worker process, a group or
two ahead of the indexes (:class:`OutlinePrefetch`), so it runs on the second core.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import Future
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..syntax import Chunk, Tag

OUTLINE_CACHE_FILES = 64  # > ADD_FILES: a whole group stays cached while every index takes its turn
_OUTLINES: OrderedDict[tuple[str, int, int], tuple[list[Tag], list[Chunk]]] = OrderedDict()
_OUTLINES_LOCK = threading.Lock()
Outline = tuple[list["Tag"], list["Chunk"]]
_PENDING: dict[tuple[str, int, int], tuple[Future[list[Outline]], int]] = {}  # parsed by a worker


def _outline(path: str, data: bytes) -> Outline:
    from ..syntax import outline  # lazy: grammars load on first use

    return outline(path, data)  # never raises: windows of lines where no grammar applies


def file_outline(path: str, data: bytes) -> Outline:
    """Tags and chunks of one file from a single parse, cached for the last few files. Never raises.

    Callers must not mutate the lists (they are shared with the next index that asks).
    """
    key = (path, len(data), hash(data))
    with _OUTLINES_LOCK:
        hit = _OUTLINES.get(key)
        if hit is not None:
            _OUTLINES.move_to_end(key)
            return hit
        pending = _PENDING.pop(key, None)
    found: Outline | None = None
    if pending is not None and pending[0].done():  # never wait: a late worker just loses the race
        try:
            found = pending[0].result()[pending[1]]
        except Exception:  # noqa: BLE001 - a dead or cancelled worker: parse here instead
            found = None
    if found is None:
        found = _outline(path, data)
    with _OUTLINES_LOCK:
        _OUTLINES[key] = found
        while len(_OUTLINES) > OUTLINE_CACHE_FILES:
            _OUTLINES.popitem(last=False)
    return found


def chunk_file(path: str, data: bytes) -> list[Chunk]:
    """Chunks of one file; never raises."""
    return file_outline(path, data)[1]


class OutlinePrefetch:
    """Parse files in a worker process ahead of need; :func:`file_outline` collects the results
    when they are ready (it never waits for them).

    Worth it only for big updates (a worker costs a Python start and ~2 s of pickling per 20 MB of
    source): on 2 free cores the parsing then overlaps the indexing. ``close()`` when done.
    """

    def __init__(self) -> None:
        from .parse_worker import ParseWorker

        self._worker = ParseWorker()
        self._keys: list[tuple[str, int, int]] = []

    def submit(self, items: list[tuple[str, bytes]]) -> None:
        if not items:
            return
        fut = self._worker.submit(items)
        with _OUTLINES_LOCK:
            for i, (path, data) in enumerate(items):
                key = (path, len(data), hash(data))
                _PENDING[key] = (fut, i)
                self._keys.append(key)

    def close(self) -> None:
        with _OUTLINES_LOCK:
            for key in self._keys:
                _PENDING.pop(key, None)
        self._worker.close()
