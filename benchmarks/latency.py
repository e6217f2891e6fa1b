"""Issue 10's "Done when" table: router overhead, end-to-end latency, a budget sweep, memory.

    python benchmarks/latency.py all --home EVAL_HOME --workspace WS --large-config DIR [--out docs/latency]
    python benchmarks/latency.py suite NAME --home EVAL_HOME [...]     # one suite, one budget
    python benchmarks/latency.py rss --home EVAL_HOME --large-config DIR  # django serving RSS
    python benchmarks/latency.py render docs/latency/latency.json       # markdown + SVG again

Everything runs in-process through ``engine eval``'s own machinery (:func:`engine.evaluation.runner.run_eval`,
router arm, cache off, one warm-up question per snapshot), so the numbers are the eval's:

* **suites** — ``cosqa`` (test split, 500 queries), ``swebench`` (swebench-lite-files, 121
  issues over 31 snapshots, the large-corpus config of ``benchmarks/large_corpus_config.py``),
  ``devset`` (benchmarks/devset, dev split, on a live multi-project workspace of real repos);
* **router overhead** — end to end minus the slowest expert of that run, per question;
* **end to end** — p50/p95/p99 per question, warm, cache off;
* **budget sweep** — the same suites with ``budget.latency_ms`` of 50, 100, 200, 500 ms:
  overrun (end to end minus budget) p50/p99, nDCG@10 and Acc@5 per budget, expert statuses
  (ok/partial/timeout/skipped); drawn as an SVG (nDCG@10 against budget, one line per suite);
* **rss** — a serving Router on the django@3.0 snapshot (large config) answering the swebench django issues and
  20 generated questions of the other shapes (``engine bench``'s) three times over: RSS after
  start, after the first answer, after each round, and the peak;
* **hooks for rows other engineers own** — :data:`EXTERNAL_ROWS`: ``engine run`` wall time from
  a shell (the cli engineer's daemon) and embedding throughput against a bare onnxruntime loop
  (the embed engineer). Each is a command whose JSON output is merged into the table when given
  with ``--row NAME=COMMAND``; until then the row says who fills it in.

The machine has 2 cores shared with other jobs: run it with ``nice`` and read ratios, not
absolute times; the JSON records the load average before and after each part.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
#: the shared suites: beside the checkout (/work/main → /work/shared) or beside a worktree's parent
SHARED = next(
    (p / "shared" / "eval" for p in (REPO.parent, REPO.parent.parent) if (p / "shared" / "eval").is_dir()),
    REPO.parent / "shared" / "eval",
)
BUDGETS = (50, 100, 200, 500)
#: rows measured by other benchmarks (their owners): name → (owner, what the row shows)
EXTERNAL_ROWS = {
    "engine_run_wall": ("cli", "`engine run` wall time from a shell: first call, p50 of the next 20, `rg` alone"),
    "embedding_throughput": ("embed", "embedding chunks/s against a bare onnxruntime batch loop; first answer"),
}


def load() -> dict[str, float]:
    one, five, _ = os.getloadavg()
    return {"load1": round(one, 2), "load5": round(five, 2)}


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    xs = sorted(values)
    pos = q * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return round(xs[lo] + (xs[hi] - xs[lo]) * (pos - lo), 2)


def suite_options(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """EvalOptions fields of one suite."""
    if name == "cosqa":
        return {"suite": Path(args.shared) / "cosqa", "config_dir": REPO, "split": "test"}
    if name == "swebench":
        return {"suite": Path(args.shared) / "swebench-lite-files", "config_dir": Path(args.large_config)}
    if name == "devset":
        suite = devset_suite(Path(args.workspace), Path(args.runs))
        return {"suite": suite, "config_dir": REPO, "split": "dev", "workspace": [Path(args.workspace)]}
    raise SystemExit(f"unknown suite {name!r}: cosqa, swebench, devset")


def child_suite(name: str, args: argparse.Namespace, budget_ms: int | None, src: str | None) -> dict[str, Any]:
    """One suite run in a fresh process (``src``: the engine tree it imports, e.g. main's, for a
    side-by-side baseline), so no run inherits another's warm caches or heap."""
    code = "baseline" if src else "this"
    print(f"[latency] {name} budget {budget_ms} ({code})", file=sys.stderr)
    argv = [sys.executable, __file__, "suite", name, "--home", args.home, "--shared", args.shared, "--code", code]
    argv += ["--runs", args.runs]
    for flag, value in (("--workspace", args.workspace), ("--large-config", args.large_config)):
        if value:
            argv += [flag, value]
    if budget_ms is not None:
        argv += ["--budget-ms", str(budget_ms)]
    if args.limit_queries:
        argv += ["--limit-queries", str(args.limit_queries)]
    env = {**os.environ, "PYTHONPATH": src} if src else None
    res = subprocess.run(argv, capture_output=True, text=True, check=False, env=env, cwd=src or None)
    if res.returncode != 0:
        raise SystemExit(f"{name} ({code}) failed:\n{res.stderr[-3000:]}")
    return {**json.loads(res.stdout), "code": code}


def devset_suite(workspace: Path, runs: Path) -> Path:
    """benchmarks/devset with the qrels rows the workspace cannot serve left out (on main since the
    secrets policy of issue 8, detect-secrets withholds two gold files, e.g. a basic-auth URL in
    marshmallow's validate.py, and ``engine eval --workspace`` refuses such a suite)."""
    from engine.evaluation.live import open_live

    src = REPO / "benchmarks" / "devset"
    dst = runs / "devset-suite"
    (dst / "qrels").mkdir(parents=True, exist_ok=True)
    (dst / "queries.jsonl").write_text((src / "queries.jsonl").read_text())
    ids = open_live([workspace]).doc_ids
    for split in ("dev", "heldout"):
        lines = (src / "qrels" / f"{split}.tsv").read_text().splitlines()
        kept = [ln for i, ln in enumerate(lines) if i == 0 or ln.split("\t")[1] in ids]
        (dst / "qrels" / f"{split}.tsv").write_text("\n".join(kept) + "\n")
        if len(kept) < len(lines):
            dropped = len(lines) - len(kept)
            print(f"[latency] devset {split}: {dropped} qrels rows not servable, left out", file=sys.stderr)
    return dst


def run_suite(name: str, args: argparse.Namespace, budget_ms: int | None) -> dict[str, Any]:
    """One router-arm eval of a suite; latency, overhead, quality and expert statuses."""
    from engine.evaluation.report import write_run
    from engine.evaluation.runner import EvalOptions, run_eval

    before = load()
    tag = f"{name}-{budget_ms or 'none'}-{args.code}"
    extra: dict[str, Any] = {} if budget_ms is None else {"budget_ms": budget_ms}  # a baseline tree may lack it
    opts = EvalOptions(
        **suite_options(name, args),
        **extra,
        arms=["router"],
        home=Path(args.home),
        out=Path(args.runs) / tag,
        limit_queries=args.limit_queries,
        progress=False,
    )
    t = time.perf_counter()
    run = run_eval(opts)
    wall = time.perf_counter() - t
    run_dir, metrics = write_run(run)
    e2e, overhead, statuses = [], [], {}
    for r in run.results["router"]:
        e2e.append(r.latency_ms)
        slowest = max(r.expert_latency_ms.values(), default=0.0)
        overhead.append(r.latency_ms - slowest)
        for st in r.expert_status.values():
            statuses[st] = statuses.get(st, 0) + 1
    overall = metrics["arms"]["router"]["overall"]
    out: dict[str, Any] = {
        "suite": name,
        "budget_ms": budget_ms,
        "queries": len(e2e),
        "ndcg@10": overall.get("ndcg@10"),
        "acc@5": overall.get("acc@5"),
        "e2e_ms": {"p50": pct(e2e, 0.5), "p95": pct(e2e, 0.95), "p99": pct(e2e, 0.99), "max": pct(e2e, 1.0)},
        "overhead_ms": {"p50": pct(overhead, 0.5), "p90": pct(overhead, 0.9), "p99": pct(overhead, 0.99)},
        "expert_statuses": dict(sorted(statuses.items())),
        "run_dir": str(run_dir),
        "wall_s": round(wall, 1),
        "load_before": before,
        "load_after": load(),
    }
    if budget_ms is not None:
        over = [x - budget_ms for x in e2e]
        out["overrun_ms"] = {"p50": pct(over, 0.5), "p99": pct(over, 0.99), "max": pct(over, 1.0)}
    return out


def rss_mb(pid: int | str = "self") -> dict[str, float]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = round(int(value.split()[0]) / 1024, 1)
    return out


def run_rss(args: argparse.Namespace, rounds: int = 3, src: str | None = None) -> dict[str, Any]:
    """A serving Router on the django@3.0 snapshot, asked the swebench django issues and 20 questions
    about its own definitions ``rounds`` times, in a child process of its own (this one holds the
    whole suite in memory)."""
    from engine.evaluation.materialize import materialize
    from engine.evaluation.suite import load_suite

    snapshot = "django@3.0"
    suite = load_suite(Path(args.shared) / "swebench-lite-files", "test", None)
    sw, _ = materialize(snapshot, suite.docs_for(snapshot), Path(args.home))
    from engine.evaluation.bench import generate_questions

    questions = Path(args.runs) / "rss-questions.json"
    questions.parent.mkdir(parents=True, exist_ok=True)
    # the snapshot's issues (conceptual) plus questions of every other shape about its own
    # definitions (typed-symbol, identifier, impact), so every expert's memory shows
    asked = [q.text for q in suite.queries if q.snapshot == snapshot]
    asked += [q["question"] for q in generate_questions(sw.workspace(), 20)]
    questions.write_text(json.dumps(asked))
    del suite
    before = load()
    config = args.large_config
    argv = [sys.executable, __file__, "rss-child", "--large-config", config, "--runs", args.runs]
    argv += ["--child", json.dumps([str(sw.project_dir), str(sw.data_dir), str(questions), rounds])]
    env = {**os.environ, "PYTHONPATH": src} if src else None
    res = subprocess.run(argv, capture_output=True, text=True, check=True, env=env, cwd=src or None)
    out = {"snapshot": snapshot, "config": config, "code": "baseline" if src else "this"}
    return {**out, **json.loads(res.stdout), "load_before": before, "load_after": load()}


def rss_child(args: argparse.Namespace) -> dict[str, Any]:
    import anyio

    from engine.runtime import Router
    from engine.workspace import Workspace

    project, data, qfile, rounds = json.loads(args.child)
    questions = json.loads(Path(qfile).read_text())
    marks: dict[str, Any] = {"process_start": rss_mb()}
    router = Router(Path(args.large_config), Workspace.open([Path(project)], data_dir=Path(data)))

    async def serve() -> None:
        for i in range(rounds):
            for q in questions:
                await router.run("router", {"question": q, "no_cache": True, "limit": 30})
                router.flush(ingest=False)
                if "after_first_answer" not in marks:
                    marks["after_first_answer"] = rss_mb()
            marks[f"after_round_{i + 1}"] = rss_mb()
        await router.aclose()

    anyio.run(serve)
    return {"questions": len(questions), "rounds": rounds, "rss_mb": marks, "peak_mb": rss_mb()["VmHWM"]}


def external_rows(specs: list[str]) -> dict[str, Any]:
    """``NAME=COMMAND`` pairs: run COMMAND, take its stdout's JSON as the row (the owners' hooks)."""
    out: dict[str, Any] = {}
    for name, (owner, what) in EXTERNAL_ROWS.items():
        out[name] = {"pending": f"measured by the {owner} engineer: {what}"}
    for spec in specs:
        name, _, command = spec.partition("=")
        res = subprocess.run(shlex.split(command), capture_output=True, text=True, check=False)
        try:
            out[name] = {"command": command, **json.loads(res.stdout)}
        except ValueError:
            out[name] = {"command": command, "error": (res.stderr or res.stdout)[-500:]}
    return out


# ---------------------------------------------------------------------------------------- render


def svg_curve(results: list[dict[str, Any]]) -> str:
    """nDCG@10 against budget (log scale), one line per suite; the unbounded run drawn at the right edge."""
    suites = sorted({r["suite"] for r in results})
    colours = ["#1b6ca8", "#d1495b", "#2a9d5c", "#8e6c8a"]
    w, h, left, right, top, bottom = 640, 360, 60, 120, 30, 50
    budgets = [*BUDGETS, None]
    xs = {b: left + i * (w - left - right) / (len(budgets) - 1) for i, b in enumerate(budgets)}

    def y(v: float) -> float:
        return top + (1 - v) * (h - top - bottom)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
        f'<rect width="{w}" height="{h}" fill="white"/>',
        f'<text x="{w / 2 - 20}" y="18" text-anchor="middle" font-size="14">'
        "nDCG@10 by latency budget (router, cache off)</text>",
    ]
    for v in (0.0, 0.2, 0.4, 0.6, 0.8, 1.0):
        parts.append(f'<line x1="{left}" x2="{w - right}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ddd"/>')
        parts.append(f'<text x="{left - 8}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.1f}</text>')
    for b, x in xs.items():
        parts.append(f'<text x="{x:.1f}" y="{h - bottom + 18}" text-anchor="middle">{b if b else "none"}</text>')
    parts.append(f'<text x="{(w - right + left) / 2:.1f}" y="{h - 10}" text-anchor="middle">budget.latency_ms</text>')
    for i, suite in enumerate(suites):
        colour = colours[i % len(colours)]
        pts = [
            (xs[r["budget_ms"]], y(r["ndcg@10"]))
            for b in budgets
            for r in results
            if r["suite"] == suite and r["budget_ms"] == b and r.get("ndcg@10") is not None
        ]
        if not pts:
            continue
        path = " ".join(f"{x:.1f},{yy:.1f}" for x, yy in pts)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for x, yy in pts:
            parts.append(f'<circle cx="{x:.1f}" cy="{yy:.1f}" r="3" fill="{colour}"/>')
        parts.append(f'<text x="{w - right + 10}" y="{pts[-1][1] + 4:.1f}" fill="{colour}">{suite}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _ms(block: dict[str, Any] | None, *keys: str) -> str:
    if not block:
        return "–"
    return " / ".join("–" if block.get(k) is None else f"{block[k]:,.1f}" for k in keys)


def markdown(data: dict[str, Any]) -> str:
    lines = [
        f"Measured {data['created_at']}, engine HEAD `{data['head'][:7]}`{' (dirty)' if data.get('dirty') else ''}; "
        f"load average {data['load_before']['load1']} before, {data['load_after']['load1']} after "
        "(2 cores shared with other jobs). Command: `" + data["command"] + "`.",
        "",
    ]
    if data.get("baseline"):
        lines += [
            f"Side by side, no budget (each run in a fresh process, this code then `{data['baseline_src']}`):",
            "",
            "| suite | code | nDCG@10 | Acc@5 | overhead p50 / p99 ms | end to end p50 / p95 / p99 ms | load |",
            "|---|---|---:|---:|---|---|---:|",
        ]
        for r in data["suites"]:
            if r["budget_ms"] is not None:
                continue
            for row in [r, *(b for b in data["baseline"] if b["suite"] == r["suite"])]:
                lines.append(
                    f"| {row['suite']} | {row['code']} | {row['ndcg@10']:.3f} | {row['acc@5']:.3f} "
                    f"| {_ms(row['overhead_ms'], 'p50', 'p99')} | {_ms(row['e2e_ms'], 'p50', 'p95', 'p99')} "
                    f"| {row['load_before']['load1']} |"
                )
        lines.append("")
    lines += [
        "| suite | budget ms | nDCG@10 | Acc@5 | overhead p50 / p99 ms | end to end p50 / p95 / p99 ms "
        "| overrun p50 / p99 ms | expert statuses |",
        "|---|---:|---:|---:|---|---|---|---|",
    ]
    for r in data["suites"]:
        st = ", ".join(f"{k} {v}" for k, v in r["expert_statuses"].items())
        lines.append(
            f"| {r['suite']} | {r['budget_ms'] or 'none'} | {r['ndcg@10']:.3f} | {r['acc@5']:.3f} "
            f"| {_ms(r['overhead_ms'], 'p50', 'p99')} | {_ms(r['e2e_ms'], 'p50', 'p95', 'p99')} "
            f"| {_ms(r.get('overrun_ms'), 'p50', 'p99')} | {st} |"
        )
    for m in data.get("rss") or []:
        marks = ", ".join(f"{k.replace('_', ' ')} {v['VmRSS']:.0f} MB" for k, v in m["rss_mb"].items())
        lines += [
            "",
            f"Serving router on {m['snapshot']} ({m['questions']} questions × {m['rounds']}; {m['code']} code, "
            f"config `{m['config']}`): {marks}; peak {m['peak_mb']:.0f} MB.",
        ]
    for name, row in data.get("external", {}).items():
        lines.append("")
        lines.append(f"`{name}`: " + (row["pending"] if "pending" in row else json.dumps(row, ensure_ascii=False)))
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["all", "suite", "rss", "rss-child", "render"])
    ap.add_argument("target", nargs="?", help="suite name (suite) or results JSON (render)")
    ap.add_argument("--home", default=os.environ.get("ENGINE_EVAL_HOME", str(Path.home() / ".cache/engine-eval")))
    ap.add_argument("--shared", default=str(SHARED))
    ap.add_argument("--workspace", help="devset workspace (python benchmarks/devset/build_workspace.py WS)")
    ap.add_argument("--large-config", help="python benchmarks/large_corpus_config.py DIR")
    ap.add_argument("--suites", default="cosqa,swebench,devset")
    ap.add_argument("--budgets", default=",".join(str(b) for b in BUDGETS), help="comma list; '' for none")
    ap.add_argument("--budget-ms", type=int, help="suite: one budget")
    ap.add_argument("--limit-queries", type=int)
    ap.add_argument("--row", action="append", default=[], help="NAME=COMMAND printing a JSON row (owners' hooks)")
    ap.add_argument("--out", default=str(REPO / "docs" / "latency"))
    ap.add_argument("--runs", default="/tmp/latency-runs")
    ap.add_argument("--baseline-src", help="an engine source tree (e.g. `git archive main`) to run beside, unbounded")
    ap.add_argument("--code", default="this", help=argparse.SUPPRESS)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    out = Path(args.out)
    if args.what == "render":
        data = json.loads(Path(args.target or out / "latency.json").read_text())
        (out / "ndcg_by_budget.svg").write_text(svg_curve(data["suites"]))
        print(markdown(data))
        return
    if args.what == "suite":
        print(json.dumps(run_suite(args.target, args, args.budget_ms), indent=1))
        return
    if args.what == "rss":
        print(json.dumps(run_rss(args), indent=1))
        return
    if args.what == "rss-child":
        print(json.dumps(rss_child(args)))
        return
    from engine.evaluation.report import git_state

    git = git_state(REPO)
    data: dict[str, Any] = {
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "head": git["head"] or "?",
        "dirty": git["dirty"],
        "command": " ".join(shlex.quote(a) for a in sys.argv),
        "load_before": load(),
        "suites": [],
        "baseline": [],
        "baseline_src": args.baseline_src,
    }
    budgets: list[int | None] = [None, *(int(b) for b in args.budgets.split(",") if b)]
    for name in args.suites.split(","):
        for b in budgets:
            data["suites"].append(child_suite(name, args, b, None))
            if b is None and args.baseline_src:  # side by side: the same suite right after, older code
                data["baseline"].append(child_suite(name, args, b, args.baseline_src))
    if args.large_config:
        data["rss"] = [run_rss(args)]  # the large config: typed off (benchmarks/large_corpus_config.py)
        if args.baseline_src:
            data["rss"].append(run_rss(args, src=args.baseline_src))
    data["external"] = external_rows(args.row)
    data["load_after"] = load()
    out.mkdir(parents=True, exist_ok=True)
    (out / "latency.json").write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    (out / "ndcg_by_budget.svg").write_text(svg_curve(data["suites"]))
    print(markdown(data))


if __name__ == "__main__":
    main()
