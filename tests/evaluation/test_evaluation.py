"""engine eval / compare / bench end to end on the fixture suite (tests/evalsuite.py).

The metrics written by ``engine eval`` are recomputed here by hand from the TREC runs it wrote,
so ranx, the file-level mapping and the per-class grouping are all checked against something
that shares no code with them.
"""

from __future__ import annotations

import json
import math
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import duckdb
import pytest
import yaml
from typer.testing import CliRunner

from engine.cli import app
from engine.evaluation.compare import compare
from engine.evaluation.report import write_run
from engine.evaluation.runner import EvalOptions, run_eval

from ..conftest import ROOT
from .evalsuite import QUESTIONS, build_suite

pytest.importorskip("ranx")
pytest.importorskip("bm25s")

ARMS = ["router", "bm25", "ripgrep", "bm25-peer"]


def _copy_config(dst: Path, conceptual_bm25: float | None = None) -> Path:
    dst.mkdir(parents=True)
    shutil.copy(ROOT / "experts.yaml", dst)
    shutil.copy(ROOT / "classifier.yaml", dst)
    shutil.copytree(ROOT / "pipelines", dst / "pipelines")
    priors = yaml.safe_load((ROOT / "priors.yaml").read_text())
    if conceptual_bm25 is not None:  # the deliberately worsened priors
        priors["classes"]["conceptual"]["bm25"] = conceptual_bm25
    (dst / "priors.yaml").write_text(yaml.safe_dump(priors, sort_keys=False))
    return dst


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("evalsuite")
    suite = build_suite(root)
    config = _copy_config(root / "config")
    home = root / "home"
    opts = EvalOptions(suite=suite, config_dir=config, arms=ARMS, out=root / "base", home=home, progress=False)
    out, metrics = write_run(run_eval(opts))
    return {"root": root, "suite": suite, "config": config, "home": home, "out": out, "metrics": metrics}


def _trec(path: Path) -> dict[str, list[str]]:
    run: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for line in path.read_text().splitlines():
        qid, _q0, doc, rank, _score, _tag = line.split()
        run[qid].append((int(rank), doc))
    return {q: [d for _, d in sorted(rows)] for q, rows in run.items()}


def _by_hand(ranked: list[str], rel: dict[str, int]) -> dict[str, float]:
    top = ranked[:10]
    first = next((i + 1 for i, d in enumerate(top) if d in rel), None)
    dcg = sum(rel.get(d, 0) / math.log2(i + 2) for i, d in enumerate(top))
    ideal = sum(g / math.log2(i + 2) for i, g in enumerate(sorted(rel.values(), reverse=True)[:10]))
    out = {
        "mrr@10": 1 / first if first else 0.0,
        "ndcg@10": dcg / ideal,
        "recall@10": sum(1 for d in top if d in rel) / len(rel),
    }
    for k in (1, 5, 10):
        out[f"acc@{k}"] = 1.0 if first and first <= k else 0.0
    return out


def test_eval_writes_every_artefact_and_metrics_match_a_hand_computation(env: dict[str, Any]) -> None:
    out, metrics = env["out"], env["metrics"]
    assert {p.name for p in out.iterdir()} >= {"metrics.json", "report.md", "per_query.jsonl", "runs"}
    assert set(metrics["arms"]) == set(ARMS)
    qrels: dict[str, dict[str, int]] = defaultdict(dict)
    for line in (env["suite"] / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        q, c, s = line.split("\t")
        qrels[q][c] = int(s)
    klass = {f"q{n:02d}": q[2] for n, q in enumerate(QUESTIONS, start=1)}
    for arm in ARMS:
        run = _trec(out / "runs" / f"{arm}.trec")
        per_query = {q: _by_hand(run.get(q, []), rel) for q, rel in qrels.items()}
        groups: dict[str, list[str]] = defaultdict(list)
        for q in qrels:
            groups[klass[q]].append(q)
        for group, qids in [("overall", list(qrels)), *groups.items()]:
            block = metrics["arms"][arm]["overall" if group == "overall" else "classes"]
            block = block if group == "overall" else block[group]
            assert block["n"] == len(qids)
            for m in ("mrr@10", "ndcg@10", "recall@10", "acc@1", "acc@5", "acc@10"):
                mine = sum(per_query[q][m] for q in qids) / len(qids)
                assert abs(block[m] - mine) < 0.01, (arm, group, m, block[m], mine)
    router = metrics["arms"]["router"]["overall"]
    assert router["receipts"]["rate"] == 1.0  # every answer, failed or not, carries a verifying receipt
    assert router["selection"]["n"] == len(QUESTIONS) and router["selection"]["f1"] is not None
    assert router["ndcg@10"] > 0.5, "the fixture questions are easy: a broken harness shows up here"
    assert metrics["arms"]["bm25-peer"]["overall"]["receipts"]["rate"] is None
    assert metrics["suite"]["snapshots"] == 2 and metrics["suite"]["classes_from"] == "gold"
    assert "| router |" in (out / "report.md").read_text()


def test_eval_stores_one_event_per_expert_call_labelled_by_arm_and_an_experiment_row(env: dict[str, Any]) -> None:
    con = duckdb.connect(str(env["home"] / "store" / "engine.duckdb"), read_only=True)
    try:
        events = dict(
            con.execute(
                "SELECT arm, count(*) FROM tool_benchmark_events WHERE arm NOT LIKE '%:warmup' GROUP BY arm"
            ).fetchall()
        )
        experts = dict(
            con.execute(
                "SELECT DISTINCT arm, expert_id FROM tool_benchmark_events WHERE arm IN ('bm25', 'ripgrep')"
            ).fetchall()
        )
        rows = con.execute("SELECT suite, config_version, git_head, metrics FROM experiments").fetchall()
        hits = dict(
            con.execute(
                "SELECT expert_id, count(*) FILTER (WHERE hit) FROM tool_benchmark_events "
                "WHERE arm = 'bm25' GROUP BY expert_id"
            ).fetchall()
        )
        unlabelled = con.execute(
            "SELECT count(*) FROM tool_benchmark_events WHERE hit IS NULL AND arm NOT LIKE '%:warmup'"
        ).fetchone()[0]
    finally:
        con.close()
    calls = {  # a skipped expert (early exit, over budget) was never called: no event
        arm: sum(
            sum(status != "skipped" for status in r["expert_status"].values())
            for r in map(json.loads, (env["out"] / "per_query.jsonl").read_text().splitlines())
            if r["arm"] == arm
        )
        for arm in ("router", "bm25", "ripgrep")
    }
    assert events == calls
    assert experts == {"bm25": "bm25", "ripgrep": "ripgrep"}
    # hit = the expert returned a relevant file somewhere in its answer (for a one-expert arm: the
    # queries whose ranked list holds a relevant doc), computed here from the qrels file itself
    relevant: dict[str, set[str]] = defaultdict(set)
    for line in (env["suite"] / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        qid, doc, grade = line.split("\t")
        if int(grade) > 0:
            relevant[qid].add(doc)
    per_query = [json.loads(r) for r in (env["out"] / "per_query.jsonl").read_text().splitlines()]
    found = sum(1 for r in per_query if r["arm"] == "bm25" and relevant[r["qid"]] & set(r["ranked"]))
    assert hits["bm25"] == found > 0 and unlabelled == 0
    assert sorted(json.loads(m)["arm"] for *_, m in rows) == sorted(ARMS)
    assert {s for s, *_ in rows} == {"suite:test"}
    versions = {json.loads(m)["arm"]: cv for _, cv, _, m in rows}
    assert versions["router"] == env["metrics"]["arms"]["router"]["config_version"] != versions["bm25"]


def test_compare_flags_worsened_priors_and_passes_unchanged_ones(env: dict[str, Any]) -> None:
    root = env["root"]
    worse_cfg = _copy_config(root / "config-worse", conceptual_bm25=0.0)
    same_cfg = _copy_config(root / "config-same")
    runs = {}
    for name, cfg in (("worse", worse_cfg), ("same", same_cfg)):
        opts = EvalOptions(
            suite=env["suite"], config_dir=cfg, arms=["router"], out=root / name, home=env["home"], progress=False
        )
        runs[name] = write_run(run_eval(opts))[1]
    bad = [c for c in compare(env["metrics"], runs["worse"]) if c.regression]
    assert any(c.group == "conceptual" and c.metric == "selection F1" for c in bad), bad
    # an unchanged config passes (a generous latency floor: CI machines are noisy, quality is not)
    assert not [c for c in compare(env["metrics"], runs["same"], latency_floor_ms=1000) if c.regression]
    cli = CliRunner()
    assert cli.invoke(app, ["eval", "compare", str(env["out"]), str(root / "worse")]).exit_code == 1
    ok = cli.invoke(
        app, ["eval", "compare", str(env["out"]), str(root / "same" / "metrics.json"), "--latency-floor-ms", "1000"]
    )
    assert ok.exit_code == 0, ok.output


def test_compare_latency_and_receipt_rules() -> None:
    def m(p95: float, p99: float, receipts: float | None = 1.0) -> dict[str, Any]:
        block = {
            "ndcg@10": 0.5,
            "selection": {"f1": None},
            "latency_ms": {"p95": p95, "p99": p99},
            "receipts": {"rate": receipts},
        }
        return {"arms": {"router": {"overall": block, "classes": {}}}}

    def regressed(base: dict[str, Any], new: dict[str, Any]) -> set[str]:
        return {c.metric for c in compare(base, new, latency_floor_ms=0) if c.regression}

    assert regressed(m(100, 200), m(109, 239)) == set()
    assert regressed(m(100, 200), m(111, 200)) == {"latency p95"}
    assert regressed(m(100, 200), m(100, 241)) == {"latency p99"}
    assert regressed(m(100, 200), m(100, 200, receipts=0.99)) == {"receipts"}
    assert not [c for c in compare(m(1, 2), m(2, 4), latency_floor_ms=5) if c.regression]


def test_cli_eval_suite_is_the_default_subcommand(env: dict[str, Any]) -> None:
    out = env["root"] / "cli-peer"
    res = CliRunner().invoke(
        app,
        [
            "eval",
            str(env["suite"]),
            "--arms",
            "bm25-peer",
            "--limit-queries",
            "5",
            "--out",
            str(out),
            "--cache-dir",
            str(env["home"]),
            "--config-dir",
            str(env["config"]),
            "--no-progress",
            "--format",
            "json",
        ],
    )
    assert res.exit_code == 0, res.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["arms"]["bm25-peer"]["overall"]["n"] == 5
    bad = CliRunner().invoke(
        app,
        [
            "eval",
            str(env["suite"]),
            "--arms",
            "nosuchexpert",
            "--cache-dir",
            str(env["home"]),
            "--config-dir",
            str(env["config"]),
        ],
    )
    assert bad.exit_code == 2 and "unknown arm" in bad.output


def test_bench_reports_overhead_throughput_and_save_to_searchable(env: dict[str, Any], tmp_path: Path) -> None:
    from engine.evaluation.bench import BenchOptions, bench_table, run_bench

    repo = tmp_path / "repo"
    shutil.copytree(env["root"] / "repo", repo)
    r = run_bench(BenchOptions(workspaces=[repo], config_dir=env["config"], n_questions=8, rounds=1, progress=False))
    assert r["index"]["per_index"]["bm25"]["files"] > 5 and r["index"]["per_index"]["bm25"]["chunks_per_s"]
    assert r["end_to_end_ms"]["n"] == r["questions"] and r["router_overhead_ms"]["p50"] is not None
    assert set(r["experts_ms"]) >= {"bm25", "ripgrep"}
    assert r["freshness"]["save_to_indexed_searchable_ms"] is not None
    assert not list(repo.glob("engine_bench_probe_*")), "the probe file is removed afterwards"
    assert "router overhead" in bench_table(r)


def test_tune_proposes_priors_from_single_expert_arms(env: dict[str, Any], tmp_path: Path) -> None:
    from engine.spec import load_config
    from engine.tune import tune

    proposed, current = tmp_path / "tuned", tmp_path / "current"
    shutil.copytree(env["config"], proposed)
    shutil.copytree(env["config"], current)
    text = (current / "priors.yaml").read_text()
    (current / "priors.yaml").write_text("# why these weights: a user's note\n" + text.replace("\n", "  # kept\n", 1))
    rows = tune([env["out"] / "metrics.json"], current, min_queries=1, out=proposed / "priors.yaml")
    metrics = json.loads((env["out"] / "metrics.json").read_text())["arms"]
    assert rows
    for r in rows:  # each proposal is the expert's nDCG@10 relative to the best single expert of that class
        best = max(
            metrics[a]["classes"][r["class"]]["ndcg@10"]
            for a in ("bm25", "ripgrep")
            if r["class"] in metrics[a]["classes"]
        )
        ratio = metrics[r["expert"]]["classes"][r["class"]]["ndcg@10"] / best
        assert r["ratio"] == pytest.approx(ratio, abs=1e-3)
        assert r["new"] is None or r["new"] == pytest.approx(round(ratio / 0.05) * 0.05, abs=1e-6)
    cfg = load_config(proposed)  # the proposal is a valid priors.yaml
    assert any(w == 1.0 for c in cfg.priors.classes.values() for w in c.values())
    # the user's comments and key order survive (safe_dump dropped every comment); only values move
    before = (current / "priors.yaml").read_text().splitlines()
    after = (proposed / "priors.yaml").read_text().splitlines()
    assert before[0] in after and before[1] in after  # a comment line, a line with a trailing comment
    assert [line.split(":")[0] for line in after if line and not line.startswith(("#", " "))] == [
        line.split(":")[0] for line in before if line and not line.startswith(("#", " "))
    ]


def test_the_report_says_when_questions_were_answered_with_an_error(env: dict[str, Any]) -> None:
    """Found by an exploratory run: 4 of 6 questions were invalid_request, scored as misses, and the
    report showed only the low numbers (the count was in metrics.json alone)."""
    import copy

    from engine.evaluation.report import markdown

    metrics = copy.deepcopy(env["metrics"])
    assert "answered with an error" not in markdown(metrics)
    metrics["arms"]["router"]["overall"]["errors"] = 4
    assert "questions answered with an error (scored as misses): {'router': 4}" in markdown(metrics)


def test_tune_proposes_only_what_the_config_can_hold_and_refuses_nan(config_dir: Path, tmp_path: Path) -> None:
    """Found by an exploratory run: arms and classes the config does not know (`grepx`, `unknown`)
    went into a proposal `engine validate` then refused; a NaN metric was an internal error."""
    from engine.errors import SpecError
    from engine.spec import load_config
    from engine.tune import tune

    def arm(v: float) -> dict[str, Any]:
        return {"classes": {"identifier": {"n": 30, "ndcg@10": v}, "unknown": {"n": 30, "ndcg@10": v}}}

    metrics = tmp_path / "m.json"
    metrics.write_text(
        json.dumps({"suite": {"split": "dev"}, "arms": {"ripgrep": arm(0.8), "bm25": arm(0.6), "grepx": arm(0.9)}})
    )
    out = tmp_path / "cand"
    shutil.copytree(config_dir, out)
    rows = tune([metrics], config_dir, min_queries=1, out=out / "priors.yaml")
    assert {(r["class"], r["expert"]) for r in rows} == {("identifier", "ripgrep"), ("identifier", "bm25")}
    load_config(out)  # valid
    metrics.write_text(json.dumps({"arms": {"ripgrep": arm(float("nan")), "bm25": arm(0.6)}}))
    with pytest.raises(SpecError, match="not a finite number"):
        tune([metrics], config_dir, min_queries=1)
