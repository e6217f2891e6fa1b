"""``engine eval compare BASE NEW``: is NEW a regression of BASE? (DESIGN §10)

Regression, for every arm present in both runs:

* latency (overall, end to end): p95 up more than 10 %, p99 up more than 20 %. Changes smaller
  than ``latency_floor_ms`` are noise on a shared machine and never count (default 5 ms;
  pass 0 for the bare percentage rule);
* quality, overall and in every class present in both: nDCG@10 down more than 0.05, router
  selection F1 down more than 0.05 (when both runs have gold experts);
* receipts: NEW's emission rate below 100 % for any arm that emits receipts.

BASE and NEW are ``metrics.json`` files or the run folders holding them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import EvalError

P95_RISE = 0.10
P99_RISE = 0.20
QUALITY_DROP = 0.05


@dataclass(frozen=True)
class Check:
    arm: str
    group: str  # "overall" or a class
    metric: str
    base: float | None
    new: float | None
    regression: bool
    rule: str

    def line(self) -> str:
        mark = "REGRESSION" if self.regression else "ok"
        return (
            f"{mark:<10} {self.arm:<12} {self.group:<18} {self.metric:<14} {_num(self.base):>9} → "
            f"{_num(self.new):<9} {self.rule}"
        )


def _num(x: float | None) -> str:
    return "–" if x is None else f"{x:.4g}"


def _label(metrics: dict[str, Any]) -> str:
    s = metrics.get("suite") or {}
    return f"{s.get('name')}:{s.get('split')} ({s.get('queries')} queries)"


def load_metrics(path: Path) -> dict[str, Any]:
    """A run's metrics.json (or the one in a run folder); EvalError when there is none or it is not one."""
    path = path.expanduser()
    file = path / "metrics.json" if path.is_dir() else path
    if not file.is_file():
        raise EvalError(f"no metrics.json at {path}")
    try:
        data = json.loads(file.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise EvalError(f"{file}: not a readable metrics.json ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("arms", {}), dict):
        raise EvalError(f"{file}: not an engine eval metrics.json (no arms)")
    return data


def _quality(arm: str, group: str, base: dict[str, Any], new: dict[str, Any]) -> list[Check]:
    out = []
    b, n = base.get("ndcg@10"), new.get("ndcg@10")
    if b is not None and n is not None:
        out.append(Check(arm, group, "nDCG@10", b, n, n < b - QUALITY_DROP, f"drop > {QUALITY_DROP}"))
    b, n = (base.get("selection") or {}).get("f1"), (new.get("selection") or {}).get("f1")
    if b is not None and n is not None:
        out.append(Check(arm, group, "selection F1", b, n, n < b - QUALITY_DROP, f"drop > {QUALITY_DROP}"))
    return out


def _latency(arm: str, base: dict[str, Any], new: dict[str, Any], floor_ms: float) -> list[Check]:
    out = []
    for pct, rise in (("p95", P95_RISE), ("p99", P99_RISE)):
        b, n = (base.get("latency_ms") or {}).get(pct), (new.get("latency_ms") or {}).get(pct)
        if b is None or n is None:
            continue
        bad = n > b * (1 + rise) and n - b > floor_ms
        out.append(Check(arm, "overall", f"latency {pct}", b, n, bad, f"rise > {rise:.0%} and > {floor_ms:g} ms"))
    return out


def compare(base: dict[str, Any], new: dict[str, Any], latency_floor_ms: float = 5.0) -> list[Check]:
    """Every check of NEW against BASE; callers fail when any ``regression`` is set. Two runs with no
    quality to compare are an error: the release gate passed on "0 regressions in 0 checks" (found
    by an exploratory run).

    Raises:
        EvalError: no arm of the two runs has an nDCG@10 to compare.
    """
    checks: list[Check] = []
    for arm, b_arm in base.get("arms", {}).items():
        n_arm = new.get("arms", {}).get(arm)
        if n_arm is None:  # compared where both have it (compare_paths warns)
            continue
        checks += _latency(arm, b_arm["overall"], n_arm["overall"], latency_floor_ms)
        checks += _quality(arm, "overall", b_arm["overall"], n_arm["overall"])
        for klass in sorted(set(b_arm.get("classes", {})) & set(n_arm.get("classes", {}))):
            checks += _quality(arm, klass, b_arm["classes"][klass], n_arm["classes"][klass])
    if not any(c.metric == "nDCG@10" for c in checks):
        raise EvalError("nothing to compare: the two runs share no arm with scored questions (0 queries, no arms?)")
    for arm, n_arm in new.get("arms", {}).items():
        rate = (n_arm["overall"].get("receipts") or {}).get("rate")
        if rate is not None:
            checks.append(Check(arm, "overall", "receipts", None, rate, rate < 1.0, "must be 100 %"))
    return checks


def compare_paths(base: Path, new: Path, latency_floor_ms: float = 5.0) -> tuple[list[Check], list[str]]:
    """Checks plus warnings (different suites, arms missing from NEW)."""
    b, n = load_metrics(base), load_metrics(new)
    warnings: list[str] = []
    if _label(b) != _label(n):
        warnings.append(f"different suites or query counts: {_label(b)} vs {_label(n)}")
    missing = sorted(set(b.get("arms", {})) - set(n.get("arms", {})))
    if missing:
        warnings.append(f"arms missing from NEW (not compared): {missing}")
    try:
        return compare(b, n, latency_floor_ms), warnings
    except (KeyError, TypeError, AttributeError) as exc:  # a metrics.json of another shape
        raise EvalError(f"cannot compare {base} with {new}: missing or malformed field {exc}") from None
