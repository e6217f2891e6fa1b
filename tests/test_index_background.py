"""``engine index`` hands embeddings to a background process: the fast indexes answer at once, the
semantic index is searchable while it grows (flagged partial), no change is lost when indexing
runs again meanwhile, and the progress line moves at least every 2 s whatever the repo size."""

from __future__ import annotations

import itertools
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from engine.index.build import freshness, lock_holder
from engine.index.manifest import Manifest
from engine.workspace import Workspace

from .conftest import ROOT, make_repo
from .helpers import ask

TOPICS = [
    ("retry", "Retry a failed network request with exponential backoff and jitter."),
    ("cache", "Keep recently used results in memory and evict the least recently used entry."),
    ("parse", "Parse a configuration file of key = value lines, skipping comments."),
    ("upload", "Upload a file in chunks and resume an interrupted transfer."),
    ("auth", "Check a password against its salted hash in constant time."),
    ("report", "Render a table of totals per month as Markdown."),
]


def module(i: int) -> str:
    """A plausible module: a class with a few documented methods (~10 chunks)."""
    name, doc = TOPICS[i % len(TOPICS)]
    methods = "".join(
        f"    def step_{k}_{name}(self, value_{k}, limit={k + 2}):\n"
        f'        """{doc} Step {k} of {i}."""\n'
        f"        total = 0\n"
        f"        for item in range(limit):\n"
        f"            total += (value_{k} or 1) * item\n"
        f"        return total\n\n"
        for k in range(8)
    )
    return f'"""{doc}"""\n\n\nclass {name.title()}Worker{i}:\n{methods}'


def make_ws(tmp_path: Path, n_files: int) -> tuple[Path, Path]:
    files = {f"pkg/{TOPICS[i % len(TOPICS)][0]}_{i}.py": module(i) for i in range(n_files)}
    files["README.md"] = "# Demo\n\nA demo project.\n"
    ws = tmp_path / "ws"
    make_repo(ws / "demo", files)
    cfg = tmp_path / "config"
    cfg.mkdir()
    shutil.copy(ROOT / "experts.yaml", cfg)
    shutil.copy(ROOT / "priors.yaml", cfg)
    shutil.copytree(ROOT / "pipelines", cfg / "pipelines")
    return ws, cfg


def engine(*args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", *args], capture_output=True, text=True, check=False, **kw
    )  # type: ignore[call-overload]


def semantic_dir(ws: Path) -> Path:
    return ws / ".engine" / "index" / "semantic"


def wait_caught_up(ws: Path, timeout_s: float = 300) -> dict[str, object]:
    """Until no catch-up process holds the semantic lock and the index is no longer partial."""
    data, projects = ws / ".engine", Workspace.open([ws]).projects
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        fresh = freshness(semantic_dir(ws) / "manifest.json", projects)
        if lock_holder(data, "semantic") is None and not fresh["partial"]:
            return fresh
        time.sleep(0.2)
    log = (data / "index" / "catchup.log").read_text() if (data / "index" / "catchup.log").exists() else ""
    raise AssertionError(f"semantic never caught up; log:\n{log[-3000:]}")


def test_fast_indexes_answer_first_and_semantic_catches_up_in_the_background(tmp_path: Path) -> None:
    ws, cfg = make_ws(tmp_path, 80)  # ~700 chunks: several seconds of embedding
    try:
        res = engine("index", "-w", str(ws), "--config-dir", str(cfg))
        assert res.returncode == 0, res.stderr
        assert "in the background (pid" in res.stdout, res.stdout
        projects = Workspace.open([ws]).projects
        for fast in ("bm25", "symbols"):
            f = freshness(ws / ".engine" / "index" / fast / "manifest.json", projects)
            assert f["files_indexed"] >= 80 and not f["partial"]

        question = "retry a failed request with exponential backoff"
        r = ask(cfg, ws, question, intent="conceptual", mode="separate")
        sem = r.response["receipt"]["per_expert"]["semantic"]
        assert sem["status"] == "ok"  # answers from what is committed, even nothing yet
        assert sem["freshness"]["partial"] is True and sem["freshness"]["files_pending"] > 0
        assert 0 <= sem["freshness"]["progress"] < 1
        assert all("index-partial" in it["flags"] for it in r.response["separate"]["semantic"]["items"])
        assert r.response["separate"]["bm25"]["items"]  # the fast experts answer fully meanwhile

        fresh = wait_caught_up(ws)
        assert fresh["files_indexed"] == 81 and fresh["files_pending"] == 0 and "progress" not in fresh
        r = ask(cfg, ws, question, intent="conceptual", mode="separate")
        items = r.response["separate"]["semantic"]["items"]
        assert items and items[0]["path"].startswith("pkg/retry_")
        assert not any("index-partial" in it["flags"] for it in items)
        assert "catch-up pid" in (ws / ".engine" / "index" / "catchup.log").read_text()
    finally:
        wait_caught_up(ws)  # never leave a process writing into a deleted temp dir


def test_a_change_made_while_catching_up_is_not_lost(tmp_path: Path) -> None:
    ws, cfg = make_ws(tmp_path, 60)
    try:
        first = engine("index", "-w", str(ws), "--config-dir", str(cfg))
        assert first.returncode == 0, first.stderr
        changed = ws / "demo" / "pkg" / "cache_1.py"
        changed.write_text(
            changed.read_text() + "\n\ndef zebra_quota_ledger():\n"
            '    """Count the zebras allowed per ledger page."""\n    return 42\n'
        )
        second = engine("index", "-w", str(ws), "--config-dir", str(cfg))
        assert second.returncode == 0, second.stderr
        wait_caught_up(ws)
        m = Manifest.load(semantic_dir(ws) / "manifest.json")
        symbols = Manifest.load(ws / ".engine" / "index" / "symbols" / "manifest.json")
        assert m.files["demo:pkg/cache_1.py"]["sha256"] == symbols.files["demo:pkg/cache_1.py"]["sha256"]
        r = ask(cfg, ws, "how many zebras are allowed on a ledger page", intent="conceptual", mode="separate")
        top = r.response["separate"]["semantic"]["items"][0]
        assert top["path"] == "pkg/cache_1.py" and "zebra" in top["content"]
    finally:
        wait_caught_up(ws)


def test_progress_moves_at_least_every_two_seconds_on_a_small_repo(tmp_path: Path) -> None:
    ws, cfg = make_ws(tmp_path, 30)  # < 200 files: the old bar printed nothing until the end
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "index", "--wait", "-w", str(ws), "--config-dir", str(cfg)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stamps: list[tuple[float, str]] = []

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            stamps.append((time.monotonic(), line.rstrip()))

    reader = threading.Thread(target=read)
    reader.start()
    proc.wait(timeout=600)
    ended = time.monotonic()
    reader.join()
    assert proc.returncode == 0, "\n".join(s for _, s in stamps)
    lines = [s for _, s in stamps]
    assert any(s.startswith("semantic") and "files" in s for s in lines), lines
    times = [t for t, _ in stamps] + [ended]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert max(gaps) <= 2.0, list(zip(gaps, lines, strict=False))
    assert len(lines) >= 3


def test_wait_indexes_everything_before_returning(tmp_path: Path) -> None:
    ws, cfg = make_ws(tmp_path, 5)
    res = engine("index", "--wait", "-w", str(ws), "--config-dir", str(cfg), "-f", "json")
    assert res.returncode == 0, res.stderr
    assert "background" not in res.stdout
    fresh = freshness(semantic_dir(ws) / "manifest.json", Workspace.open([ws]).projects)
    assert fresh["files_indexed"] == 6 and not fresh["partial"]


def test_a_commit_that_changed_no_file_leaves_no_slow_index_stale(tmp_path: Path) -> None:
    """Found by an exploratory run: after an empty commit (or a branch switch to the same tree),
    `engine index` found nothing to re-embed and never recorded the new HEAD, so semantic and typed
    said "stale" in every receipt for ever."""
    ws, cfg = make_ws(tmp_path, 3)
    assert engine("index", "--wait", "-w", str(ws), "--config-dir", str(cfg)).returncode == 0
    subprocess.run(["git", "-C", str(ws / "demo"), "commit", "-q", "--allow-empty", "-m", "empty"], check=True)
    projects = Workspace.open([ws]).projects
    assert freshness(semantic_dir(ws) / "manifest.json", projects)["stale"] == {
        "demo": Manifest.load(semantic_dir(ws) / "manifest.json").heads["demo"]
    }
    res = engine("index", "-w", str(ws), "--config-dir", str(cfg), "-f", "json")  # the background mode
    assert res.returncode == 0, res.stderr
    for name in ("semantic", "typed"):
        fresh = freshness(ws / ".engine" / "index" / name / "manifest.json", projects)
        assert not fresh["stale"] and not fresh["partial"], (name, fresh)


def test_a_reused_pid_in_a_lock_file_is_not_a_holder(tmp_path: Path) -> None:
    """Found by an exploratory run: a pid left in index.semantic.lock by a killed catch-up and later
    given to another process (a container restart) kept the catch-up from ever starting again."""
    import os

    from engine.index.state import index_lock

    data = tmp_path / "d"
    with index_lock(data, "semantic"):
        assert lock_holder(data, "semantic") == os.getpid()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        (data / "index.semantic.lock").write_text(f"{sleeper.pid} 1\n")  # its pid, another start time
        assert lock_holder(data, "semantic") is None
        (data / "index.semantic.lock").write_text(f"{sleeper.pid}\n")  # a lock file from before: trusted
        assert lock_holder(data, "semantic") == sleeper.pid
    finally:
        sleeper.kill()
        sleeper.wait()
