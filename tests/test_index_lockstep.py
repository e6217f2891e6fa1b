"""The fast indexes updated in lockstep with one parse per file (and a parse worker ahead of them)
build exactly what one-at-a-time updates build."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from engine.experts import ExpertEnv, adapter_class
from engine.index import build
from engine.index.build import IndexJob, scan_workspace, update_index, update_indexes
from engine.index.chunking import OutlinePrefetch, file_outline
from engine.index.symbols import SymbolStore
from engine.spec import load_config
from engine.syntax import chunks, tags
from engine.workspace import Workspace

from .conftest import ROOT
from .test_index_background import make_ws

FAST = ("bm25", "docs", "symbols", "typed")


def test_one_outline_gives_the_chunks_and_tags_of_separate_parses() -> None:
    for path in [*sorted((ROOT / "engine").rglob("*.py"))[:40], ROOT / "README.md"]:
        data = path.read_bytes()
        rel = path.relative_to(ROOT).as_posix()
        got_tags, got_chunks = file_outline(rel, data)
        assert got_tags == tags(rel, data)
        assert [(c.start_line, c.end_line, c.symbol, c.kind, c.text) for c in got_chunks] == [
            (c.start_line, c.end_line, c.symbol, c.kind, c.text) for c in chunks(rel, data)
        ]


def test_the_parse_worker_returns_what_parsing_here_returns() -> None:
    files = [(p.relative_to(ROOT).as_posix(), p.read_bytes()) for p in sorted((ROOT / "engine" / "index").glob("*.py"))]
    pre = OutlinePrefetch()
    try:
        pre.submit(files)
        fut = pre._worker.submit(files)  # a second request: the reply order follows the requests
        remote = fut.result(timeout=120)
    finally:
        pre.close()
    assert pre._worker._proc.returncode == 0
    assert [(t, [c.text for c in cs]) for t, cs in remote] == [
        (file_outline(p, d)[0], [c.text for c in file_outline(p, d)[1]]) for p, d in files
    ]


BIG_GROUP = [(f"m{i}.py", (f"def f{i}(x):\n    return x\n" * 4000).encode()) for i in range(4)]


def _flood(worker: Any, blocked: str) -> list[Any]:
    """12 big groups sent from a thread, faster than the worker answers: both pipes fill. Fails with
    ``blocked`` when submit() does not return."""
    import threading

    futures: list[Any] = []
    sender = threading.Thread(target=lambda: futures.extend(worker.submit(BIG_GROUP) for _ in range(12)), daemon=True)
    sender.start()
    sender.join(timeout=120)
    assert not sender.is_alive(), blocked
    return futures


def test_the_parse_worker_never_deadlocks_when_both_pipes_fill() -> None:
    """Requests sent faster than the worker answers fill its input pipe while its replies fill the
    output pipe: the reader must still take replies (it once waited for the lock a blocked writer held)."""
    from engine.index.parse_worker import ParseWorker

    worker = ParseWorker()
    try:
        futures = _flood(worker, "submit() blocked: the parse worker deadlocked")
        assert all(len(f.result(timeout=120)) == len(BIG_GROUP) for f in futures)
    finally:
        worker.close()


def test_a_parse_worker_reader_that_dies_does_not_hang_the_writer(monkeypatch: pytest.MonkeyPatch) -> None:
    """If the thread taking replies stops (a bug, an unpicklable reply), the worker is killed: later
    submits fail at once (the indexer then parses in-process) instead of blocking on a full pipe."""
    from engine import frames
    from engine.index.parse_worker import ParseWorker

    real, calls = frames.read_frame, []

    def flaky(src: Any) -> Any:
        calls.append(1)
        if len(calls) > 1:
            raise ValueError("reply could not be read")
        return real(src)

    monkeypatch.setattr(frames, "read_frame", flaky)
    worker = ParseWorker()
    try:
        futures = _flood(worker, "submit() blocked after the reader died")
        assert len(futures[0].result(timeout=30)) == len(BIG_GROUP)  # the first reply was read
        assert all(isinstance(f.exception(timeout=30), OSError | EOFError) for f in futures[1:])
    finally:
        worker.close()


def _index(tmp_path: Path, name: str, lockstep: bool, prefetch: bool, monkeypatch: pytest.MonkeyPatch) -> dict:
    ws_dir, cfg_dir = make_ws(tmp_path / name, 40)
    ws, cfg = Workspace.open([ws_dir]), load_config(cfg_dir)
    env = ExpertEnv(ws)
    monkeypatch.setattr(build, "PREFETCH_MIN_FILES", 1 if prefetch else 10**9)
    current = scan_workspace(ws)
    experts = [(n, adapter_class(cfg.experts[n].adapter)(cfg.experts[n], env)) for n in FAST]
    if lockstep:
        jobs = [IndexJob(n, e.indexer(), getattr(e, "accepts", None)) for n, e in experts]
        reports = update_indexes(jobs, ws, current)
    else:
        reports = [update_index(n, e.indexer(), ws, current, accept=getattr(e, "accepts", None)) for n, e in experts]
    store = SymbolStore(ws.data_dir / "index" / "symbols")
    rows = sorted(
        (r.qualified_name, r.role, r.path, r.start_line) for r in store.by_name(["step_0_retry"], "definition")
    )
    store.close()
    out = {r.name: (r.added, r.units) for r in reports}
    shutil.rmtree(ws.data_dir)
    return {"reports": out, "rows": rows}


def test_lockstep_with_and_without_the_worker_builds_what_one_at_a_time_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    alone = _index(tmp_path, "alone", lockstep=False, prefetch=False, monkeypatch=monkeypatch)
    together = _index(tmp_path, "together", lockstep=True, prefetch=False, monkeypatch=monkeypatch)
    ahead = _index(tmp_path, "ahead", lockstep=True, prefetch=True, monkeypatch=monkeypatch)
    assert alone == together == ahead
    assert alone["reports"]["bm25"][0] == 41 and alone["rows"]  # 40 modules + README, and real rows


def test_a_file_edited_between_scan_and_read_is_indexed_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by an exploratory run: the manifest recorded the scan's hash over bytes read later, so a
    function that existed only mid-edit stayed in the index (served as confirmed) after the edit was undone."""
    from engine.index import build
    from engine.index.symbols import SymbolStore
    from engine.indexing import index_workspace
    from engine.spec import load_config
    from engine.workspace import Workspace

    from .conftest import ROOT, make_repo

    repo = make_repo(tmp_path / "ws" / "lib", {"a.py": "def kept():\n    pass\n", "b.py": "X = 1\n"})
    cfg = load_config(ROOT)
    real = build.read_indexable

    def mid_edit(root: Path, path: str, policy: object = None) -> bytes | None:
        data = real(root, path, policy)  # type: ignore[arg-type]
        return data + b"def mid_edit_only():\n    pass\n" if path == "a.py" and data else data

    monkeypatch.setattr(build, "read_indexable", mid_edit)
    index_workspace(Workspace.open([repo]), cfg, only=["symbols"], progress=False)
    monkeypatch.setattr(build, "read_indexable", real)
    ws = Workspace.open([repo])
    store = SymbolStore(ws.data_dir / "index" / "symbols")
    assert store.by_name(["mid_edit_only"], "definition")
    [report] = index_workspace(ws, cfg, only=["symbols"], progress=False)
    assert report.added == 1  # a.py again: what was indexed is not what the file holds
    assert not store.by_name(["mid_edit_only"], "definition")
