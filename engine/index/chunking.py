"""The chunks every index shares: :func:`engine.syntax.chunks` (function / class / section chunks
where a grammar exists, line windows for any other text; never raises), imported on first use
so that loading an expert module does not load the tree-sitter grammars.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..syntax import Chunk


def chunk_file(path: str, data: bytes) -> list[Chunk]:
    """Chunks of one file (the one :class:`~engine.syntax.Chunk` type); never raises."""
    from ..syntax import chunks  # lazy: grammars load on first use

    return chunks(path, data)
