"""``engine index --executor ray``: parsing and embedding spread over a local multi-worker Ray cluster
(loopback only) build the same index as the local executor: the same chunks, the same vectors,
the same manifest (engine/index/executor.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine.errors import SpecError
from engine.index.executor import LocalExecutor, make_executor
from engine.indexing import index_workspace
from engine.spec import load_config
from engine.vectors import VectorStore
from engine.workspace import Workspace

from .conftest import make_repo

FILES = {
    f"pkg/mod{i}.py": (
        f'class Handler{i}:\n    """Handles request kind {i} with retries."""\n\n'
        f"    def run(self, payload):\n        return [x * {i} for x in payload]\n\n\n"
        f"def helper_{i}(a, b):\n    return a + b * {i}\n"
    )
    for i in range(9)
}


def _index(ws_root: Path, config_dir: Path, data: Path, executor: str) -> Path:
    ws = Workspace.open([ws_root], data_dir=data)
    runner = make_executor(executor)
    try:  # batches of 2 files: several in flight at once on the Ray side
        cfg = load_config(config_dir)
        (rep,) = index_workspace(ws, cfg, only=["semantic"], progress=False, executor=runner, batch_files=2)
    finally:
        runner.close()
    assert rep.added == len(FILES) and rep.units > 0
    return data / "index" / "semantic"


def test_the_ray_built_index_equals_the_local_one(
    tmp_path: Path, config_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("ray", reason="the ray extra: pip install -e '.[ray]'")
    monkeypatch.setenv("ENGINE_RAY_CPUS", "2")  # two workers: batches really run side by side
    ws = make_repo(tmp_path / "ws", FILES)
    local = _index(ws, config_dir, tmp_path / "local", "local")
    ray = _index(ws, config_dir, tmp_path / "ray", "ray")
    a, b = VectorStore(local), VectorStore(ray)
    assert a.load() and b.load()
    assert sorted(a.ids) == sorted(b.ids) and len(a) > 0
    assert a.payloads(a.ids) == b.payloads(b.ids)  # chunk ranges, symbols, snippets
    for vid in a.ids:  # bit for bit: same batches, same model
        va, vb = a.get(vid), b.get(vid)
        assert va is not None and vb is not None and np.array_equal(va, vb), vid
    files = lambda d: json.loads((d / "manifest.json").read_text())["files"]  # noqa: E731
    assert files(local) == files(ray)


def test_executors_map_in_order_and_unknown_names_are_config_errors() -> None:
    assert list(LocalExecutor().map(lambda x: x * 2, [3, 1, 2])) == [6, 2, 4]
    with pytest.raises(SpecError, match="unknown executor"):
        make_executor("dask")
