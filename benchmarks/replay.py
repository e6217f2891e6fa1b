"""Replay harness for the flywheel (issue 14, docs/adr/0017-flywheel.md): does learning from answers
and feedback make held-out questions better and cheaper?

For each arm (``off``: the shipped config; ``hints``: a ``hints`` node before every class
pipeline's gate; ``bandit``: ``priors.yaml bandit.enabled``; ``both``), with a fresh store of its
own (the workspace's indexes are shared, read-only):

1. **replay** the suite's train split (``dev``): ask each question through the normal Router, then
   turn its judgments into feedback — the answer's items whose file is relevant are marked useful,
   the other items of the first 10 not useful — exactly what an agent's ``feedback`` call records;
2. **score** the held-out split (``heldout``; same repos, unseen questions): nDCG@10, Recall@10
   and experts called per question (``per_expert`` entries that called an expert: not the hint
   lane, not ``skipped``), overall and per class. No feedback is given on held-out questions
   (hints from agreement are still recorded as they are answered, as in production).

``off`` replays nothing (it learns nothing). Nothing here reads a held-out judgment before
scoring, and no setting was chosen on held-out numbers.

    python benchmarks/replay.py benchmarks/devset --workspace /tmp/flywheel/ws \\
        --train dev --test heldout --out /tmp/flywheel/replay.json

The workspace must be built and indexed (benchmarks/devset/README.md); work on a copy.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import yaml

from engine.config import load_config
from engine.evaluation.arms import index_backed
from engine.evaluation.live import check_qrels, open_live
from engine.evaluation.materialize import index_snapshot, materialize
from engine.evaluation.metrics import K, QueryResult, percentiles, ranking_scores
from engine.evaluation.runner import Target, request_limit
from engine.evaluation.suite import ALL, EvalQuery, Suite, load_suite
from engine.hints import HINT_LANE
from engine.keys import KeyRing
from engine.runtime import Router
from engine.store import Feedback, open_store

ROOT = Path(__file__).resolve().parent.parent
ARMS = ("off", "hints", "bandit", "both")
#: the hints node every class pipeline gets in the hints arms (docs/config.md, "Hints"); its settings
#: are the shipped pipelines' (pipelines/identifier.yaml) when they have one
HINTS_NODE: dict[str, Any] = {
    "id": "hints",
    "kind": "hints",
    "after": ["classify"],
    # chosen on devset dev halves (`--halves`, docs/benchmarks.md "Issue 14"), never on held-out
    "settings": {
        "weight": 0.2,
        "skip": {
            "min_observations": 4,
            "max_rate": 0.0,
            "min_share": 0.5,
            "keep_at_least": 2,
            "max_skipped": 2,
            "protect": ["ripgrep", "bm25"],
            "evidence": "feedback",
        },
    },
}


def shipped_hints(base: Path) -> dict[str, Any] | None:
    """The hints node the shipped identifier pipeline has (its settings are the default here)."""
    raw = yaml.safe_load((base / "pipelines" / "identifier.yaml").read_text())
    node = next((n for n in raw["nodes"] if n["kind"] == "hints"), None)
    return dict(node) if node is not None else None


def arm_config(base: Path, arm: str, dest: Path) -> Path:
    """A copy of the config folder ``base`` with the arm's flywheel parts: every class pipeline's
    ``hints`` node removed (``off``, ``bandit``) or set to :data:`HINTS_NODE` (``hints``, ``both``)."""
    shutil.copytree(base / "pipelines", dest / "pipelines")
    for name in ("experts.yaml", "priors.yaml", "classifier.yaml"):
        shutil.copy(base / name, dest / name)
    for file in sorted((dest / "pipelines").glob("*.yaml")):
        raw = yaml.safe_load(file.read_text())
        gates = [n for n in raw["nodes"] if n["kind"] == "gate"]
        if not gates:
            continue
        raw["nodes"] = [n for n in raw["nodes"] if n["kind"] != "hints"]
        for gate in gates:
            gate["after"] = ["classify" if a == "hints" else a for a in gate.get("after", [])]
        if arm in ("hints", "both") and file.stem != "history":  # no history questions to measure it on
            for gate in gates:
                gate["after"] = ["hints" if a == "classify" else a for a in gate["after"]]
            at = next(i for i, n in enumerate(raw["nodes"]) if n["kind"] == "classify") + 1
            raw["nodes"].insert(at, dict(HINTS_NODE))
        file.write_text(yaml.safe_dump(raw, sort_keys=False))
    if arm in ("bandit", "both"):
        priors = dest / "priors.yaml"
        priors.write_text(priors.read_text() + "\nbandit: {enabled: true, scope: workspace}\n")
    return dest


def called(receipt: dict[str, Any]) -> int:
    """Experts (and lanes) actually called: the hint lane reads memory, a skipped one never started."""
    per = receipt.get("per_expert") or {}
    return sum(1 for name, pe in per.items() if name != HINT_LANE and pe.get("status") != "skipped")


async def ask(router: Router, live: Target, q: EvalQuery, limit: int) -> tuple[list[str], dict[str, Any]]:
    result = await router.run("router", {"question": q.text, "no_cache": True, "limit": limit})
    ranked: list[str] = []
    for item in result.response.get("items", []):
        doc = live.doc_id(item)
        if doc is not None and doc not in ranked:
            ranked.append(doc)
    return ranked, result.response


async def run_arm(
    arm: str, config: Path, live: Target, train: Suite | None, test: Suite, store_dir: Path, limit: int
) -> dict[str, Any]:
    router = Router(config, live.workspace(), arm=arm, store=open_store(store_dir), keys=KeyRing(store_dir))
    started = time.perf_counter()
    feedback = 0
    try:
        for q in train.queries if train is not None else ():
            assert train is not None
            _, response = await ask(router, live, q, limit)
            relevant = {d for d, g in train.qrels[q.id].items() if g > 0}
            useful: list[str] = []
            not_useful: list[str] = []
            for item in response.get("items", [])[:K]:
                (useful if live.doc_id(item) in relevant else not_useful).append(item["id"])
            rid = response["receipt"]["receipt_id"]
            router.record_feedback(
                Feedback(uuid.uuid4().hex, rid, tuple(useful), "replay", None, not_useful_item_ids=tuple(not_useful))
            )
            router.flush(ingest=False)
            feedback += 1
        results, experts, skipped, lanes = [], {}, 0, 0
        which: dict[str, int] = {}  # "<class>:<expert>" → questions it was skipped on
        hint_ms: list[float] = []  # the hints node's own run time (the hot-path cost of a lookup)
        for q in test.queries:
            t0 = time.perf_counter()
            ranked, response = await ask(router, live, q, limit)
            router.flush(ingest=False)
            receipt = response["receipt"]
            klass = q.gold_class or str((receipt.get("classifier") or {}).get("class"))
            results.append(QueryResult(q.id, arm, ranked, (time.perf_counter() - t0) * 1000, klass))
            experts[q.id] = called(receipt)
            hints = receipt.get("hints") or {}
            skipped += len(hints.get("skipped") or {})
            nodes = (receipt.get("budget") or {}).get("spent", {}).get("nodes_ms", {})
            hint_ms += [ms for node, ms in nodes.items() if node.endswith(".hints")]
            for name in hints.get("skipped") or {}:
                which[f"{klass}:{name}"] = which.get(f"{klass}:{name}", 0) + 1
            lanes += bool(hints.get("lane"))
        book, version = router.hint_book(), router_version(router)
        learned = {
            c: book.plan(
                [f"class:{c}"],
                version,
                {},
                key_weights={},
                max_files=0,
                min_score=1.0,
                weight=0.0,
                precision_class="lexical",
                bounds=None,
            ).stats
            for c in sorted({r.klass for r in results})
        }
    finally:
        await router.aclose()
    scores = ranking_scores(results, test.qrels)
    return summarize(arm, results, scores, experts) | {
        "train_questions": feedback,
        "skips": skipped,
        "questions_with_hint_lane": lanes,
        "skipped": dict(sorted(which.items())),
        "hints_node_ms": percentiles(hint_ms),
        "seconds": round(time.perf_counter() - started, 1),
        "learned": {c: {e: list(v) for e, v in stats.items()} for c, stats in learned.items() if stats},
    }


def router_version(router: Router) -> str:
    """The config version the router pipeline's answers (and so their hints) carry."""
    return router.config().config_version(router.resolve_pipeline("router"))


def summarize(
    arm: str, results: Sequence[QueryResult], scores: dict[str, dict[str, float]], experts: dict[str, int]
) -> dict[str, Any]:
    def group(rs: Sequence[QueryResult]) -> dict[str, Any]:
        n = len(rs)
        return {
            "n": n,
            "ndcg@10": round(sum(scores[r.qid]["ndcg@10"] for r in rs) / n, 4),
            "recall@10": round(sum(scores[r.qid]["recall@10"] for r in rs) / n, 4),
            "experts": round(sum(experts[r.qid] for r in rs) / n, 3),
        }

    classes = sorted({r.klass for r in results})
    return {
        "arm": arm,
        "overall": group(results),
        "classes": {c: group([r for r in results if r.klass == c]) for c in classes},
        "per_query": {r.qid: {"ndcg@10": scores[r.qid]["ndcg@10"], "experts": experts[r.qid]} for r in results},
    }


def table(runs: Sequence[dict[str, Any]]) -> str:
    base = runs[0]["overall"]
    lines = [
        "| arm | nDCG@10 | Δ | Recall@10 | experts/question | Δ % | skips | lanes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        o = r["overall"]
        d = o["ndcg@10"] - base["ndcg@10"]
        e = (o["experts"] - base["experts"]) / base["experts"] * 100 if base["experts"] else 0.0
        lines.append(
            f"| {r['arm']} | {o['ndcg@10']:.4f} | {d:+.4f} | {o['recall@10']:.4f} | {o['experts']:.2f} | {e:+.1f} % "
            f"| {r['skips']} | {r['questions_with_hint_lane']} |"
        )
    classes = sorted({c for r in runs for c in r["classes"]})
    lines += ["", "| class (n) | " + " | ".join(f"{r['arm']} nDCG / experts" for r in runs) + " |"]
    lines.append("|---|" + "---|" * len(runs))
    for c in classes:
        cells = [
            f"{r['classes'][c]['ndcg@10']:.4f} / {r['classes'][c]['experts']:.2f}" for r in runs if c in r["classes"]
        ]
        lines.append(f"| {c} ({runs[0]['classes'][c]['n']}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def corpus_target(suite: Path, split: str, home: Path | None, config: Path) -> Target:
    """A BEIR suite of one snapshot (cosqa): its corpus materialized under ``home`` (reused when
    already there, as ``engine eval`` does) and indexed for the experts the config can select."""
    if home is None:
        raise SystemExit("without --workspace, --home is needed (where the corpus is materialized)")
    full = load_suite(suite, split)
    if set(full.docs_by_snapshot) - {ALL}:
        raise SystemExit("replay supports one-snapshot corpora (cosqa) or --workspace")
    sw, _ = materialize(ALL, full.docs_by_snapshot.get(ALL, []), home.resolve())
    cfg = load_config(config)
    index_snapshot(sw, cfg, index_backed(cfg, set(cfg.experts)))
    return sw


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("suite", type=Path)
    ap.add_argument("--workspace", type=Path, help="a built, indexed workspace (a copy); else the suite's corpus")
    ap.add_argument("--home", type=Path, help="without --workspace: where the corpus is materialized and indexed")
    ap.add_argument("--config", type=Path, default=ROOT, help="config folder (default: this repository's)")
    ap.add_argument("--train", default="dev")
    ap.add_argument("--test", default="heldout")
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--limit", type=int, default=None, help="first N questions of each split")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument(
        "--halves",
        action="store_true",
        help="tune on the train split alone: replay its even questions, score its odd ones (--test ignored)",
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a hints node setting for this run (weight=1.0, skip.max_rate=0.2, ...)",
    )
    args = ap.parse_args(argv)
    if args.train == args.test and not args.halves:
        ap.error("--train and --test must differ")
    shipped = shipped_hints(args.config)
    if shipped is not None:
        HINTS_NODE["settings"] = shipped.get("settings", {})
    for kv in args.set:
        key, _, value = kv.partition("=")
        *path, last = key.split(".")
        target = HINTS_NODE["settings"]
        for part in path:
            target = target.setdefault(part, {})
        target[last] = yaml.safe_load(value)
    live = (
        open_live([args.workspace]) if args.workspace else corpus_target(args.suite, args.train, args.home, args.config)
    )
    train = load_suite(args.suite, args.train, args.limit, corpus=False)
    if args.halves:
        test = load_suite(args.suite, args.train, args.limit, corpus=False)
        train.queries, test.queries = train.queries[0::2], test.queries[1::2]
        args.test = f"{args.train} (odd questions; even ones replayed)"
    else:
        test = load_suite(args.suite, args.test, args.limit, corpus=False)
    if args.workspace:
        for s in (train, test):
            check_qrels(s, open_live([args.workspace]), drop=True)
    limit = request_limit(args.config)
    runs = []
    with tempfile.TemporaryDirectory(prefix="replay-") as tmp:
        for arm in args.arms.split(","):
            config = arm_config(args.config.resolve(), arm, Path(tmp) / arm / "config")
            learn = train if arm != "off" else None
            run = anyio.run(run_arm, arm, config, live, learn, test, Path(tmp) / arm / "store", limit)
            print(f"{arm}: {json.dumps(run['overall'])} ({run['seconds']} s)", file=sys.stderr)
            runs.append(run)
    print(table(runs))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        meta = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
        meta["hints_node"] = HINTS_NODE
        args.out.write_text(json.dumps({"args": meta, "runs": runs}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
