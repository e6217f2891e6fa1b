"""The ``bm25-peer`` arm: plain BM25 over whole files, exactly as the suites' published baseline.

It reproduces ``shared/eval/bm25_beir.py`` (bm25s, English stop words, the default tokenizer,
no stemming, no code-aware splitting; doc = title + "\\n" + text; one index per snapshot; top 10)
so the router's numbers sit next to a baseline anyone can recompute from the suite alone. The
only difference is that queries are retrieved one at a time (to time each one); bm25s scores a
query the same alone as in a batch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ..errors import MissingDependency
from .suite import Doc, EvalQuery

#: as in bm25_beir.py
DEPTH = 10


@dataclass
class PeerResult:
    ranked: list[str]  # corpus ids, best first
    latency_ms: float


class Bm25Peer:
    """One bm25s index over one snapshot's docs."""

    def __init__(self, docs: list[Doc]) -> None:
        try:
            import bm25s
        except ImportError as exc:  # the eval extra is optional
            raise MissingDependency("the bm25-peer arm needs bm25s: pip install 'search-router-engine[eval]'") from exc
        self._bm25s: Any = bm25s
        self.docs = docs
        texts = [(d.title or "") + "\n" + d.text for d in docs]
        self.index: Any = bm25s.BM25()
        self.index.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)

    def search(self, query: EvalQuery) -> PeerResult:
        started = time.perf_counter()
        tokens = self._bm25s.tokenize([query.text], stopwords="en", return_ids=False, show_progress=False)
        res, _scores = self.index.retrieve(tokens, k=min(DEPTH, len(self.docs)), show_progress=False, n_threads=1)
        ranked = [self.docs[int(i)].id for i in res[0]]
        return PeerResult(ranked, (time.perf_counter() - started) * 1000)


def bm25s_version() -> str:
    try:
        from importlib.metadata import version

        return version("bm25s")
    except Exception:  # noqa: BLE001 - only a label
        return "unknown"
