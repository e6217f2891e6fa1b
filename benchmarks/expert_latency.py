"""One expert's latency in an `engine eval` run, per snapshot group (e.g. the django snapshots).

    python benchmarks/expert_latency.py RUN_DIR SUITE_DIR --expert typed [--snapshot django]

Reads the run's ``per_query.jsonl`` (the expert's own latency per question, ``expert_latency_ms``)
and the suite's ``queries.jsonl`` (each question's snapshot), and prints one JSON line per arm
that called the expert: calls, p50 / p95 / p99 / max in ms, and the statuses seen.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from pathlib import Path


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q * len(values)))], 1) if values else 0.0


def snapshots(suite: Path) -> dict[str, str]:
    with open(suite / "queries.jsonl", encoding="utf-8") as fh:
        return {q["_id"]: str(q.get("metadata", {}).get("snapshot", "")) for q in map(json.loads, fh)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("run", type=Path)
    ap.add_argument("suite", type=Path)
    ap.add_argument("--expert", required=True)
    ap.add_argument("--snapshot", default="", help="keep questions whose snapshot starts with this")
    args = ap.parse_args()
    where = snapshots(args.suite)
    lat: dict[str, list[float]] = defaultdict(list)
    status: dict[str, Counter[str]] = defaultdict(Counter)
    with open(args.run / "per_query.jsonl", encoding="utf-8") as fh:
        for row in map(json.loads, fh):
            if not where.get(row["qid"], "").startswith(args.snapshot):
                continue
            ms = (row.get("expert_latency_ms") or {}).get(args.expert)
            if ms is None:
                continue
            lat[row["arm"]].append(float(ms))
            status[row["arm"]][str((row.get("expert_status") or {}).get(args.expert))] += 1
    for arm, values in sorted(lat.items()):
        print(
            json.dumps(
                {
                    "arm": arm,
                    "expert": args.expert,
                    "snapshot": args.snapshot or "*",
                    "calls": len(values),
                    "p50_ms": pct(values, 0.5),
                    "p95_ms": pct(values, 0.95),
                    "p99_ms": pct(values, 0.99),
                    "max_ms": round(max(values), 1),
                    "status": dict(status[arm]),
                }
            )
        )


if __name__ == "__main__":
    main()
