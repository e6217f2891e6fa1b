"""Write an eval run out: ``metrics.json``, one TREC run per arm, ``report.md``, ``per_query.jsonl``,
and one ``experiments`` row per arm in the eval store.

``metrics.json`` is the contract ``engine eval compare`` reads: ``arms.<arm>.overall`` and
``arms.<arm>.classes.<class>`` hold the same metric block (see :func:`.metrics.group_summary`).
The TREC files (``qid Q0 doc rank score tag``) are the raw ranking, so anyone can recompute the
metrics with another tool (the tests do, by hand).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .. import __version__
from ..config import load_config
from ..store import Experiment
from ..types import canonical_json, sha256_hex
from .metrics import QueryResult, arm_summary
from .peer import bm25s_version
from .runner import EvalRun

MD_COLUMNS = [
    ("n", "n"),
    ("ndcg@10", "nDCG@10"),
    ("mrr@10", "MRR@10"),
    ("recall@10", "R@10"),
    ("acc@1", "Acc@1"),
    ("acc@5", "Acc@5"),
    ("acc@10", "Acc@10"),
]


def git_state(repo: Path) -> dict[str, Any]:
    """HEAD and dirtiness of the engine's own checkout (what code produced these numbers)."""

    def git(*args: str) -> str | None:
        try:
            res = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=20, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return res.stdout.strip() if res.returncode == 0 else None

    head = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if head else None
    return {"head": head, "dirty": bool(status) if status is not None else None}


def arm_config_version(run: EvalRun, arm_name: str) -> str:
    """The config_version the arm's receipts carry (the config that answered), else computed now."""
    arm = next(a for a in run.arms if a.name == arm_name)
    if arm.config_dir is None:
        return f"bm25-peer:bm25s-{bm25s_version()}"
    seen = [r.config_version for r in run.results[arm_name] if r.config_version]
    if seen:
        return max(set(seen), key=seen.count)
    cfg = load_config(arm.config_dir)
    spec = cfg.pipelines.get(run.options.pipeline) or cfg.pipeline_by_file(Path(run.options.pipeline))
    return cfg.config_version(spec)


def build_metrics(run: EvalRun, created_at: str) -> dict[str, Any]:
    cfg = load_config(run.options.config_dir)
    kind_of = {name: spec.adapter for name, spec in cfg.experts.items()}
    gold = {q.id: q.gold_experts for q in run.suite.queries}
    gold_class = {q.id: q.gold_class for q in run.suite.queries}
    arms: dict[str, Any] = {}
    for arm in run.arms:
        results = run.results[arm.name]
        summary = arm_summary(results, run.suite.qrels, gold, kind_of)
        judged = [r for r in results if r.predicted_class is not None and gold_class.get(r.qid)]
        if judged:
            summary["classifier_accuracy"] = round(
                sum(r.predicted_class == gold_class[r.qid] for r in judged) / len(judged), 4
            )
        versions = sorted({r.config_version for r in results if r.config_version})
        if len(versions) > 1:  # the config was edited while the eval ran (hot reload): say so
            summary["config_versions_seen"] = versions
        arms[arm.name] = {
            "kind": arm.kind,
            "config_version": arm_config_version(run, arm.name),
            "config_dir": str(arm.config_dir) if arm.config_dir else None,
            **summary,
        }
    router = arms.get("router")
    if router is not None:
        ratios = do_no_harm(arms)
        if ratios:
            router["do_no_harm"] = ratios
    engine_repo = Path(__file__).resolve().parents[2]
    return {
        "suite": {
            "name": run.suite.name,
            "path": str(run.suite.root),
            "split": run.suite.split,
            "fingerprint": run.suite.fingerprint(),
            "queries": len(run.suite.queries),
            "snapshots": len(run.suite.queries_by_snapshot()),
            "classes_from": "gold" if all(q.gold_class for q in run.suite.queries) else "router",
            "workspace": [str(Path(w).resolve()) for w in run.options.workspace] if run.options.workspace else None,
            "dropped_qrels": run.dropped_qrels,
        },
        "created_at": created_at,
        "engine_version": __version__,
        "git": git_state(engine_repo),
        "command": " ".join(shlex.quote(a) for a in sys.argv),
        "pipeline": run.options.pipeline,
        "warmup": run.options.warmup,
        "intent_from_class": run.options.intent_from_class,
        "request_limit": run.request_limit,
        "budget_ms": run.options.budget_ms,
        "arms": arms,
        "timing": run.timing,
        "snapshots": run.snapshots,
        "eval_home": str(run.home),
    }


#: the ratio under which the router does harm in a class: below 0.95× its best single expert
HARM_BELOW = 0.95


def do_no_harm(arms: dict[str, Any], metric: str = "ndcg@10") -> dict[str, Any]:
    """Per class (and overall): the router's metric ÷ the best single-expert arm's, when any ran."""
    experts = {name: a for name, a in arms.items() if a["kind"] == "expert"}
    if not experts:
        return {}
    out: dict[str, Any] = {}
    router = arms["router"]
    blocks = {"overall": router["overall"], **router["classes"]}
    for klass, block in blocks.items():
        scored = [
            (name, (a["overall"] if klass == "overall" else a["classes"].get(klass, {})).get(metric))
            for name, a in experts.items()
        ]
        scored = [(n, v) for n, v in scored if v is not None]
        if not scored or block.get(metric) is None:
            continue
        best_arm, best = max(scored, key=lambda t: (t[1], t[0]))
        ratio = round(block[metric] / best, 3) if best > 0 else None
        out[klass] = {
            "metric": metric,
            "router": block[metric],
            "best_arm": best_arm,
            "best": best,
            "ratio": ratio,
            "harm": ratio is not None and ratio < HARM_BELOW,
        }
    return out


def _fmt(x: Any) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:.3f}"
    return str(x)


def _ms(x: Any) -> str:
    return "–" if x is None else f"{x:.1f}"


def _row(label: list[str], block: dict[str, Any]) -> str:
    cells = label + [_fmt(block.get(k)) for k, _ in MD_COLUMNS]
    cells.append(_fmt(block["selection"]["f1"]))
    lat = block["latency_ms"]
    cells += [_ms(lat["p50"]), _ms(lat["p95"]), _ms(lat["p99"])]
    rate = block["receipts"]["rate"]
    cells.append("–" if rate is None else f"{rate:.0%}")
    return "| " + " | ".join(cells) + " |"


def markdown(metrics: dict[str, Any]) -> str:
    s = metrics["suite"]
    cols = [c for _, c in MD_COLUMNS] + ["sel F1", "p50 ms", "p95 ms", "p99 ms", "receipts"]
    lines = [
        f"# engine eval: {s['name']} ({s['split']}, {s['queries']} queries, {s['snapshots']} snapshots)",
        "",
        f"- date: {metrics['created_at']}",
        f"- command: `{metrics['command']}`",
        f"- engine git HEAD: {metrics['git']['head']}{' (dirty)' if metrics['git']['dirty'] else ''}",
        *([f"- live workspace: {', '.join(s['workspace'])}"] if s.get("workspace") else []),
        *(
            [f"- gold ids the engine cannot return, dropped: {', '.join(s['dropped_qrels'])}"]
            if s.get("dropped_qrels")
            else []
        ),
        f"- classes from: {s['classes_from']}; items asked per question: {metrics.get('request_limit')}; "
        + (f"budget.latency_ms {metrics['budget_ms']}; " if metrics.get("budget_ms") else "")
        + "latency is end to end per query, cache off"
        + (", after one untimed warm-up question per snapshot and arm" if metrics.get("warmup") else ""),
        "",
        "## Overall",
        "",
        "| arm | " + " | ".join(cols) + " |",
        "|---" * (len(cols) + 1) + "|",
    ]
    for name, arm in metrics["arms"].items():
        lines.append(_row([name], arm["overall"]))
    failed = {
        name: arm["overall"].get("errors") for name, arm in metrics["arms"].items() if arm["overall"].get("errors")
    }
    if failed:  # scored as misses above: say so, or a column of numbers hides a broken run
        lines += ["", f"**Warning:** questions answered with an error (scored as misses): {failed}"]
    changed = [name for name, arm in metrics["arms"].items() if arm.get("config_versions_seen")]
    if changed:
        lines += [
            "",
            f"**Warning:** the config changed during the run for arms {changed} "
            "(several config_versions in their receipts); rerun for clean numbers.",
        ]
    lines += ["", "## Per class", "", "| class | arm | " + " | ".join(cols) + " |", "|---" * (len(cols) + 2) + "|"]
    classes = sorted({c for arm in metrics["arms"].values() for c in arm["classes"]})
    for c in classes:
        for name, arm in metrics["arms"].items():
            if c in arm["classes"]:
                lines.append(_row([c, name], arm["classes"][c]))
    lines += [
        "",
        "## Expert calls",
        "",
        "| arm | expert | calls | p50 ms | p95 ms | p99 ms | status |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, arm in metrics["arms"].items():
        for expert, e in arm["experts"].items():
            lat = e["latency_ms"]
            status = ", ".join(f"{k} {v}" for k, v in sorted(e["status"].items()))
            lines.append(
                f"| {name} | {expert} | {e['calls']} | {_ms(lat['p50'])} | {_ms(lat['p95'])} | "
                f"{_ms(lat['p99'])} | {status} |"
            )
    router = metrics["arms"].get("router")
    if router and router.get("do_no_harm"):
        lines += [
            "",
            f"## Do no harm (router ÷ best single-expert arm, nDCG@10; harm below {HARM_BELOW})",
            "",
            "| class | router | best arm | best | ratio |",
            "|---|---|---|---|---|",
        ]
        for klass, d in router["do_no_harm"].items():
            flag = " **harm**" if d["harm"] else ""
            lines.append(
                f"| {klass} | {_fmt(d['router'])} | {d['best_arm']} | {_fmt(d['best'])} | {_fmt(d['ratio'])}{flag} |"
            )
    if router and router.get("nodes"):
        lines += [
            "",
            "## Node costs (router; a node's own run time, ms)",
            "",
            "| node | runs | p50 | p95 |",
            "|---|---|---|---|",
        ]
        for node, lat in router["nodes"].items():
            lines.append(f"| {node} | {lat['n']} | {_ms(lat['p50'])} | {_ms(lat['p95'])} |")
    if router and router.get("confidence"):
        lines += ["", "## Confidence (router): what each label meant", "", "| label | n | Acc@1 | Acc@5 |"]
        lines.append("|---|---|---|---|")
        for label, d in router["confidence"].items():
            lines.append(f"| {label} | {d['n']} | {_fmt(d['acc@1'])} | {_fmt(d['acc@5'])} |")
    if router:
        ov = router["overall"]["router_overhead_ms"]
        lines += [
            "",
            (f"Router overhead (end to end minus slowest expert): p50 {_ms(ov['p50'])} ms, p99 {_ms(ov['p99'])} ms."),
        ]
        if router.get("predicted_classes"):
            lines.append(
                "Router classes: " + ", ".join(f"{k} {v}" for k, v in router["predicted_classes"].items()) + "."
            )
    t = metrics["timing"]
    lines += ["", "Timing (s): " + ", ".join(f"{k} {v}" for k, v in t.items()), ""]
    return "\n".join(lines)


def write_trec(path: Path, results: list[QueryResult], tag: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for r in results:
            for rank, doc in enumerate(r.ranked, start=1):
                fh.write(f"{r.qid} Q0 {doc} {rank} {len(r.ranked) - rank + 1} {tag}\n")


def write_run(run: EvalRun) -> tuple[Path, dict[str, Any]]:
    """Write every artefact of ``run``; returns the output folder and the metrics."""
    now = datetime.now(UTC)
    created_at = now.isoformat(timespec="seconds")
    out = run.options.out or run.home / "runs" / f"{run.suite.name}-{run.suite.split}-{now:%Y%m%d-%H%M%S}"
    out = out.expanduser().resolve()
    (out / "runs").mkdir(parents=True, exist_ok=True)
    metrics = build_metrics(run, created_at)
    for arm in run.arms:
        write_trec(out / "runs" / f"{arm.name}.trec", run.results[arm.name], arm.name)
    with open(out / "per_query.jsonl", "w", encoding="utf-8") as fh:
        for arm in run.arms:
            for r in run.results[arm.name]:
                fh.write(json.dumps({**vars(r), "relevant": run.suite.qrels[r.qid]}, ensure_ascii=False) + "\n")
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1, ensure_ascii=False) + "\n")
    (out / "report.md").write_text(markdown(metrics))
    for name, arm in metrics["arms"].items():
        key = [
            metrics["suite"]["name"],
            metrics["suite"]["split"],
            arm["config_version"],
            metrics["git"]["head"],
            name,
            created_at,
        ]
        run.store.put_experiment(
            Experiment(
                experiment_id=sha256_hex(canonical_json(key))[:32],
                suite=f"{run.suite.name}:{run.suite.split}",
                config_version=arm["config_version"],
                git_head=metrics["git"]["head"],
                created_at=created_at,
                metrics={
                    "arm": name,
                    "suite": metrics["suite"],
                    "out": str(out),
                    "overall": arm["overall"],
                    "classes": arm["classes"],
                    "git_dirty": metrics["git"]["dirty"],
                },
            )
        )
    run.store.sync(timeout_s=60.0)
    run.store.close()
    run.out = out
    return out, metrics
