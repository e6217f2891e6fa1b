"""``engine bench --workspace DIR``: what the router costs on one real workspace.

Measured, in this order, in one process:

1. **index throughput**: a cold ``engine index`` into a fresh data dir (a temporary one unless
   ``--data-dir`` is given, so the user's own index is never touched): files/s and chunks/s
   per index;
2. **warm end-to-end latency** (cache off) over the questions, after one warm-up pass, and the
   **router overhead** = end to end minus the slowest expert of that run (classify, gate,
   scoring, fusion, receipt signing and the spool write); per-expert latency percentiles from
   the receipts; answer-cache hits for contrast;
3. **time until a saved file is searchable**: a new file with a unique token is saved in the
   first project, the incremental index update runs, and the router is asked for the token;
   reported per expert that found it (the file is deleted and un-indexed afterwards; skip with
   ``freshness=False`` on a read-only workspace);
4. **peak RSS** of this process (the JSON also has the largest child: rg, git).

Questions come from ``--questions FILE`` (one per line, or JSON lines with ``question`` and
optional ``intent``), else they are generated from the workspace's own definitions (where is X
defined, "X", who calls X, plain words from the name) so every class gets exercised.
"""

from __future__ import annotations

import json
import random
import re
import resource
import secrets
import shutil
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

from ..config import load_config
from ..errors import EvalError
from ..index.build import scan_workspace
from ..indexing import index_workspace
from ..runtime import Router
from ..workspace import Workspace, is_test_file, language_of
from .arms import index_backed
from .metrics import percentiles

_DEF = re.compile(
    rb"^\s*(?:async\s+)?(?:def|class|function|func|fn|struct|interface|type|trait)\s+([A-Za-z_]\w{3,})", re.M
)
_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")


@dataclass
class BenchOptions:
    workspaces: list[Path]
    config_dir: Path
    questions_file: Path | None = None
    n_questions: int = 30
    rounds: int = 3
    data_dir: Path | None = None
    freshness: bool = True
    pipeline: str = "router"
    progress: bool = True


def load_questions(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        out.append(json.loads(line) if line.startswith("{") else {"question": line})
    return out


def generate_questions(ws: Workspace, n: int) -> list[dict[str, Any]]:
    """Deterministic questions from the workspace's own definitions, spread over four shapes."""
    files = sorted(
        (f for f in scan_workspace(ws).values() if language_of(f.path) and not is_test_file(f.path)),
        key=lambda f: f.key,
    )
    roots = {p.name: p.root for p in ws.projects}
    rng = random.Random(0)
    rng.shuffle(files)
    names: list[tuple[str, str]] = []
    for f in files:
        try:
            data = (roots[f.project] / f.path).read_bytes()[:200_000]
        except OSError:
            continue
        found = [m.group(1).decode() for m in _DEF.finditer(data)]
        if found:
            names.append((rng.choice(found), f.path))
        if len(names) >= n:
            break
    shapes = [
        lambda x, p: f"where is {x} defined",
        lambda x, p: f'"{x}"',
        lambda x, p: f"who calls {x}",
        lambda x, p: (
            "code that handles "
            + " ".join(w.lower() for w in _WORDS.findall(x))
            + f" in {Path(p).stem.replace('_', ' ')}"
        ),
    ]
    return [{"question": shapes[i % len(shapes)](x, p)} for i, (x, p) in enumerate(names)]


def _index(ws: Workspace, cfg: Any, progress: bool) -> dict[str, Any]:
    started = time.perf_counter()
    reports = index_workspace(ws, cfg, progress=progress)
    per = {}
    for r in reports:
        busy = r.seconds > 0 and r.added > 0  # an index with nothing to do has no throughput
        per[r.name] = {
            "files": r.added,
            "chunks": r.units,
            "seconds": round(r.seconds, 2),
            "files_per_s": round(r.added / r.seconds, 1) if busy else None,
            "chunks_per_s": round(r.units / r.seconds, 1) if busy else None,
        }
    return {"total_s": round(time.perf_counter() - started, 2), "per_index": per}


async def _latency(router: Router, pipeline: str, questions: list[dict[str, Any]], rounds: int) -> dict[str, Any]:
    async def once(q: dict[str, Any], no_cache: bool = True) -> tuple[float, dict[str, Any]]:
        started = time.perf_counter()
        res = await router.run(pipeline, {**q, "no_cache": no_cache, "limit": 10})
        elapsed = (time.perf_counter() - started) * 1000
        router.flush(ingest=False)
        return elapsed, res.response.get("receipt") or {}

    for q in questions:  # warm-up: processes, page cache, index readers
        await once(q)
    e2e, overhead, errors = [], [], 0
    experts: dict[str, list[float]] = {}
    for _ in range(rounds):
        for q in questions:
            ms, receipt = await once(q)
            e2e.append(ms)
            errors += receipt.get("status", "ok") != "ok"
            lat = {n: pe["latency_ms"] for n, pe in (receipt.get("per_expert") or {}).items()}
            for n, v in lat.items():
                experts.setdefault(n, []).append(v)
            overhead.append(ms - max(lat.values()) if lat else ms)
    cached = []
    sample = questions[:10]
    for q in sample:
        await once(q, no_cache=False)
    router.flush(ingest=True)  # cache rows must be in DuckDB before they can hit
    for q in sample:
        cached.append((await once(q, no_cache=False))[0])
    return {
        "end_to_end_ms": percentiles(e2e),
        "router_overhead_ms": percentiles(overhead),
        "experts_ms": {n: percentiles(v) for n, v in sorted(experts.items())},
        "cached_end_to_end_ms": percentiles(cached),
        "errors": errors,
    }


async def _freshness(router: Router, ws: Workspace, cfg: Any, pipeline: str) -> dict[str, Any]:
    project = ws.projects[0]
    token = f"enginebenchprobe{secrets.token_hex(6)}"
    rel = f"engine_bench_probe_{token[-12:]}.py"
    target = project.root / rel
    indexed = index_backed(cfg, {n for n, s in cfg.experts.items() if s.enabled})
    try:
        saved = time.perf_counter()
        target.write_text(f'def {token}():\n    """engine bench freshness probe"""\n    return "{token}"\n')
        t = time.perf_counter()
        index_workspace(ws, cfg, progress=False)
        index_ms = (time.perf_counter() - t) * 1000
        found_at: dict[str, float] = {}
        deadline = time.perf_counter() + 30
        while True:  # re-ask until every selected index-backed expert sees the file (or 30 s pass)
            t = time.perf_counter()
            res = await router.run(pipeline, {"question": f'"{token}"', "no_cache": True, "limit": 10})
            query_ms = (time.perf_counter() - t) * 1000
            router.flush(ingest=False)
            now = (time.perf_counter() - saved) * 1000
            for item in res.response.get("items", []):
                if item.get("path") == rel:
                    for s in item.get("sources", []):
                        found_at.setdefault(s["expert"], round(now, 1))
            selected = set((res.response.get("receipt") or {}).get("experts_selected", {}).get("selected", []))
            want = indexed & selected
            if (want <= set(found_at) if want else bool(found_at)) or time.perf_counter() > deadline:
                break
            await anyio.sleep(0.05)
        by_index = [found_at[n] for n in indexed if n in found_at]
        return {
            "index_update_ms": round(index_ms, 1),
            "query_ms": round(query_ms, 1),
            "save_to_searchable_ms": found_at,
            "save_to_indexed_searchable_ms": max(by_index) if by_index else None,
            "index_experts": sorted(indexed),
            "file": f"{project.name}:{rel}",
        }
    except OSError as exc:
        return {"skipped": f"cannot write a probe file: {exc}"}
    finally:
        if target.exists():
            target.unlink()
            index_workspace(ws, cfg, progress=False)


def run_bench(opts: BenchOptions) -> dict[str, Any]:
    temp = opts.data_dir is None
    data_dir = Path(tempfile.mkdtemp(prefix="engine-bench-")) if temp else opts.data_dir
    assert data_dir is not None
    try:
        ws = Workspace.open(opts.workspaces, data_dir=data_dir)
        cfg = load_config(opts.config_dir)
        index = _index(ws, cfg, opts.progress)
        questions = (
            load_questions(opts.questions_file) if opts.questions_file else generate_questions(ws, opts.n_questions)
        )
        if not questions:
            raise EvalError("no questions: pass --questions FILE (the workspace has no definitions to ask about)")
        router = Router(opts.config_dir, ws, arm="bench")

        async def measure() -> tuple[dict[str, Any], dict[str, Any]]:
            try:
                lat = await _latency(router, opts.pipeline, questions, opts.rounds)
                fresh = await _freshness(router, ws, cfg, opts.pipeline) if opts.freshness else {"skipped": "disabled"}
                return lat, fresh
            finally:
                router.flush(ingest=True)
                await router.aclose()

        latency, fresh = anyio.run(measure)
        files = sum(1 for _ in scan_workspace(ws))
    finally:
        if temp:
            shutil.rmtree(data_dir, ignore_errors=True)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rss_children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "workspace": [str(p) for p in ws.roots],
        "projects": [p.name for p in ws.projects],
        "files": files,
        "questions": len(questions),
        "rounds": opts.rounds,
        "index": index,
        **latency,
        "freshness": fresh,
        # children: the largest single child (rg, git); Linux may count a forked child's pre-exec pages
        "peak_rss_mb": {"self": round(rss, 1), "largest_child": round(rss_children, 1)},
    }


def bench_table(r: dict[str, Any]) -> str:
    """The bench result as a markdown table (what docs/benchmarks.md shows)."""

    def pc(p: dict[str, Any], *keys: str) -> str:
        return " / ".join("–" if p.get(k) is None else f"{p[k]:.1f}" for k in keys)

    rows = [
        ("workspace", f"{', '.join(r['projects'])} ({r['files']} files)"),
        ("questions × rounds", f"{r['questions']} × {r['rounds']} (after one warm-up pass)"),
        ("index, cold (total)", f"{r['index']['total_s']} s"),
    ]
    for name, i in r["index"]["per_index"].items():
        if not i["files"]:
            rows.append((f"index `{name}`", "no files it indexes"))
            continue
        rows.append(
            (
                f"index `{name}`",
                (
                    f"{i['files']} files, {i['chunks']} chunks in {i['seconds']} s: "
                    f"{i['files_per_s']} files/s, {i['chunks_per_s']} chunks/s"
                ),
            )
        )
    rows += [
        ("end to end, warm, cache off: p50 / p95 / p99 ms", pc(r["end_to_end_ms"], "p50", "p95", "p99")),
        ("router overhead (end to end − slowest expert): p50 / p99 ms", pc(r["router_overhead_ms"], "p50", "p99")),
        ("answer-cache hit: p50 / p95 ms", pc(r["cached_end_to_end_ms"], "p50", "p95")),
    ]
    for name, p in r["experts_ms"].items():
        rows.append((f"expert `{name}`: p50 / p95 / p99 ms ({p['n']} calls)", pc(p, "p50", "p95", "p99")))
    f = r["freshness"]
    if "skipped" in f:
        rows.append(("saved file → searchable", f"skipped: {f['skipped']}"))
    else:
        found = ", ".join(f"{k} {v:.0f} ms" for k, v in sorted(f["save_to_searchable_ms"].items())) or "not found"
        rows.append(
            (
                "saved file → searchable (index update + query)",
                f"{found} (index update {f['index_update_ms']:.0f} ms, query {f['query_ms']:.0f} ms)",
            )
        )
    rows.append(("peak RSS of the engine process", f"{r['peak_rss_mb']['self']} MB"))
    return "\n".join(["| measure | value |", "|---|---|", *(f"| {a} | {b} |" for a, b in rows)])
