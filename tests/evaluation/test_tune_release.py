"""``engine tune --release`` (issue 14 item 3): the proposal as its own config version, `engine diff`
against the current one, the `engine eval compare` gate on a dev split, adoption only past the gate,
and never a test split read."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from engine.cli import app
from engine.errors import EvalError
from engine.evaluation.report import write_run
from engine.evaluation.runner import EvalOptions, run_eval
from engine.tune_release import gate, release

from ..conftest import ROOT
from .evalsuite import build_suite

pytest.importorskip("ranx")
pytest.importorskip("bm25s")


def _config(dst: Path, conceptual_bm25: float | None = None) -> Path:
    dst.mkdir(parents=True)
    for name in ("experts.yaml", "classifier.yaml"):
        shutil.copy(ROOT / name, dst)
    shutil.copytree(ROOT / "pipelines", dst / "pipelines")
    priors = yaml.safe_load((ROOT / "priors.yaml").read_text())
    if conceptual_bm25 is not None:  # deliberately worse priors
        priors["classes"]["conceptual"]["bm25"] = conceptual_bm25
    (dst / "priors.yaml").write_text(yaml.safe_dump(priors, sort_keys=False))
    return dst


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("release")
    suite = build_suite(root)
    shutil.copy(suite / "qrels" / "test.tsv", suite / "qrels" / "dev.tsv")  # the fixture suite's dev split
    config, home = _config(root / "config"), root / "home"
    opts = EvalOptions(
        suite=suite, config_dir=config, split="dev", arms=["bm25", "ripgrep"], out=root / "arms", home=home,
        progress=False,
    )  # fmt: skip
    out, _ = write_run(run_eval(opts))
    return {"root": root, "suite": suite, "config": config, "home": home, "metrics": out / "metrics.json"}


def test_a_release_is_diffed_gated_on_dev_and_adopted_only_past_the_gate(dev: dict[str, Any]) -> None:
    config: Path = dev["config"]
    before = (config / "priors.yaml").read_text()
    candidate = dev["root"] / "candidate"
    r = release([dev["metrics"]], config, candidate, dev["suite"], home=dev["home"], adopt=True, min_queries=1)
    assert (candidate / "priors.yaml").read_text() != before and (candidate / "pipelines").is_dir()
    assert "priors" in r.diff.lower() and r.gate  # the diff and the compare lines were produced
    if r.regressions == 0:
        assert r.adopted and (config / "priors.yaml").read_text() == (candidate / "priors.yaml").read_text()
        assert (config / "priors.yaml.previous").read_text() == before
        # found by an exploratory run: a second release overwrote `.previous`, losing the hand-written
        # file, and a candidate equal to the current priors was "adopted" all the same
        again = release(
            [dev["metrics"]], config, dev["root"] / "again", dev["suite"], home=dev["home"], adopt=True, min_queries=1
        )
        assert again.unchanged and not again.adopted
        (config / "priors.yaml").write_text(before.replace("k: 60", "k: 61"))
        third = release(
            [dev["metrics"]], config, dev["root"] / "third", dev["suite"], home=dev["home"], adopt=True, min_queries=1
        )
        if third.regressions == 0:
            kept = sorted(config.glob("priors.yaml.previous*"))
            assert len(kept) == 2 and before in [f.read_text() for f in kept]  # the hand-written file survives
        (config / "priors.yaml").write_text(before)  # back to the starting point for the next test
        for f in config.glob("priors.yaml.previous*"):
            f.unlink()
    else:
        assert not r.adopted and (config / "priors.yaml").read_text() == before


def test_the_gate_refuses_a_worse_config(dev: dict[str, Any]) -> None:
    worse = _config(dev["root"] / "worse", conceptual_bm25=0.0)
    lines, regressions = gate(dev["config"], worse, dev["suite"], split="dev", workspace=None, home=dev["home"])
    assert regressions > 0 and any(line.startswith("REGRESSION") and "conceptual" in line for line in lines)


def test_test_splits_are_never_read(dev: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(EvalError, match="dev splits only"):
        release([dev["metrics"]], dev["config"], tmp_path / "c1", dev["suite"], split="test", home=dev["home"])
    assert not (tmp_path / "c1").exists()  # refused before any work
    measured_on_test = tmp_path / "metrics.json"
    measured_on_test.write_text(dev["metrics"].read_text().replace('"split": "dev"', '"split": "test"'))
    with pytest.raises(EvalError, match="learns from dev splits only"):
        release([measured_on_test], dev["config"], tmp_path / "c2", dev["suite"], home=dev["home"])
    res = CliRunner().invoke(
        app, ["tune", str(dev["metrics"]), "--config-dir", str(dev["config"]), "--release", str(tmp_path / "c3")]
    )
    assert res.exit_code == 2 and "--suite" in res.output
