"""Which vector store the semantic expert uses: the exact numpy store (default, one file per index)
or pgvector (one table per index in PostgreSQL, shared by every replica): the expert's
``vectors`` setting, ``numpy`` or ``pgvector`` (docs/scale.md, docs/adr/0016-postgresql.md).

pgvector's server is ``$ENGINE_VECTORS`` (a libpq URL), else the store's (``$ENGINE_STORE`` or
``<data dir>/store.url``): a URL never goes into experts.yaml, which is hashed and snapshotted.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from .errors import ExpertUnconfigured
from .vectors import VectorStore

BACKENDS = ("numpy", "pgvector")
VECTORS_ENV = "ENGINE_VECTORS"


class Vectors(Protocol):
    """What the semantic expert asks of a vector store (:class:`~engine.vectors.VectorStore`'s API)."""

    model_id: str | None

    @property
    def path(self) -> Path: ...
    @property
    def ids(self) -> list[str]: ...
    def __len__(self) -> int: ...
    def add(self, ids: Sequence[str], matrix: np.ndarray, payloads: Sequence[Any] | None = None) -> None: ...
    def remove(self, ids: Iterable[str]) -> int: ...
    def clear(self) -> None: ...
    def search(self, query_vec: np.ndarray, k: int = 10) -> list[tuple[str, float]]: ...
    def payloads(self, ids: Iterable[str]) -> dict[str, Any]: ...
    def save(self) -> Path: ...
    def load(self) -> bool: ...
    def refresh(self) -> bool: ...


def vectors_url(data_dir: Path) -> str | None:
    from .store import store_url

    url = os.environ.get(VECTORS_ENV, "").strip() or store_url(data_dir)
    return url if url and url.startswith(("postgresql://", "postgres://")) else None


def open_vectors(directory: Path, model_id: str, backend: str, data_dir: Path, *, expert: str) -> Vectors:
    """The vector store of one index folder.

    Raises:
        ExpertUnconfigured: ``pgvector`` without a PostgreSQL URL, or without the ``postgres`` extra.
    """
    if backend == "numpy":
        return VectorStore(directory, model_id=model_id)
    url = vectors_url(data_dir)
    if url is None:
        raise ExpertUnconfigured(
            f"vectors: pgvector needs a postgresql:// URL in ${VECTORS_ENV} or the store setting", expert=expert
        )
    try:
        from .vectors_pg import PgVectorStore
    except ImportError as exc:
        raise ExpertUnconfigured(
            f"vectors: pgvector needs pip install -e '.[postgres]' ({exc})", expert=expert
        ) from exc
    return PgVectorStore(directory, model_id=model_id, url=url)
