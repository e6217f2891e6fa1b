"""Write the dev question set's BEIR files from ``questions.yaml`` and check its gold on a workspace.

    python benchmarks/devset/make_suite.py [--workspace DEST]

Writes, beside this script: ``queries.jsonl`` (``_id``, ``text``, ``metadata.class``,
``metadata.split``), ``qrels/dev.tsv`` and ``qrels/heldout.tsv`` (``query-id``, ``corpus-id`` =
``project/path``, ``score`` 1–3) and ``gold_spans.jsonl`` (line ranges where a question has them).

The split is stratified by class and fixed by the question ids alone: within a class, questions
are ordered by ``sha256("devset:" + id)`` and alternate dev, heldout, dev, … So adding a question
never moves another one across the split.

With ``--workspace`` (a folder made by ``build_workspace.py``) every gold file must be a file
tracked by its project's git repo, and every grade-3 file of a question with a ``literal`` must
contain that literal: gold that drifted from the code fails here, not silently in a score.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
CLASSES = ("conceptual", "identifier", "typed-symbol", "cross-repo-impact", "docs", "adversarial")
SPLITS = ("dev", "heldout")


def load_questions(path: Path) -> list[dict[str, Any]]:
    rows = yaml.safe_load(path.read_text(encoding="utf-8"))["questions"]
    seen: set[str] = set()
    problems: list[str] = []
    for q in rows:
        qid = q.get("id")
        if not qid or qid in seen:
            problems.append(f"missing or repeated id {qid!r}")
        seen.add(qid)
        if q.get("class") not in CLASSES:
            problems.append(f"{qid}: class {q.get('class')!r} is not one of {CLASSES}")
        gold = q.get("gold") or {}
        if not gold or any(g not in (1, 2, 3) for g in gold.values()):
            problems.append(f"{qid}: gold must map project/path to a grade 1-3")
        if max(gold.values(), default=0) < 2:
            problems.append(f"{qid}: needs at least one gold file of grade 2 or 3")
        for path, span in (q.get("spans") or {}).items():
            if path not in gold or len(span) != 2 or not 1 <= span[0] <= span[1]:
                problems.append(f"{qid}: span {path} {span} is not a [first, last] range of a gold file")
        if not str(q.get("text") or "").strip():
            problems.append(f"{qid}: empty text")
    if problems:
        raise SystemExit("questions.yaml:\n  " + "\n  ".join(problems))
    return list(rows)


def assign_splits(questions: list[dict[str, Any]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for klass in CLASSES:
        ids = sorted(
            (q["id"] for q in questions if q["class"] == klass),
            key=lambda i: hashlib.sha256(f"devset:{i}".encode()).hexdigest(),
        )
        for n, qid in enumerate(ids):
            out[qid] = SPLITS[n % 2]
    return out


def tracked_files(workspace: Path, project: str, cache: dict[str, set[str]]) -> set[str]:
    if project not in cache:
        res = subprocess.run(["git", "ls-files", "-z"], cwd=workspace / project, capture_output=True, check=False)
        if res.returncode != 0:
            raise SystemExit(f"{workspace / project} is not a git repo (run build_workspace.py first)")
        cache[project] = set(res.stdout.decode("utf-8", "replace").split("\0")) - {""}
    return cache[project]


def check_gold(questions: list[dict[str, Any]], workspace: Path) -> list[str]:
    problems: list[str] = []
    cache: dict[str, set[str]] = {}
    for q in questions:
        for cid, grade in q["gold"].items():
            project, _, rel = cid.partition("/")
            if not (workspace / project).is_dir():
                problems.append(f"{q['id']}: no project {project!r} in {workspace}")
                continue
            if rel not in tracked_files(workspace, project, cache):
                problems.append(f"{q['id']}: {cid} is not a tracked file")
                continue
            literal = q.get("literal")
            if literal and grade == 3:
                text = (workspace / project / rel).read_text(encoding="utf-8", errors="replace")
                if literal not in text:
                    problems.append(f"{q['id']}: grade-3 file {cid} does not contain {literal!r}")
            span = (q.get("spans") or {}).get(cid)
            if span:
                lines = (workspace / project / rel).read_text(encoding="utf-8", errors="replace").count("\n") + 1
                if span[1] > lines:
                    problems.append(f"{q['id']}: span {cid} ends at {span[1]}, file has {lines} lines")
    return problems


def write_suite(questions: list[dict[str, Any]], splits: dict[str, str], dest: Path) -> None:
    (dest / "qrels").mkdir(parents=True, exist_ok=True)
    with open(dest / "queries.jsonl", "w", encoding="utf-8") as fh:
        for q in questions:
            row = {"_id": q["id"], "text": q["text"], "metadata": {"class": q["class"], "split": splits[q["id"]]}}
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    for split in SPLITS:
        with open(dest / "qrels" / f"{split}.tsv", "w", encoding="utf-8") as fh:
            fh.write("query-id\tcorpus-id\tscore\n")
            for q in questions:
                if splits[q["id"]] == split:
                    for cid, grade in q["gold"].items():
                        fh.write(f"{q['id']}\t{cid}\t{grade}\n")
    with open(dest / "gold_spans.jsonl", "w", encoding="utf-8") as fh:
        for q in questions:
            for cid, (first, last) in (q.get("spans") or {}).items():
                row = {"query-id": q["id"], "corpus-id": cid, "start_line": first, "end_line": last}
                fh.write(json.dumps(row) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workspace", type=Path, help="check every gold file against this built workspace")
    ap.add_argument("--questions", type=Path, default=HERE / "questions.yaml")
    ap.add_argument("--dest", type=Path, default=HERE, help="where to write the suite files")
    args = ap.parse_args(argv)
    questions = load_questions(args.questions)
    if args.workspace:
        problems = check_gold(questions, args.workspace.resolve())
        if problems:
            print("gold does not match the workspace:\n  " + "\n  ".join(problems), file=sys.stderr)
            return 1
    splits = assign_splits(questions)
    write_suite(questions, splits, args.dest)
    counts = Counter((q["class"], splits[q["id"]]) for q in questions)
    for klass in CLASSES:
        print(f"{klass:18} dev {counts[(klass, 'dev')]:3}  heldout {counts[(klass, 'heldout')]:3}")
    print(
        f"{'total':18} dev {sum(v for (_, s), v in counts.items() if s == 'dev'):3}  "
        f"heldout {sum(v for (_, s), v in counts.items() if s == 'heldout'):3}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
