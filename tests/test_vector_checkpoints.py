"""VectorStore format 2: checkpoints as segments, payloads, compaction, and readers in other
processes that never see a torn or inconsistent store while a writer keeps saving."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from engine import vectors as vectors_mod
from engine.vector_segments import CATALOG
from engine.vectors import VectorStore

DIM = 8


def vec(i: int) -> np.ndarray:
    """A vector that names its id: readers check every hit against it."""
    v = np.random.default_rng(i).standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def files(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


def test_each_save_appends_a_segment_and_payloads_come_back(tmp_path: Path) -> None:
    s = VectorStore(tmp_path, model_id="m")
    s.add(["a", "b"], np.stack([vec(1), vec(2)]), payloads=[{"n": 1}, ["two", 2]])
    s.save()
    s.add(["c"], vec(3)[None, :], payloads=[None])
    s.save()
    assert len([f for f in files(tmp_path) if f.endswith(".npy")]) == 2
    t = VectorStore(tmp_path, model_id="m")
    assert t.load() and t.ids == ["a", "b", "c"]
    assert t.search(vec(2), 1)[0][0] == "b"
    assert t.payloads(["a", "b", "c", "zzz"]) == {"a": {"n": 1}, "b": ["two", 2]}
    np.testing.assert_allclose(t.get("c"), vec(3), atol=1e-6)


def test_replace_and_remove_survive_a_reload_and_dead_rows_get_compacted(tmp_path: Path) -> None:
    s = VectorStore(tmp_path, model_id="m")
    ids = [f"f{i}" for i in range(40)]
    s.add(ids, np.stack([vec(i) for i in range(40)]), payloads=[{"i": i} for i in range(40)])
    s.save()
    s.add(["f5"], -vec(5)[None, :], payloads=[{"i": -5}])  # replace a saved row
    assert s.remove(["f6", "f7", "nope"]) == 2
    s.save()
    t = VectorStore(tmp_path, model_id="m")
    assert t.load() and len(t) == 38 and "f6" not in t
    assert t.search(-vec(5), 1)[0][0] == "f5" and t.payloads(["f5"]) == {"f5": {"i": -5}}
    first = set(files(tmp_path))
    # a quarter of the rows dead → the next save rewrites the live ones into one segment
    t.remove([f"f{i}" for i in range(10, 22)])
    t.save()
    catalog = json.loads((tmp_path / CATALOG).read_text())
    assert len(catalog["segments"]) == 1 and catalog["segments"][0]["dead"] == []
    assert catalog["count"] == 26 and len(catalog["retired"]) == 2
    assert first - set(files(tmp_path)) == set()  # retired segments are still there for readers ...
    t.add(["new"], vec(99)[None, :])
    t.save()
    assert not any(r in f for r in catalog["retired"] for f in files(tmp_path))  # ... until the next save
    u = VectorStore(tmp_path, model_id="m")
    assert u.load() and len(u) == 27
    assert u.payloads(["f30"]) == {"f30": {"i": 30}}  # payloads carried through compaction


def test_many_small_saves_are_merged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vectors_mod, "MAX_SEGMENTS", 4)
    s = VectorStore(tmp_path)
    for i in range(12):
        s.add([f"x{i}"], vec(i)[None, :], payloads=[i])
        s.save()
        assert len(json.loads((tmp_path / CATALOG).read_text())["segments"]) <= 5
    t = VectorStore(tmp_path)
    assert t.load() and t.ids == [f"x{i}" for i in range(12)]
    assert t.payloads(["x0", "x11"]) == {"x0": 0, "x11": 11}


def test_refresh_sees_a_writers_save_and_costs_a_stat_otherwise(tmp_path: Path) -> None:
    w = VectorStore(tmp_path, model_id="m")
    w.add(["a"], vec(1)[None, :])
    w.save()
    r = VectorStore(tmp_path, model_id="m")
    assert r.refresh() and len(r) == 1
    segments_before = r._segments
    assert r.refresh() and r._segments is segments_before  # unchanged catalog: nothing re-read
    w.add(["b"], vec(2)[None, :])
    w.save()
    assert r.refresh() and r.search(vec(2), 1)[0][0] == "b"
    assert VectorStore(tmp_path, model_id="other").refresh() is False


def test_a_crashed_writers_leftovers_are_swept(tmp_path: Path) -> None:
    s = VectorStore(tmp_path)
    s.add(["a"], vec(1)[None, :])
    s.save()
    (tmp_path / "seg-000099-deadbeef.npy").write_bytes(b"half written")
    (tmp_path / ".seg-000100-cafe.npy-x.tmp").write_bytes(b"")
    (tmp_path / "vectors.npz").write_bytes(b"format 1")
    t = VectorStore(tmp_path)
    assert t.load()
    t.add(["b"], vec(2)[None, :])
    t.save()
    assert not [f for f in files(tmp_path) if "000099" in f or f.endswith(".tmp") or f == "vectors.npz"]


WRITER = textwrap.dedent(
    """
    import sys, numpy as np
    from engine import vectors as V
    V.MAX_SEGMENTS = 3  # compact often: the hardest case for readers
    def vec(i):
        v = np.random.default_rng(i).standard_normal(8).astype(np.float32); return v / np.linalg.norm(v)
    s = V.VectorStore(sys.argv[1], model_id="m")
    for rnd in range(int(sys.argv[2])):
        ids = [f"r{rnd}-{k}" for k in range(20)]
        s.add(ids, np.stack([vec(rnd * 100 + k) for k in range(20)]), payloads=[rnd * 100 + k for k in range(20)])
        if rnd >= 2:
            s.remove([f"r{rnd - 2}-{k}" for k in range(0, 20, 2)])
        s.save()
    """
)

READER = textwrap.dedent(
    """
    import sys, time, numpy as np
    from engine.vectors import VectorStore
    def vec(i):
        v = np.random.default_rng(i).standard_normal(8).astype(np.float32); return v / np.linalg.norm(v)
    r = VectorStore(sys.argv[1], model_id="m")
    checks, deadline = 0, time.monotonic() + float(sys.argv[2])
    while time.monotonic() < deadline:
        if not r.refresh():
            continue
        ids = r.ids
        assert len(ids) == len(set(ids)) == len(r), (len(ids), len(r))
        q = vec(checks % 997)
        hits = r.search(q, 50)
        pay = r.payloads([h for h, _ in hits])
        for h, score in hits:
            rnd, k = map(int, h[1:].split("-"))
            n = rnd * 100 + k
            assert abs(score - float(vec(n) @ q)) < 1e-4, (h, score)  # the vector is this id's
            if h in pay:
                assert pay[h] == n, (h, pay[h])
        checks += 1
    print(checks)
    """
)


def test_readers_in_other_processes_never_see_a_torn_store(tmp_path: Path) -> None:
    store = tmp_path / "store"
    seed = VectorStore(store, model_id="m")
    seed.add(["r0-0"], vec(0)[None, :], payloads=[0])
    seed.save()
    readers = [
        subprocess.Popen([sys.executable, "-c", READER, str(store), "6"], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    time.sleep(0.3)
    w = subprocess.run([sys.executable, "-c", WRITER, str(store), "120"], capture_output=True, text=True)
    assert w.returncode == 0, w.stderr[-2000:]
    for p in readers:
        out, _ = p.communicate(timeout=60)
        assert p.returncode == 0, out
        assert int(out) > 10  # it really read while the writer saved
    final = VectorStore(store, model_id="m")
    assert final.load() and len(final) == 118 * 10 + 2 * 20 + 1 - 1  # r0-0 is re-added then half-removed


def test_a_damaged_vector_store_is_rebuilt_whole_not_emptied_under_a_complete_manifest(
    tmp_path: Path, config_dir: Path
) -> None:
    """Found by an exploratory run: a truncated catalog and one changed file left a semantic index
    of that one file whose manifest still listed every file (receipts: complete, for good)."""
    from engine.indexing import index_workspace
    from engine.spec import load_config
    from engine.workspace import Workspace

    from .conftest import commit_files, make_repo

    repo = make_repo(tmp_path / "ws" / "lib", {f"m{i}.py": f"def f{i}():\n    return {i}\n" for i in range(4)})
    ws, cfg = Workspace.open([repo]), load_config(config_dir)
    index_workspace(ws, cfg, only=["semantic"], progress=False)
    store_dir = ws.data_dir / "index" / "semantic"
    full = VectorStore(store_dir)
    assert full.load()
    count = len(full.ids)
    (store_dir / CATALOG).write_text((store_dir / CATALOG).read_text()[:50])  # truncated
    commit_files(repo, {"m0.py": "def f0():\n    return 'changed'\n"}, "one change")
    index_workspace(Workspace.open([repo]), cfg, only=["semantic"], progress=False)
    again = VectorStore(store_dir)
    assert again.load() and len(again.ids) == count
