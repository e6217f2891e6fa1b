"""Where a request's router overhead goes, and the micro-measurements behind ADR 0012's issue-10 update.

    .venv/bin/python benchmarks/hot_path.py timeline WS QUERIES.jsonl   # per-question timeline
    .venv/bin/python benchmarks/hot_path.py record OUT.pkl WS QUERIES.jsonl
    .venv/bin/python benchmarks/hot_path.py check OUT.pkl            # replay fuse()/rerank() inputs
    .venv/bin/python benchmarks/hot_path.py micro                    # spawn under load, scheduling, validation

* **timeline** — a Router on a workspace answers every question twice (the first pass warms it),
  cache off; for the second pass each node's and each expert's start and end are recorded.
  Printed: overhead (end to end − the slowest expert), the time from the request to the slowest
  expert's start, from its end to the answer, and each node's own time (p50 / p90 / p99 ms).
* **record / check** — every ``fuse()`` and ``rerank()`` call of such a pass, inputs and output,
  pickled; ``check`` replays them against the code it imports and prints the differences (0 when
  a change kept the answers) and the time per call. Run ``check`` with ``PYTHONPATH`` set to
  another checkout to compare two trees on the same inputs.
* **micro** — ``subprocess.Popen`` of rg with 0, 1 and 2 threads keeping a core busy (numpy); 12 chained
  nodes as tasks against inline; ``parse_request`` with a cold and a warm shape memo.

The devset workspace (benchmarks/devset/README.md) and its queries are the inputs of the numbers
in ADR 0012; any indexed workspace works.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

# the CPU-bound threads of `micro` are numpy matrix products: one core each, GIL released (as the
# ONNX and tantivy threads of the experts); set before numpy is first imported
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

REPO = Path(__file__).resolve().parents[1]
clock = time.perf_counter


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return round(xs[int(q * (len(xs) - 1))], 3) if xs else 0.0


def questions(path: Path) -> list[str]:
    return [json.loads(line)["text"] for line in path.read_text().splitlines() if line.strip()]


def ask_twice(
    ws: Path, qs: list[str], on_pass: Callable[[int], None], on_answer: Callable[[float, float], None]
) -> None:
    """A Router on ``ws`` answers every question twice; ``on_answer(t0, t1)`` for each answer."""
    from engine.runtime import Router
    from engine.workspace import Workspace

    router = Router(REPO, Workspace.open([ws]))

    async def main() -> None:
        for n in range(2):
            on_pass(n)
            for q in qs:
                t0 = clock()
                await router.run("router", {"question": q, "no_cache": True, "limit": 10})
                on_answer(t0, clock())
                router.flush(ingest=False)
        await router.aclose()

    anyio.run(main)


def timeline(ws: Path, qs: list[str]) -> None:
    from engine.nodes import NODE_KINDS
    from engine.nodes.fanout import FanoutNode

    events: list[tuple[str, float, float]] = []

    def timed(fn: Any, name_of: Callable[[Any, tuple[Any, ...]], str]) -> Any:
        async def run(self: Any, *a: Any) -> Any:
            t = clock()
            try:
                return await fn(self, *a)
            finally:
                events.append((name_of(self, a), t, clock()))

        return run

    for cls in set(NODE_KINDS.values()):
        if "run" in cls.__dict__:  # an inherited run is timed once, in its own class
            cls.run = timed(cls.run, lambda node, a: node.kind)  # type: ignore[method-assign]
    FanoutNode._one = timed(FanoutNode._one, lambda node, a: f"expert:{a[1]}")  # type: ignore[method-assign]
    rows: list[tuple[float, float, list[tuple[str, float, float]]]] = []
    timing = [False]

    def on_pass(n: int) -> None:
        timing[0] = n == 1

    def on_answer(t0: float, t1: float) -> None:
        if timing[0]:
            rows.append((t0, t1, list(events)))
        events.clear()

    ask_twice(ws, qs, on_pass, on_answer)
    out: dict[str, list[float]] = {}
    for t0, t1, ev in rows:
        experts = [e for e in ev if e[0].startswith("expert:")]
        if not experts:
            continue
        slow = max(experts, key=lambda e: e[2] - e[1])
        out.setdefault("overhead", []).append((t1 - t0 - (slow[2] - slow[1])) * 1000)
        out.setdefault("request → slowest expert's start", []).append((slow[1] - t0) * 1000)
        out.setdefault("slowest expert's end → answer", []).append((t1 - slow[2]) * 1000)
        for name, s, e in ev:
            if not name.startswith("expert:") and name != "fanout":
                out.setdefault(f"node {name}", []).append((e - s) * 1000)
    print(f"{len(rows)} questions, second pass; ms p50 / p90 / p99")
    for k, v in out.items():
        print(f"  {k:36s} {pct(v, 0.5):7.3f} {pct(v, 0.9):7.3f} {pct(v, 0.99):7.3f}  (n={len(v)})")


def record(out: Path, ws: Path, qs: list[str]) -> None:
    import engine.nodes.fuse as fuse_node
    import engine.nodes.rerank as rerank_node

    calls: list[tuple[str, Any, Any]] = []
    fuse, rerank = fuse_node.fuse, rerank_node.rerank

    def fuse_rec(scored: Any, **kw: Any) -> Any:
        r = fuse(scored, **kw)
        calls.append(("fuse", (dict(scored), kw), r))
        return r

    def rerank_rec(c: Any, q: Any, w: Any) -> Any:
        r = rerank(c, q, w)
        calls.append(("rerank", (list(c), q, dict(w)), r))
        return r

    fuse_node.fuse, rerank_node.rerank = fuse_rec, rerank_rec  # type: ignore[assignment]
    ask_twice(ws, qs, lambda n: calls.clear(), lambda t0, t1: None)
    out.write_bytes(pickle.dumps(calls))
    print(f"recorded {len(calls)} calls in {out}")


def check(path: Path, reps: int = 5) -> int:
    from engine.fusion import fuse
    from engine.rerank import rerank

    calls = pickle.loads(path.read_bytes())
    diffs, spent, count = 0, {"fuse": 0.0, "rerank": 0.0}, {"fuse": 0, "rerank": 0}
    for kind, args, want in calls:
        t = clock()
        for _ in range(reps):
            got = fuse(args[0], **args[1]) if kind == "fuse" else rerank(*args)
        spent[kind] += (clock() - t) / reps
        count[kind] += 1
        diffs += got != want
    per_call = {k: round(spent[k] / count[k] * 1000, 3) for k in spent if count[k]}
    print(f"{len(calls)} calls, {diffs} with a different output; ms per call {per_call}")
    return 1 if diffs else 0


def micro() -> None:
    import numpy as np

    from engine.spec import _VALID_SHAPES, parse_request
    from engine.workspace import rg_binary

    rg = rg_binary()
    stop = threading.Event()

    def burn() -> None:  # a core busy outside the GIL, as an expert's ONNX or tantivy thread
        a = np.random.default_rng(0).random((400, 400))
        while not stop.is_set():
            a @ a

    for busy in (0, 1, 2):
        threads = [threading.Thread(target=burn) for _ in range(busy)]
        for th in threads:
            th.start()
        spans = []
        for _ in range(40):
            t = clock()
            p = subprocess.Popen([rg, "--version"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, process_group=0)
            spans.append((clock() - t) * 1000)
            p.communicate()
        stop.set()
        for th in threads:
            th.join()
        stop.clear()
        print(f"Popen(rg) with {busy} busy threads: p50 {pct(spans, 0.5)} ms, p90 {pct(spans, 0.9)} ms")

    async def chain(n: int) -> None:
        events = [anyio.Event() for _ in range(n)]

        async def node(i: int) -> None:
            if i:
                await events[i - 1].wait()
            events[i].set()

        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(node, i)

    async def inline(n: int) -> None:
        for _ in range(n):
            await anyio.lowlevel.checkpoint()

    async def sched() -> None:
        for fn in (chain, inline):
            spans = []
            for _ in range(300):
                t = clock()
                await fn(12)
                spans.append((clock() - t) * 1000)
            print(f"12 nodes {'as chained tasks' if fn is chain else 'inline'}: p50 {pct(spans, 0.5)} ms")

    anyio.run(sched)
    request = {"question": "where is the receipt signed", "limit": 10, "no_cache": True, "scope": {"path": "engine"}}
    for label, clear in (("cold shape memo", True), ("warm shape memo", False)):
        spans = []
        for i in range(300):
            if clear:
                _VALID_SHAPES.clear()
            t = clock()
            parse_request({**request, "question": f"{request['question']} {i}"})
            spans.append((clock() - t) * 1000)
        print(f"parse_request, {label}: p50 {pct(spans, 0.5)} ms")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("timeline")
    t.add_argument("workspace", type=Path)
    t.add_argument("queries", type=Path)
    r = sub.add_parser("record")
    r.add_argument("out", type=Path)
    r.add_argument("workspace", type=Path)
    r.add_argument("queries", type=Path)
    c = sub.add_parser("check")
    c.add_argument("recorded", type=Path)
    sub.add_parser("micro")
    args = ap.parse_args()
    if args.cmd == "timeline":
        timeline(args.workspace, questions(args.queries))
    elif args.cmd == "record":
        record(args.out, args.workspace, questions(args.queries))
    elif args.cmd == "check":
        return check(args.recorded)
    else:
        micro()
    return 0


if __name__ == "__main__":
    sys.exit(main())
