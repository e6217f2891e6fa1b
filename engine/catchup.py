"""Slow indexes (embeddings) catch up in a background process; the fast ones answer meanwhile.

``engine index`` scans and updates the fast indexes (bm25, symbols, docs) under ``index.lock``,
then, for each slow index with work to do, bumps its catch-up request
(:class:`~engine.index.manifest.CatchUp`: generation + 1, files pending) and starts this module
detached (``python -m engine.catchup``, its own session, ``nice`` 10, output appended to
``<data>/index/catchup.log``) unless a process already holds the index's lock — that one
re-reads the request when it finishes. It returns at once: questions are answered from the fast
indexes and from whatever the slow index has committed, flagged partial (docs/adr/0015-background-indexing.md).

The background process, per slow index, loops: take ``index.<name>.lock`` without waiting (held:
the holder serves the request; exit) → read the request generation g → scan (briefly under
``index.lock``) → ``update_index(generation=g)``, checkpointing as it goes → release → done if the
request is still at g, else go again. Bumping before looking for a holder, and releasing before
re-reading, means no request is ever left without a process that will see it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .index.build import CATCHUP_FILE, IndexReport, index_lock, lock_holder, scan_workspace, update_index
from .index.manifest import CatchUp
from .index.progress import ProgressLine
from .secrets import SecretsPolicy
from .workspace import Workspace

LOG_FILE = "catchup.log"
MAX_LOG_BYTES = 1 << 20  # the log restarts past this size
NICE = 10  # below interactive work: a question asked meanwhile gets the CPU first


def request_path(index_dir: Path) -> Path:
    return index_dir / CATCHUP_FILE


def request(index_dir: Path, files_pending: int) -> int:
    """Record that this index needs a catch-up run; returns the new generation. Only called
    under ``index.lock`` (one writer)."""
    req = CatchUp.load(request_path(index_dir))
    new = CatchUp(
        req.path,
        req.generation + 1,
        files_pending,
        datetime.now(UTC).isoformat(timespec="seconds"),
    )
    new.save()
    return new.generation


def log_path(ws: Workspace) -> Path:
    return ws.data_dir / "index" / LOG_FILE


def spawn(ws: Workspace, config_root: Path, names: Sequence[str]) -> int | None:
    """Start the background process for ``names`` unless each is already being written by a live
    holder of its lock (which will see the request). Returns the new pid, or None."""
    if all(lock_holder(ws.data_dir, n) is not None for n in names):
        return None
    log = log_path(ws)
    log.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        if log.stat().st_size > MAX_LOG_BYTES:
            log.unlink()
    argv = [
        sys.executable,
        "-m",
        "engine.catchup",
        "--config-dir",
        str(config_root),
        "--data-dir",
        str(ws.data_dir),
        *(f"--only={n}" for n in names),
        "--",
        *(str(r) for r in ws.roots),
    ]
    with open(log, "ab") as fh:
        proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module, no shell
            argv, stdin=subprocess.DEVNULL, stdout=fh, stderr=fh, start_new_session=True, close_fds=True
        )
    # Reap it if this process outlives it (engine serve, tests); a CLI run simply exits first.
    threading.Thread(target=proc.wait, name=f"catchup-{proc.pid}", daemon=True).start()
    return proc.pid


def catch_up(
    ws: Workspace,
    experts: Iterable[tuple[str, Any]],
    progress: ProgressLine | None = None,
    policy: SecretsPolicy | None = None,
) -> list[IndexReport]:
    """The background process's work: serve every catch-up request of these slow indexes."""
    reports: list[IndexReport] = []
    for name, expert in experts:
        req_file = request_path(expert.manifest_path.parent)
        while True:
            with index_lock(ws.data_dir, name, blocking=False) as mine:
                if not mine:
                    break  # another process writes this index and will re-read the request
                generation = CatchUp.load(req_file).generation
                if progress:
                    progress.stage(name, "scanning")
                with index_lock(ws.data_dir):
                    current = scan_workspace(ws, policy)
                if progress:
                    progress.stage(name, "loading the model")
                reports.append(
                    update_index(
                        name,
                        expert.indexer(),
                        ws,
                        current,
                        progress=progress,
                        live=progress,
                        accept=getattr(expert, "accepts", None),
                        policy=policy,
                        generation=generation,
                    )
                )
            if CatchUp.load(req_file).generation == generation:
                break
    return reports


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m engine.catchup", description=__doc__.split("\n", 1)[0])
    ap.add_argument("--config-dir", type=Path, required=True)
    ap.add_argument("--data-dir", type=Path, required=True)
    ap.add_argument("--only", action="append", required=True, help="slow index to bring up to date (repeatable)")
    ap.add_argument("roots", nargs="+", type=Path, help="workspace folders")
    args = ap.parse_args(argv)
    with contextlib.suppress(OSError):
        os.nice(NICE)
    from .experts import ExpertEnv, adapter_class  # heavy imports after the cheap argument check
    from .secrets import policy_for
    from .spec import load_config

    ws = Workspace.open(args.roots, data_dir=args.data_dir)
    cfg = load_config(args.config_dir)
    env = ExpertEnv(ws)
    experts = [(n, adapter_class(cfg.experts[n].adapter)(cfg.experts[n], env)) for n in args.only if n in cfg.experts]
    started = datetime.now(UTC).isoformat(timespec="seconds")
    print(f"{started} catch-up pid {os.getpid()}: {', '.join(n for n, _ in experts)}", file=sys.stderr, flush=True)
    with ProgressLine(enabled=True, stream=sys.stderr, unit="chunks") as bar:
        reports = catch_up(ws, experts, bar, policy_for(ws.data_dir, cfg.raw_experts))
    for r in reports:
        print(
            f"{datetime.now(UTC).isoformat(timespec='seconds')} {json.dumps(r.to_dict())}", file=sys.stderr, flush=True
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
