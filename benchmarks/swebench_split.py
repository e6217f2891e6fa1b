"""A fixed dev / held-out partition of swebench-lite-files, for fitting on one half only.

    python benchmarks/swebench_split.py ../shared/eval/swebench-lite-files /tmp/swe-split
    engine eval /tmp/swe-split --split dev ...        # fit, choose variants
    engine eval /tmp/swe-split --split heldout ...    # check only
    engine eval /tmp/swe-split --split test ...       # the full 121, as shipped

The suite ships one split (``test``, 121 issues). DEST gets the suite's files as symlinks (the
corpus is only read, and the eval's snapshot cache is keyed by content, so indexes are shared)
plus ``qrels/dev.tsv`` and ``qrels/heldout.tsv``: within each repository, issues ordered by
``sha256("swebench-split:" + instance id)`` alternate dev / held-out, so the halves are
stratified by repository and fixed by the ids alone. ``qrels/test.tsv`` is the original.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path


def split_ids(queries: list[dict[str, object]]) -> dict[str, str]:
    by_repo: dict[str, list[str]] = {}
    for q in queries:
        meta = q.get("metadata") or {}
        repo = str(meta.get("repo", "")) if isinstance(meta, dict) else ""
        by_repo.setdefault(repo, []).append(str(q["_id"]))
    out: dict[str, str] = {}
    for ids in by_repo.values():
        ordered = sorted(ids, key=lambda i: hashlib.sha256(f"swebench-split:{i}".encode()).hexdigest())
        for n, qid in enumerate(ordered):
            out[qid] = "dev" if n % 2 == 0 else "heldout"
    return out


def main(src: Path, dest: Path) -> None:
    src, dest = src.resolve(), dest.resolve()
    (dest / "qrels").mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and not (dest / f.name).exists():
            (dest / f.name).symlink_to(f)
    queries = [json.loads(line) for line in (src / "queries.jsonl").read_text("utf-8").splitlines() if line.strip()]
    which = split_ids(queries)
    lines = (src / "qrels" / "test.tsv").read_text("utf-8").splitlines()
    header, rows = lines[0], lines[1:]
    for split in ("dev", "heldout"):
        keep = [r for r in rows if which.get(r.split("\t")[0]) == split]
        (dest / "qrels" / f"{split}.tsv").write_text("\n".join([header, *keep]) + "\n", "utf-8")
    test = dest / "qrels" / "test.tsv"
    if not test.exists():
        test.symlink_to(src / "qrels" / "test.tsv")
    counts = {s: sum(1 for v in which.values() if v == s) for s in ("dev", "heldout")}
    print(f"{dest}: dev {counts['dev']}, heldout {counts['heldout']} issues")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
