"""Load an evaluation suite in BEIR/CoIR layout, and the parts of it one run needs.

Layout: ``corpus.jsonl`` (or ``corpus.jsonl.gz``) with ``{_id, title, text, metadata}``,
``queries.jsonl`` with ``{_id, text, metadata}`` and ``qrels/<split>.tsv`` (``query-id``,
``corpus-id``, ``score``; graded 0–3, only scores > 0 count as relevant).

Two optional per-query fields make a suite a *router* suite (DESIGN §10): ``class`` (the intent
class the question belongs to) and ``gold_experts`` (the experts that should fire). Both are read
from the top level or from ``metadata``. A query or doc with ``metadata.snapshot`` belongs to one
snapshot of the corpus (one repo at one version): it is searched only there, the way
``bm25_beir.py`` does it, so the harness and the published baselines agree on the task.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import EvalError

#: snapshot key for docs and queries that carry none: the whole corpus is one snapshot
ALL = "_all"


class SuiteError(EvalError):
    """The folder is not a readable BEIR suite (says which file and why)."""


@dataclass(frozen=True, slots=True)
class Doc:
    id: str
    title: str
    text: str
    snapshot: str
    path: str | None  # metadata.path when the corpus names the file


@dataclass(frozen=True, slots=True)
class EvalQuery:
    id: str
    text: str
    snapshot: str
    gold_class: str | None
    gold_experts: tuple[str, ...] | None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class Suite:
    root: Path
    name: str
    split: str
    queries: list[EvalQuery]  # only queries with ≥1 relevant doc in the split, in qrels order
    qrels: dict[str, dict[str, int]]
    docs_by_snapshot: dict[str, list[Doc]]

    def docs_for(self, snapshot: str) -> list[Doc]:
        """A snapshot's docs; queries whose snapshot has no docs search the whole pool."""
        if snapshot in self.docs_by_snapshot:
            return self.docs_by_snapshot[snapshot]
        return self.docs_by_snapshot.get(ALL, [])

    def queries_by_snapshot(self) -> dict[str, list[EvalQuery]]:
        out: dict[str, list[EvalQuery]] = {}
        for q in self.queries:
            key = q.snapshot if q.snapshot in self.docs_by_snapshot else ALL
            out.setdefault(key, []).append(q)
        return out

    def fingerprint(self) -> str:
        """Hash of the suite's files (size + mtime + name): names the cache and the experiments row."""
        h = hashlib.sha256()
        for f in sorted(self.root.rglob("*")):
            if f.is_file() and not f.name.startswith("."):
                st = f.stat()
                h.update(f"{f.relative_to(self.root)}:{st.st_size}:{st.st_mtime_ns}\n".encode())
        return h.hexdigest()


def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except ValueError as exc:
                raise SuiteError(f"{path}:{n}: not JSON: {exc}") from None


def _corpus_file(root: Path) -> Path:
    for name in ("corpus.jsonl", "corpus.jsonl.gz"):
        if (root / name).is_file():
            return root / name
    raise SuiteError(f"{root}: no corpus.jsonl or corpus.jsonl.gz")


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """``query-id → {corpus-id: grade}``, relevant (grade > 0) rows only; a header line is skipped."""
    if not path.is_file():
        raise SuiteError(f"no qrels file {path}")
    qrels: dict[str, dict[str, int]] = {}
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            parts = line.rstrip("\n").split("\t")
            if not line.strip() or (n == 1 and not parts[-1].lstrip("-").isdigit()):
                continue
            if len(parts) < 3:
                raise SuiteError(f"{path}:{n}: expected query-id, corpus-id, score")
            try:
                score = int(parts[-1])
            except ValueError:
                raise SuiteError(f"{path}:{n}: the score {parts[-1][:40]!r} is not an integer") from None
            qid, cid = parts[0], parts[1]
            if score > 0:
                qrels.setdefault(qid, {})[cid] = score
    return qrels


def _corpus_id(row: dict[str, Any]) -> str:
    if "_id" not in row:
        raise SuiteError(f"a corpus row has no _id: {json.dumps(row)[:120]}")
    return str(row["_id"])


def _field(row: dict[str, Any], name: str) -> Any:
    meta = row.get("metadata") or {}
    return row[name] if name in row else meta.get(name)


def _snapshot(row: dict[str, Any]) -> str:
    return str((row.get("metadata") or {}).get("snapshot") or ALL)


def load_suite(root: Path, split: str = "test", limit_queries: int | None = None, *, corpus: bool = True) -> Suite:
    """Read a suite; with ``limit_queries`` only the first N queries (qrels order) and their snapshots.
    ``corpus=False``: queries and qrels only (``engine eval --workspace`` searches a live workspace)."""
    root = root.expanduser().resolve()
    if not root.is_dir():
        raise SuiteError(f"suite {root} is not a folder")
    qrels = read_qrels(root / "qrels" / f"{split}.tsv")
    if not (root / "queries.jsonl").is_file():
        raise SuiteError(f"{root}: no queries.jsonl")
    raw_queries: dict[str, dict[str, Any]] = {}
    for q in _jsonl(root / "queries.jsonl"):
        if "_id" not in q:
            raise SuiteError(f"a query has no _id: {json.dumps(q)[:120]}")
        if str(q["_id"]) in raw_queries:  # the last one won silently: two questions scored as one
            raise SuiteError(f"query id {q['_id']!r} is given twice in queries.jsonl")
        raw_queries[str(q["_id"])] = q
    missing = [qid for qid in qrels if qid not in raw_queries]
    if missing:
        raise SuiteError(f"{len(missing)} qrels query ids are not in queries.jsonl, e.g. {missing[:3]}")
    queries: list[EvalQuery] = []
    for qid in qrels:
        q = raw_queries[qid]
        gold = _field(q, "gold_experts")
        klass = _field(q, "class")
        queries.append(
            EvalQuery(
                id=qid,
                text=q["text"],
                snapshot=_snapshot(q),
                gold_class=str(klass) if klass else None,
                gold_experts=tuple(gold) if isinstance(gold, list) else None,
                metadata=dict(q.get("metadata") or {}),
            )
        )
    if limit_queries is not None:
        queries = queries[:limit_queries]
        qrels = {q.id: qrels[q.id] for q in queries}
    wanted = {q.snapshot for q in queries}
    docs: dict[str, list[Doc]] = {}
    seen: set[tuple[str, str]] = set()
    for d in _jsonl(_corpus_file(root)) if corpus else ():
        snap = _snapshot(d)
        if snap not in wanted and snap != ALL:
            continue  # no query searches this snapshot: do not hold its text in memory
        if (snap, _corpus_id(d)) in seen:  # two documents under one id: a gold id would name either
            raise SuiteError(f"corpus id {_corpus_id(d)!r} is given twice (snapshot {snap!r})")
        seen.add((snap, _corpus_id(d)))
        meta = d.get("metadata") or {}
        docs.setdefault(snap, []).append(
            Doc(
                id=_corpus_id(d),
                title=d.get("title") or "",
                text=d.get("text") or "",
                snapshot=snap,
                path=meta.get("path"),
            )
        )
    return Suite(root=root, name=root.name, split=split, queries=queries, qrels=qrels, docs_by_snapshot=docs)
