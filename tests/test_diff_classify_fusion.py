"""engine diff, the classifier rules and the pure fusion functions."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from engine.classifier import classify, extract_features
from engine.config import load_config
from engine.diff import diff_configs
from engine.fusion import cluster_items, tier_and_nuance, weighted_rrf
from engine.items import ScoredItem
from engine.types import Evidence

from .conftest import ROOT, git, make_repo


def test_diff_two_folders(config_dir: Path, tmp_path: Path) -> None:
    b = tmp_path / "b"
    shutil.copytree(config_dir, b)
    priors = yaml.safe_load((b / "priors.yaml").read_text())
    priors["classes"]["identifier"]["bm25"] = 0.2
    priors["fusion"]["k"] = 40
    (b / "priors.yaml").write_text(yaml.safe_dump(priors))
    experts = yaml.safe_load((b / "experts.yaml").read_text())
    experts["experts"]["ripgrep"]["timeout_ms"] = 999
    del experts["experts"]["git"]
    for weights in priors["classes"].values():
        weights.pop("git", None)
    priors["classes"]["history"]["ripgrep"] = 1.0
    (b / "priors.yaml").write_text(yaml.safe_dump(priors))
    (b / "experts.yaml").write_text(yaml.safe_dump(experts))
    pipe = yaml.safe_load((b / "pipelines" / "docs.yaml").read_text())
    pipe["nodes"].insert(4, {"id": "fanout2", "kind": "fanout", "after": ["gate"], "settings": {"experts": ["bm25"]}})
    next(n for n in pipe["nodes"] if n["id"] == "score")["after"] = ["fanout", "fanout2"]  # waits for both
    (b / "pipelines" / "docs.yaml").write_text(yaml.safe_dump(pipe))
    d = diff_configs(str(config_dir), str(b))
    assert d["priors"]["identifier"]["bm25"] == {"old": 0.6, "new": 0.2}
    assert {"field": "fusion.k", "old": 60, "new": 40} in d["priors_other"]
    assert d["experts"]["removed"] == ["git"]
    assert d["experts"]["changed"]["ripgrep"] == [{"field": "timeout_ms", "old": 3000, "new": 999}]
    docs = d["pipelines"]["changed"]["docs"]
    assert docs["nodes_added"] == ["fanout2"] and "fanout2 → score" in docs["edges_added"]
    assert d["config_version"]["docs"]["a"] != d["config_version"]["docs"]["b"]
    same = diff_configs(str(config_dir), str(config_dir))
    assert all(v["a"] == v["b"] for v in same["config_version"].values())


def test_diff_two_git_revisions_via_cli(config_dir: Path, tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path / "cfgrepo", {p.relative_to(config_dir).as_posix(): p.read_text() for p in config_dir.rglob("*.yaml")}
    )
    text = (repo / "priors.yaml").read_text().replace("abstain_below: 0.5", "abstain_below: 0.4")
    (repo / "priors.yaml").write_text(text)
    git(repo, "commit", "-qam", "lower abstention")
    res = subprocess.run(
        [sys.executable, "-m", "engine.cli", "diff", "HEAD~1", "HEAD", "--repo", str(repo), "--format", "json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert res.returncode == 0, res.stderr
    d = json.loads(res.stdout)
    assert {"field": "classifier.abstain_below", "old": 0.5, "new": 0.4} in d["priors_other"]
    text_out = subprocess.run(
        [sys.executable, "-m", "engine.cli", "diff", "HEAD~1", "HEAD", "--repo", str(repo)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    ).stdout
    assert "classifier.abstain_below: 0.5 → 0.4" in text_out


@pytest.mark.parametrize(
    "question,klass,rule",
    [
        ('where does "connection refused" come from', "identifier", "quoted-literal"),
        ("find /retry_[a-z]+/ usages in code", "identifier", "regex-literal"),
        ("where is FileSystemStorage defined", "typed-symbol", "definition-phrase"),
        ("what does parse_http_header return", "typed-symbol", "code-token"),
        ("who calls RetryPolicy.should_retry", "cross-repo-impact", "impact-phrase"),
        ("how do I configure the upload size limit", "docs", "docs-phrase"),
        ("when was jitter added to the backoff", "history", "history-phrase"),
        ("where are uploaded file permissions decided", "conceptual", "natural-language"),
        ("hmm", "conceptual", "fallback"),
        (
            "When I call `Session.get` with a proxy the request hangs. " + "It happens every time we retry. " * 8,
            "conceptual",
            "long-description",
        ),
    ],
)
def test_classifier_rules(question: str, klass: str, rule: str) -> None:
    c = classify(question, load_config(ROOT).classifier, abstain_below=0.5)
    assert (c.klass, c.rule) == (klass, rule)
    assert c.abstained == (rule == "fallback")


def test_features() -> None:
    f = extract_features(
        "why does `os.path.join` fail in utils/paths.py with 'No such file' for getUserName",
        load_config(ROOT).classifier,
    )
    assert f.literals == ("os.path.join", "No such file")
    assert "getUserName" in f.identifiers and "utils/paths.py" in f.paths
    assert "fail" in f.keywords and "why" not in f.keywords


def _scored(expert_items: dict[str, list[Evidence]]) -> dict[str, list[ScoredItem]]:
    return {
        ex: [ScoredItem(e, i, {}, e.flags) for i, e in enumerate(items, start=1)] for ex, items in expert_items.items()
    }


def _ev(path: str, a: int, b: int, flags: tuple[str, ...] = ()) -> Evidence:
    return Evidence(project="p", path=path, kind="chunk", start_line=a, end_line=b, content=path, flags=flags)


def test_weighted_rrf_hand_computed_and_overlap_dedup() -> None:
    scored = _scored(
        {
            "rg": [_ev("x.py", 10, 10, ("exact-match",)), _ev("y.py", 1, 1)],
            "bm25": [_ev("y.py", 1, 40), _ev("x.py", 5, 30)],
        }
    )
    clusters = cluster_items(scored)
    weighted_rrf(clusters, {"rg": 1.0, "bm25": 0.5}, k=60)
    by_path = {c.path: c for c in clusters}
    assert len(clusters) == 2  # overlapping ranges of the same file are one place
    assert by_path["x.py"].score == pytest.approx(1.0 / 61 + 0.5 / 62)
    assert by_path["y.py"].score == pytest.approx(1.0 / 62 + 0.5 / 61)
    classes = {"rg": "lexical", "bm25": "lexical"}
    assert tier_and_nuance(by_path["x.py"], classes)[0] == "hybrid-confirmed"


def test_tiers() -> None:
    one = lambda ex, flags=(): cluster_items(_scored({ex: [_ev("a.py", 1, 2, flags)]}))[0]  # noqa: E731
    assert tier_and_nuance(one("rg", ("exact-match",)), {"rg": "lexical"})[0] == "lexical-exact"
    assert tier_and_nuance(one("sem"), {"sem": "semantic"})[0] == "semantic-only"
    assert "verify" in tier_and_nuance(one("sem"), {"sem": "semantic"})[1]
    assert tier_and_nuance(one("bm25"), {"bm25": "lexical"})[0] == "single-source"
    assert tier_and_nuance(one("bm25", ("file-changed-since-indexed",)), {"bm25": "lexical"})[0] == "stale-index"
    two_typed = cluster_items(_scored({"jedi": [_ev("a.py", 1, 5)], "scip": [_ev("a.py", 2, 3)]}))[0]
    assert tier_and_nuance(two_typed, {"jedi": "typed", "scip": "typed"})[0] == "typed-graph-confirmed"
    typed_struct = cluster_items(_scored({"jedi": [_ev("a.py", 1, 5)], "ts": [_ev("a.py", 2, 3)]}))[0]
    assert tier_and_nuance(typed_struct, {"jedi": "typed", "ts": "structural"})[0] == "hybrid-confirmed"
