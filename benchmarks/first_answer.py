#!/usr/bin/env python
"""Time to first answer on a repository the engine has never seen: ``engine index`` then ``engine run``.

    pip download --no-deps --no-binary :all: sqlalchemy==2.1.9 && tar xzf sqlalchemy-2.1.9.tar.gz
    (cd sqlalchemy-2.1.9 && git init -q && git add -A && git commit -qm import)
    python benchmarks/first_answer.py sqlalchemy-2.1.9 -q "where is the connection pool recycled"
    python benchmarks/first_answer.py sqlalchemy-2.1.9 --reps 3 --catch-up     # also wait for semantic

Each repetition starts from an empty data dir (``ENGINE_HOME`` = a new temp dir), so every index
is built from scratch; the wall clock runs from launching ``engine index`` (default: fast indexes,
semantic handed to the background) until ``engine run pipelines/router.yaml`` has printed its
answer, both as a user would type them. It reports which experts answered, the semantic
expert's status and how far its index got, and with ``--catch-up`` how long the background
embedding took after that (chunks/s from its manifest and the catch-up log).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.index.build import freshness, lock_holder  # noqa: E402
from engine.workspace import Workspace  # noqa: E402


def engine_argv() -> list[str]:
    exe = Path(sys.executable).with_name("engine")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "engine.cli"]


def once(repo: Path, config: Path, question: str, catch_up: bool) -> dict[str, object]:
    home = Path(tempfile.mkdtemp(prefix="first-answer-"))
    env = {**os.environ, "ENGINE_HOME": str(home)}
    try:
        t0 = time.perf_counter()
        idx = subprocess.run(
            [*engine_argv(), "index", "-w", str(repo), "--config-dir", str(config)],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        t1 = time.perf_counter()
        if idx.returncode != 0:
            raise SystemExit(f"engine index failed: {idx.stderr[-2000:]}")
        pipeline = str(config / "pipelines" / "router.yaml")
        run = subprocess.run(
            [*engine_argv(), "run", pipeline, "-w", str(repo), "-q", question, "--format", "json"],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        t2 = time.perf_counter()
        if run.returncode != 0:
            raise SystemExit(f"engine run failed: {run.stderr[-2000:]}")
        response = json.loads(run.stdout)
        per_expert = response["receipt"]["per_expert"]
        sem = per_expert.get("semantic", {})
        row: dict[str, object] = {
            "index_s": round(t1 - t0, 2),
            "run_s": round(t2 - t1, 2),
            "first_answer_s": round(t2 - t0, 2),
            "items": len(response.get("items", [])),
            "experts": {k: v["status"] for k, v in per_expert.items()},
            "semantic_status": sem.get("status"),
            "semantic_progress": (sem.get("freshness") or {}).get("progress"),
            "semantic_partial": (sem.get("freshness") or {}).get("partial"),
        }
        if catch_up:
            projects = Workspace.open([repo], data_dir=home).projects
            manifest = home / "index" / "semantic" / "manifest.json"
            while lock_holder(home, "semantic") is not None or freshness(manifest, projects)["partial"]:
                time.sleep(1)
            t3 = time.perf_counter()
            log = (home / "index" / "catchup.log").read_text().splitlines()
            reports = [json.loads(line.split(" ", 1)[1]) for line in log if '"index": "semantic"' in line]
            row["semantic_caught_up_s"] = round(t3 - t0, 1)
            if reports:
                last = reports[-1]
                row["semantic_chunks"] = last["units"]
                row["semantic_chunks_per_s"] = round(last["units"] / last["seconds"], 1) if last["seconds"] else None
        return row
    finally:
        # the background catch-up writes into this temp data dir: stop it before deleting the dir
        while (pid := lock_holder(home, "semantic")) is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            time.sleep(0.5)
        shutil.rmtree(home, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("repo", type=Path)
    ap.add_argument("-q", "--question", default="where is the connection pool recycled")
    ap.add_argument("--config-dir", type=Path, default=REPO)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--catch-up", action="store_true", help="also wait until the semantic index caught up")
    args = ap.parse_args(argv)
    repo, config = args.repo.resolve(), args.config_dir.resolve()
    files = len(subprocess.run(["git", "ls-files"], cwd=repo, capture_output=True, text=True).stdout.splitlines())
    print(f"{repo.name}: {files} files in git; question: {args.question!r}", flush=True)
    rows = []
    for rep in range(args.reps):
        row = once(repo, config, args.question, args.catch_up)
        rows.append(row)
        print(f"rep {rep + 1}: {json.dumps(row)}", flush=True)
    first = [float(r["first_answer_s"]) for r in rows]  # type: ignore[arg-type]
    print(
        f"\nfirst answer {statistics.median(first):.1f} s median of {len(rows)} "
        f"(index {statistics.median(float(r['index_s']) for r in rows):.1f} s"  # type: ignore[arg-type]
        f" + run {statistics.median(float(r['run_s']) for r in rows):.1f} s)"  # type: ignore[arg-type]
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
