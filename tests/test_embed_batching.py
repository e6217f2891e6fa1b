"""Bulk embedding: token-budgeted, length-sorted batches run concurrently give the same vectors."""

from __future__ import annotations

import numpy as np
import pytest

from engine.embedding import Embedder, token_batches

CODE = [
    "def read_lines(path):\n    with open(path) as f:\n        return f.read().splitlines()",
    "x",
    "class RetryPolicy:\n    def should_retry(self, attempt):\n        return attempt < 3\n" * 8,
    "sort a list in descending order",
    "",
]


def test_batches_respect_the_token_budget_and_cover_every_text_once() -> None:
    lengths = [128, 5, 40, 128, 90, 7, 7, 3, 128, 60] * 7
    batches = token_batches(lengths, token_budget=512, max_rows=16)
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(len(lengths)))
    widths = [max(lengths[i] for i in b) for b in batches]
    assert widths == sorted(widths, reverse=True)  # longest first
    for b, w in zip(batches, widths, strict=True):
        assert len(b) * w <= 512 and len(b) <= 16
    assert len(token_batches([600], token_budget=512, max_rows=16)[0]) == 1  # alone even if over budget


@pytest.fixture(scope="module")
def texts() -> list[str]:
    rng = np.random.default_rng(0)
    return [CODE[i % len(CODE)] * int(rng.integers(1, 4)) + f" # {i}" for i in range(90)]


def test_concurrent_batches_give_the_vectors_of_one_at_a_time(texts: list[str]) -> None:
    two = Embedder(threads=2, token_budget=256)
    one = Embedder(threads=1, token_budget=100_000)
    done: list[int] = []
    a = two.embed(texts, progress=done.append)
    b = one.embed(texts, batch_size=7)
    np.testing.assert_allclose(a, b, atol=2e-5)
    assert sum(done) == len(texts) and len(done) > 2  # progress per finished batch
    np.testing.assert_allclose(a[3], two.embed_query(texts[3]), atol=2e-5)


def test_an_error_in_a_progress_callback_stops_the_embedding(texts: list[str]) -> None:
    e = Embedder(threads=2, token_budget=256)

    def stop(n: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        e.embed(texts, progress=stop)
    assert e.embed(texts[:2]).shape == (2, e.dim)  # still usable afterwards
