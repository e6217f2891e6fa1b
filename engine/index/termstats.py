"""Document frequencies from a BM25 (tantivy) index: how selective a search term is.

Live experts that can only afford a few patterns (ripgrep on a long issue text) ask which of
their candidates are rarest. The numbers come from an index ``engine index`` already built (the
``bm25`` expert's, by default): ``doc_freq`` of a token of its code-aware tokenizer
(:func:`~engine.index.tokenize.code_tokens`) is the number of chunks holding it. Opening the
index costs a few milliseconds once per process; each lookup ~40 µs and is remembered until
the index commits again (its ``meta.json`` changes).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

#: lookups remembered per index generation (words repeat across the questions of a session)
MEMO_SIZE = 50_000


class TermStats:
    """Document frequencies of one tantivy index's ``body`` field (see the module docstring)."""

    def __init__(self, tantivy_dir: Path) -> None:
        self.dir = tantivy_dir
        self._meta = str(tantivy_dir / "meta.json")
        self._stamp: int | None = None
        self._searcher: Any = None
        self._index: Any = None
        self._memo: dict[str, int] = {}
        self._lock = threading.Lock()

    def _current(self) -> Any | None:
        try:
            stamp = os.stat(self._meta).st_mtime_ns
        except OSError:
            return None
        if stamp != self._stamp:
            import tantivy

            if self._index is None:
                self._index = tantivy.Index.open(str(self.dir))
            self._index.reload()
            self._searcher, self._stamp, self._memo = self._index.searcher(), stamp, {}
        return self._searcher

    def doc_freqs(self, tokens: Iterable[str]) -> tuple[int, dict[str, int]] | None:
        """(documents in the index, token → documents holding it), or None without an index."""
        with self._lock:
            try:
                searcher = self._current()
            except (OSError, ValueError):  # a damaged or half-written index: no statistics
                return None
            if searcher is None:
                return None
            out = {}
            for tok in tokens:
                df = self._memo.get(tok)
                if df is None:
                    df = int(searcher.doc_freq("body", tok))
                    if len(self._memo) < MEMO_SIZE:
                        self._memo[tok] = df
                out[tok] = df
            return int(searcher.num_docs), out


_STATS: dict[Path, TermStats] = {}
_STATS_LOCK = threading.Lock()


def term_stats(index_dir: Path) -> TermStats:
    """The process-wide :class:`TermStats` of the BM25 index in ``index_dir`` (``<data>/index/<expert>``)."""
    tdir = index_dir / "tantivy"
    with _STATS_LOCK:
        if tdir not in _STATS:
            _STATS[tdir] = TermStats(tdir)
        return _STATS[tdir]
