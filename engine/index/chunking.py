"""Cut a file into the chunks every index shares: syntax-aware where a grammar exists, else windows.

The syntax layer (:mod:`engine.syntax`) gives function / class / method chunks carrying the
enclosing symbol and doc sections by heading; this wrapper only guarantees a result for any
text (windows of lines) so no file is ever dropped for want of a grammar.
"""

from __future__ import annotations

from dataclasses import dataclass


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


def chunk_file(path: str, data: bytes) -> list[Chunk]:
    """Chunks of one file; never raises."""
    from ..syntax import chunks as syntax_chunks  # lazy: grammars load on first use

    try:
        return [Chunk(c.start_line, c.end_line, c.symbol, c.kind, c.text) for c in syntax_chunks(path, data)]
    except Exception:  # noqa: BLE001 - a grammar failure must not lose the file: fall back to windows
        pass
    return window_chunks(data.decode("utf-8", "replace"))
