"""Cut a file into the chunks every index shares: syntax-aware where a grammar exists, else windows.

The syntax layer (:mod:`engine.syntax`) gives function / class / method chunks carrying the
enclosing symbol and doc sections by heading; this wrapper only guarantees a result for any
text (windows of lines) so no file is ever dropped for want of a grammar.

:func:`file_outline` parses a file once for both its chunks (bm25, semantic) and its tags
(symbols, typed) and remembers the last few files: ``engine index`` feeds each group of files
to every index in turn (:func:`engine.index.build.update_indexes`), so the indexes after the
first find the analysis ready instead of parsing again (parsing + tag queries are most of the
fast indexes' time).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..syntax import Tag

OUTLINE_CACHE_FILES = 64  # > ADD_FILES: a whole group stays cached while every index takes its turn
_OUTLINES: OrderedDict[tuple[str, int, int], tuple[list[Tag], list[Chunk]]] = OrderedDict()
_OUTLINES_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class Chunk:
    start_line: int
    end_line: int
    symbol: str | None
    kind: str
    text: str


def window_chunks(text: str, *, size: int = 60, overlap: int = 10) -> list[Chunk]:
    lines = text.splitlines()
    if not lines:
        return []
    out, step, start = [], max(1, size - overlap), 0
    while start < len(lines):
        end = min(len(lines), start + size)
        out.append(Chunk(start + 1, end, None, "window", "\n".join(lines[start:end])))
        if end == len(lines):
            break
        start += step
    return out


def file_outline(path: str, data: bytes) -> tuple[list[Tag], list[Chunk]]:
    """Tags and chunks of one file from a single parse, cached for the last few files. Never raises.

    Callers must not mutate the lists (they are shared with the next index that asks).
    """
    key = (path, len(data), hash(data))
    with _OUTLINES_LOCK:
        hit = _OUTLINES.get(key)
        if hit is not None:
            _OUTLINES.move_to_end(key)
            return hit
    from ..syntax import outline  # lazy: grammars load on first use

    try:
        tags, syntax_chunks = outline(path, data)
        found = ([*tags], [Chunk(c.start_line, c.end_line, c.symbol, c.kind, c.text) for c in syntax_chunks])
    except Exception:  # noqa: BLE001 - a grammar failure must not lose the file: fall back to windows
        found = ([], window_chunks(data.decode("utf-8", "replace")))
    with _OUTLINES_LOCK:
        _OUTLINES[key] = found
        while len(_OUTLINES) > OUTLINE_CACHE_FILES:
            _OUTLINES.popitem(last=False)
    return found


def chunk_file(path: str, data: bytes) -> list[Chunk]:
    """Chunks of one file; never raises."""
    return file_outline(path, data)[1]
