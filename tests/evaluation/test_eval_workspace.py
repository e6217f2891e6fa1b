"""``engine eval SUITE --workspace DIR``: questions asked on a live multi-repo workspace, qrels as project/path.

Uses the two fixture repos of conftest (alpha, beta) and a 3-question suite with no corpus file,
through the CLI, so the flag, the live target, file-level scoring and the bm25 peer over the
workspace's own files are all exercised.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engine.cli import app

pytest.importorskip("ranx")
pytest.importorskip("bm25s")

QUESTIONS = [
    ("w1", '"retry budget exhausted for request"', "identifier", {"alpha/alpha/retry.py": 2}),
    ("w2", "How do I upload a file?", "docs", {"beta/docs/guide.md": 2, "alpha/README.md": 1}),
    (
        "w3",
        "where is FileSystemStorage defined",
        "typed-symbol",
        {"alpha/alpha/storage.py": 2, "beta/beta/storage.py": 2},
    ),
]


def _suite(root: Path, questions: list[tuple[str, str, str, dict[str, int]]]) -> Path:
    (root / "qrels").mkdir(parents=True)
    with open(root / "queries.jsonl", "w") as qf, open(root / "qrels" / "test.tsv", "w") as rf:
        rf.write("query-id\tcorpus-id\tscore\n")
        for qid, text, klass, rel in questions:
            qf.write(json.dumps({"_id": qid, "text": text, "metadata": {"class": klass}}) + "\n")
            for cid, grade in rel.items():
                rf.write(f"{qid}\t{cid}\t{grade}\n")
    return root


def _eval(suite: Path, ws: Path, config_dir: Path, home: Path, out: Path, *extra: str) -> tuple[int, str, str]:
    args = ["eval", str(suite), "--workspace", str(ws), "--arms", "router,bm25,bm25-peer", *extra]
    args += ["--config-dir", str(config_dir), "--cache-dir", str(home), "--out", str(out)]
    res = CliRunner().invoke(app, [*args, "--no-progress", "--no-warmup", "-f", "json"])
    return res.exit_code, res.stdout, res.stderr


def test_eval_on_a_live_workspace_scores_project_paths(workspace_dir: Path, config_dir: Path, tmp_path: Path) -> None:
    suite = _suite(tmp_path / "suite", QUESTIONS)
    code, stdout, stderr = _eval(suite, workspace_dir, config_dir, tmp_path / "home", tmp_path / "out", "--limit", "12")
    assert code == 0, stderr
    metrics = json.loads(stdout)
    assert metrics["request_limit"] == 12  # asked like `engine run --limit 12`
    assert metrics["suite"]["workspace"] == [str(workspace_dir.resolve())]
    snap = metrics["snapshots"]["_all"]
    assert set(snap["projects"]) == {"alpha", "beta"} and all(snap["projects"].values())
    assert snap["queries"] == 3 and any(r["index"] == "bm25" for r in snap["index"])
    router = metrics["arms"]["router"]
    assert router["overall"]["n"] == 3 and router["overall"]["receipts"]["rate"] == 1.0
    assert set(router["classes"]) == {"identifier", "docs", "typed-symbol"}
    # the answers are ranked as project/path ids, across both repos
    trec = [line.split() for line in (tmp_path / "out" / "runs" / "router.trec").read_text().splitlines()]
    assert ["w1", "Q0", "alpha/alpha/retry.py", "1"] in [row[:4] for row in trec]
    per_query = [json.loads(x) for x in (tmp_path / "out" / "per_query.jsonl").read_text().splitlines()]
    w3 = next(r for r in per_query if r["qid"] == "w3" and r["arm"] == "router")
    assert {"alpha/alpha/storage.py", "beta/beta/storage.py"} <= set(w3["ranked"])
    assert not any(d.startswith(("alpha/.env", "alpha/build/")) for r in per_query for d in r["ranked"])
    assert router["overall"]["ndcg@10"] > 0.5, "easy questions: a broken mapping to project/path shows up here"
    peer = metrics["arms"]["bm25-peer"]["overall"]
    assert peer["n"] == 3 and peer["acc@10"] > 0  # the peer searched the same workspace files
    assert "live workspace:" in (tmp_path / "out" / "report.md").read_text()


def test_eval_workspace_rejects_gold_that_is_not_a_workspace_file(
    workspace_dir: Path, config_dir: Path, tmp_path: Path
) -> None:
    suite = _suite(tmp_path / "suite", [("w1", "retry", "identifier", {"alpha/retry.py": 2})])
    code, _stdout, stderr = _eval(suite, workspace_dir, config_dir, tmp_path / "home", tmp_path / "out")
    assert code == 2
    assert "not indexable files of the workspace" in stderr and "alpha/retry.py" in stderr
