"""What the answer-cache key costs per request, and what its index generation costs the indexer.

    .venv/bin/python benchmarks/cache_key_cost.py [--files 50000] [--indexes 3] [--runs 200] [--json]

Builds one git repo and ``--indexes`` synthetic manifests of ``--files`` entries each under its
data dir, then times (a) ``Router.cache_key`` warm (the hot path: manifests already parsed),
(b) the first ``cache_key`` after every manifest was rewritten (its first bytes read once per
version) against parsing every manifest in full, and
(c) on the indexer's side one ``Manifest.content_digest`` and one ``Manifest.save`` of that size
(docs/adr/0009-cache-key-generations.md has the numbers).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from engine.index.manifest import Manifest
from engine.runtime import Router
from engine.types import Request
from engine.workspace import Workspace

REPO = Path(__file__).resolve().parents[1]


def manifest(path: Path, n: int, salt: str) -> Manifest:
    files = {
        f"proj:src/d{i // 100}/f{i}.py": {"sha256": hashlib.sha256(f"{salt}{i}".encode()).hexdigest(), "size": i}
        for i in range(n)
    }
    return Manifest(path, "bench-1", files, {"proj": "0" * 40})


def ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=50_000)
    ap.add_argument("--indexes", type=int, default=3)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="cachekey-"))
    try:
        repo = tmp / "proj"
        repo.mkdir()
        subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
        subprocess.run(
            ["git", "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-q", "--allow-empty", "-m", "x"],
            cwd=repo,
            check=True,
        )
        ws = Workspace.open([repo])
        manifests = [manifest(ws.data_dir / "index" / f"idx{i}" / "manifest.json", args.files, "a") for i in range(3)]
        manifests = manifests[: args.indexes]
        started = time.perf_counter()
        digest = manifests[0].content_digest()
        digest_s = time.perf_counter() - started
        saves = []
        for m in manifests:
            m.generation = digest
            started = time.perf_counter()
            m.save()
            saves.append(time.perf_counter() - started)
        router = Router(REPO, ws)
        request = Request(question="where is x")
        started = time.perf_counter()
        router.cache_key(request, "v")
        first = time.perf_counter() - started
        started = time.perf_counter()
        for m in manifests:  # what reading the generation through a full parse would cost instead
            Manifest.load(m.path)
        parse = time.perf_counter() - started
        warm = []
        for _ in range(args.runs):
            started = time.perf_counter()
            router.cache_key(request, "v")
            warm.append(time.perf_counter() - started)
        out = {
            "files_per_index": args.files,
            "indexes": len(manifests),
            "cache_key_warm_p50_ms": ms(statistics.median(warm)),
            "cache_key_warm_p95_ms": ms(sorted(warm)[int(0.95 * (len(warm) - 1))]),
            "cache_key_first_after_reindex_ms": ms(first),
            "full_manifest_parse_instead_ms": ms(parse),
            "indexer_content_digest_ms": ms(digest_s),
            "indexer_manifest_save_ms": ms(statistics.median(saves)),
        }
        print(json.dumps(out, indent=None if args.json else 2))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
