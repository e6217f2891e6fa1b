"""``engine tune --release``: a tuned priors.yaml shipped as a reviewed, gated config version.

1. The proposal (:func:`engine.tune.tune`) from single-expert eval arms is written into a copy of
   the config folder (``--out-dir``; every other file unchanged), so it is a config version of
   its own (another ``config_version``).
2. ``engine diff`` of the current folder against it is printed: what the release changes.
3. The gate: ``engine eval`` of the router on the suite's **dev** split with each folder, then
   ``engine eval compare`` (p95 +10 %, p99 +20 %, nDCG@10 or selection F1 −0.05 in any class,
   receipts below 100 %). A regression stops the release.
4. Only a release that passed is adopted (``--adopt``): its priors.yaml replaces the current one,
   the old one kept beside it as ``priors.yaml.previous``.

Test splits are never read: the gate refuses a split that is not a dev split, and the proposal
refuses metrics files an eval wrote on any other split.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from .diff import diff_sets, format_diff
from .errors import EvalError
from .spec import CONFIG_FILES, load_config
from .tune import tune

#: split names a gate may read (anything else, "test" and "heldout" above all, is refused)
DEV_SPLITS = ("dev", "train")


@dataclass
class Release:
    candidate: Path  # the config folder holding the proposed priors.yaml
    rows: list[dict[str, Any]]  # the proposal, old → new per class and expert
    diff: str  # `engine diff` current → candidate, as printed
    gate: list[str] = field(default_factory=list)  # `engine eval compare` lines
    regressions: int = 0
    adopted: bool = False
    unchanged: bool = False  # the candidate's priors equal the current ones: nothing to release


def is_dev_split(split: str) -> bool:
    return any(split == s or split.startswith(f"{s}-") or split.startswith(f"{s}_") for s in DEV_SPLITS)


def check_dev_metrics(metrics_files: list[Path]) -> None:
    """The proposal may only learn from dev splits (a metrics file names the split it scored)."""
    for f in metrics_files:
        split = str(json.loads(f.read_text()).get("suite", {}).get("split", ""))
        if not is_dev_split(split):
            raise EvalError(f"{f} was measured on split {split!r}: a release learns from dev splits only")


def write_candidate(config_dir: Path, out_dir: Path) -> None:
    """A copy of the config folder, ready for the proposed priors.yaml."""
    if out_dir.exists() and any(out_dir.iterdir()):
        raise EvalError(f"{out_dir} is not empty: give --release a new folder for the candidate config")
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in CONFIG_FILES:
        if (config_dir / name).is_file():
            shutil.copy2(config_dir / name, out_dir / name)
    shutil.copytree(config_dir / "pipelines", out_dir / "pipelines")


def gate(
    config_dir: Path, candidate: Path, suite: Path, *, split: str, workspace: list[Path] | None, home: Path | None
) -> tuple[list[str], int]:
    """Router on the dev split with each config, then `engine eval compare`: (lines, regressions)."""
    from .evaluation.compare import compare_paths
    from .evaluation.report import write_run
    from .evaluation.runner import EvalOptions, run_eval

    if not is_dev_split(split):
        raise EvalError(f"the release gate runs on dev splits only ({', '.join(DEV_SPLITS)}), not {split!r}")
    runs = []
    for label, cfg in (("current", config_dir), ("candidate", candidate)):
        opts = EvalOptions(
            suite=suite,
            config_dir=cfg,
            split=split,
            arms=["router"],
            out=candidate.parent / f"{candidate.name}.gate-{label}",
            home=home,
            progress=False,
            workspace=workspace,
        )
        run_dir, _ = write_run(run_eval(opts))
        runs.append(run_dir)
    checks, warnings = compare_paths(runs[0], runs[1])
    lines = [f"warning: {w}" for w in warnings] + [c.line() for c in checks]
    return lines, sum(1 for c in checks if c.regression)


def release(
    metrics_files: list[Path],
    config_dir: Path,
    out_dir: Path,
    suite: Path,
    *,
    split: str = "dev",
    workspace: list[Path] | None = None,
    home: Path | None = None,
    adopt: bool = False,
    metric: str = "ndcg@10",
    min_queries: int = 20,
) -> Release:
    if not is_dev_split(split):  # before any work: a release never reads a test split
        raise EvalError(f"the release gate runs on dev splits only ({', '.join(DEV_SPLITS)}), not {split!r}")
    check_dev_metrics(metrics_files)
    write_candidate(config_dir, out_dir)
    rows = tune(metrics_files, config_dir, metric=metric, min_queries=min_queries, out=out_dir / "priors.yaml")
    diff = format_diff(diff_sets(load_config(config_dir), load_config(out_dir), str(config_dir), str(out_dir)))
    lines, regressions = gate(config_dir, out_dir, suite, split=split, workspace=workspace, home=home)
    result = Release(out_dir, rows, diff, lines, regressions)
    unchanged = yaml.safe_load((config_dir / "priors.yaml").read_text()) == yaml.safe_load(
        (out_dir / "priors.yaml").read_text()
    )
    result.unchanged = unchanged
    if adopt and regressions == 0 and not unchanged:  # a candidate equal to the current one is no release
        previous = config_dir / "priors.yaml.previous"
        if previous.exists():  # an earlier adoption's backup is kept too: the hand-written file is never lost
            stamp = datetime.fromtimestamp(previous.stat().st_mtime, UTC).strftime("%Y%m%dT%H%M%S")
            previous.rename(config_dir / f"priors.yaml.previous-{stamp}")
        shutil.copy2(config_dir / "priors.yaml", previous)
        shutil.copy2(out_dir / "priors.yaml", config_dir / "priors.yaml")
        result.adopted = True
    return result
