"""A long-lived router's heap: kept small, and its garbage collector kept out of the answers' way.

Two measured problems of a serving router (benchmarks/latency.py ``rss``, docs/benchmarks.md):

* **GC pauses.** After the first answers the heap holds ~0.5M long-lived objects (config, index
  readers, parser and model caches). A full collection walks them all, mid-request: 1.1 s once
  on the devset workspace under load. :func:`settle` collects once, off the hot path, then
  freezes the survivors out of the cyclic GC (``gc.freeze``): later collections only walk what
  was allocated since.
* **Freed memory that stays resident.** Loading the ONNX session and answering allocate and
  free far more than they keep; glibc keeps the freed pages (63 MB right after the session loads).
  :func:`trim` hands them back (``malloc_trim(0)``; a no-op off glibc).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from functools import cache
from typing import Any


@cache
def _libc() -> Any | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


def trim() -> None:
    """Return the C heap's free pages to the OS (glibc ``malloc_trim(0)``; a few ms, off the hot path)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


def settle() -> None:
    """Collect once, freeze the survivors out of the cyclic GC, and trim the C heap."""
    gc.collect()  # today's garbage goes first: only what is still alive is frozen
    gc.freeze()
    trim()
