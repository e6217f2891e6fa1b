"""The pgvector backend behind the vector store's interface (engine/vectors_pg.py): the same
answers as the exact numpy store, persistence through its stamp file, and the semantic expert
switched to it by its ``vectors`` setting, against a real PostgreSQL with pgvector."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from engine.indexing import index_workspace
from engine.spec import load_config
from engine.vectors import VectorStore
from engine.workspace import Workspace
from tests.helpers import ask
from tests.pg_support import pgvector_cluster, pgvector_url  # noqa: F401 - fixtures


def test_pgvector_exact_search_equals_the_numpy_store(tmp_path: Path, pgvector_url: str) -> None:
    from engine.vectors_pg import PgVectorStore

    rng = np.random.default_rng(0)
    ids = [f"c{i}" for i in range(300)]
    m = rng.normal(size=(300, 32)).astype(np.float32)
    ref = VectorStore(tmp_path / "np", model_id="m")
    ref.add(ids, m)
    pg = PgVectorStore(tmp_path / "pg", model_id="m", url=pgvector_url, exact=True)
    pg.add(ids, m)
    assert pg.search(m[0], 5) == []  # nothing is searchable before save, as after a crash mid-batch
    pg.save()
    for q in rng.normal(size=(10, 32)).astype(np.float32):
        got, want = pg.search(q, 10), ref.search(q, 10)
        assert [i for i, _ in got] == [i for i, _ in want]
        assert np.allclose([s for _, s in got], [s for _, s in want], atol=1e-5)
    pg.remove(ids[:100])
    pg.add(["c100"], m[0])  # an upsert replaces the vector
    pg.save()
    assert len(pg) == 200 and pg.search(m[0], 1)[0][0] == "c100"
    pg.exact = False  # the HNSW index: approximate, but at this size it finds the obvious neighbour
    assert pg.search(m[0], 1)[0][0] == "c100"
    pg.close()

    again = PgVectorStore(tmp_path / "pg", model_id="m", url=pgvector_url, exact=True)
    assert again.load() and len(again) == 200 and again.dim == 32
    assert not PgVectorStore(tmp_path / "pg", model_id="other", url=pgvector_url).load()  # re-embed
    again.clear()
    again.save()
    assert len(again) == 0 and again.search(m[0], 3) == []
    again.close()


def test_the_semantic_expert_answers_from_pgvector(
    workspace_dir: Path, config_dir: Path, pgvector_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    experts = yaml.safe_load((config_dir / "experts.yaml").read_text())
    experts["experts"]["semantic"]["settings"]["vectors"] = "pgvector"
    (config_dir / "experts.yaml").write_text(yaml.safe_dump(experts, sort_keys=False))
    monkeypatch.setenv("ENGINE_VECTORS", pgvector_url)
    ws = Workspace.open([workspace_dir])
    index_workspace(ws, load_config(config_dir), only=["semantic"], progress=False)
    index = ws.data_dir / "index" / "semantic"
    assert (index / "vectors.pg.json").exists() and not (index / "vectors.json").exists()  # no numpy catalog
    q = "how often is a failed network call attempted again"
    sem = ask(config_dir, workspace_dir, q, intent="conceptual", mode="separate").response["separate"]["semantic"]
    assert sem["status"] == "ok" and sem["items"][0]["path"] == "alpha/retry.py"

    monkeypatch.delenv("ENGINE_VECTORS")  # no URL anywhere: a classified error, not a crash
    monkeypatch.delenv("ENGINE_STORE", raising=False)
    r = ask(config_dir, workspace_dir, q, intent="conceptual", mode="separate")
    assert r.response["separate"]["semantic"]["status"] == "unconfigured"
