"""``engine eval SUITE``: every arm answers every query of a suite, then metrics and reports are written.

Per snapshot (one repo at one version, or the whole corpus): the snapshot is materialized and
indexed once (:mod:`.materialize`), then each arm answers that snapshot's queries one after the
other, cache off (``no_cache``), so latency is the search itself. One :class:`~engine.runtime.Router`
per (snapshot, arm), all writing into one eval store under the eval home, so every receipt,
every ``tool_benchmark_events`` row (labelled with its arm) and the run's ``experiments`` rows can
be queried together afterwards. Results are mapped to corpus ids at file level: a file's rank
is the rank of its first item.

With ``workspace`` set (``engine eval SUITE --workspace DIR``) there is one "snapshot", the live
workspace itself, searched in place (:mod:`.live`): corpus ids are ``project/path``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import anyio

from ..classifier import classify
from ..config import load_config
from ..hints import HINT_LANE
from ..indexing import index_workspace
from ..keys import KeyRing
from ..receipts import verify
from ..runtime import Router
from ..spec import ConfigSet
from ..store import Store, open_store
from ..workspace import Workspace
from .arms import PEER, Arm, build_arms, default_arms, index_backed
from .live import LiveWorkspace, check_qrels, open_live, peer_docs
from .materialize import eval_home, index_snapshot, materialize
from .metrics import K, QueryResult
from .peer import Bm25Peer
from .suite import ALL, EvalQuery, Suite, load_suite


@dataclass
class EvalOptions:
    suite: Path
    config_dir: Path
    split: str = "test"
    arms: Sequence[str] | None = None  # default: router, each expert it can select, bm25-peer
    limit_queries: int | None = None
    out: Path | None = None  # default: <eval home>/runs/<suite>-<timestamp>
    home: Path | None = None
    pipeline: str = "router"
    doc_ext: str = ".py"  # file extension for docs that name no path (e.g. CoSQA functions)
    intent_from_class: bool = False  # pass a query's gold class as the request's intent
    warmup: bool = True  # one untimed question per (snapshot, arm) Router first; its events say "<arm>:warmup"
    progress: bool = True
    workspace: Sequence[Path] | None = None  # search this live workspace; qrels name project/path
    request_limit: int | None = None  # items asked per question (default: enough for K distinct files)
    drop_unreturnable: bool = False  # --workspace: drop gold ids the engine cannot return instead of failing
    budget_ms: int | None = None  # budget.latency_ms of every question (the budget sweep of benchmarks/latency.py)


class Target(Protocol):
    """What the arms search for one snapshot: a materialized snapshot or the live workspace."""

    @property
    def snapshot(self) -> str: ...

    def workspace(self) -> Workspace: ...

    def doc_id(self, item: Mapping[str, Any]) -> str | None: ...


@dataclass
class EvalRun:
    """Everything an eval produced in memory; :mod:`.report` writes it out."""

    options: EvalOptions
    suite: Suite
    arms: list[Arm]
    results: dict[str, list[QueryResult]]
    home: Path
    store: Store
    timing: dict[str, float] = field(default_factory=dict)
    snapshots: dict[str, dict[str, Any]] = field(default_factory=dict)
    out: Path | None = None
    request_limit: int | None = None  # items each question asked for
    dropped_qrels: list[str] = field(default_factory=list)  # gold ids dropped as unreturnable


class Progress:
    """One status line on stderr: queries done of total, the current snapshot and arm, an ETA."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.done, self.enabled = total, 0, enabled
        self.t0 = time.perf_counter()
        self.last = 0.0

    def note(self, text: str) -> None:
        if self.enabled:
            sys.stderr.write(f"\r\033[K[eval] {text}")
            sys.stderr.flush()

    def step(self, label: str) -> None:
        self.done += 1
        now = time.perf_counter()
        if not self.enabled or (now - self.last < 0.2 and self.done < self.total):
            return
        self.last = now
        rate = self.done / max(now - self.t0, 1e-6)
        eta = (self.total - self.done) / rate if rate else 0.0
        width = 30
        fill = int(width * self.done / self.total) if self.total else width
        self.note(f"[{'#' * fill}{'.' * (width - fill)}] {self.done}/{self.total} {label} ETA {eta:,.0f}s")
        if self.done >= self.total:
            sys.stderr.write("\n")


def request_limit(config_dir: Path) -> int:
    """Ask for enough fused items that ≥ K distinct files survive the per-file cap, without raising
    the per-expert over-fetch (``query.limit = max(overfetch, limit)``)."""
    fusion = load_config(config_dir).priors.fusion
    return min(200, max(fusion.overfetch, K * fusion.per_file_cap))


def to_result(
    q: EvalQuery,
    arm: str,
    klass: str,
    response: dict[str, Any],
    error: str | None,
    latency_ms: float,
    sw: Target,
) -> QueryResult:
    ranked: list[str] = []
    features: list[dict[str, Any]] = []
    for item in response.get("items", []):
        doc = sw.doc_id(item)
        if doc is not None and doc not in ranked:
            ranked.append(doc)
        rr = {k[3:]: v for k, v in (item.get("subscores") or {}).items() if k.startswith("rr.")}
        if rr and doc is not None:  # what `engine tune --rerank` fits weights from
            features.append({"doc": doc, "f": rr})
    receipt = response.get("receipt")
    res = QueryResult(
        qid=q.id,
        arm=arm,
        ranked=ranked,
        latency_ms=latency_ms,
        klass=klass,
        error=error,
        receipt_ok=isinstance(receipt, dict) and verify(receipt),
    )
    res.features = features
    res.confidence = response.get("confidence")
    if receipt:
        res.receipt_id, res.config_version = receipt.get("receipt_id"), receipt.get("config_version")
        res.rerank = ((receipt.get("fusion") or {}).get("rerank") or {}).get("weights")
        res.node_ms = dict(((receipt.get("budget") or {}).get("spent") or {}).get("nodes_ms") or {})
        c = receipt.get("classifier") or {}
        res.predicted_class, res.abstained = c.get("class"), c.get("abstained")
        res.selected = list((receipt.get("experts_selected") or {}).get("selected") or [])
        for name, pe in (receipt.get("per_expert") or {}).items():
            if name == HINT_LANE:  # read from the hint book: no expert was called
                continue
            res.expert_latency_ms[name] = float(pe.get("latency_ms", 0.0))
            res.expert_status[name] = str(pe.get("status"))
    return res


def expert_hits(response: dict[str, Any], relevant: set[str], sw: Target) -> dict[str, bool]:
    """Did each expert that ran return (as a source of some item) a relevant document?"""
    hits = {name: False for name in (response.get("receipt") or {}).get("per_expert", {})}
    for item in response.get("items", []):
        found = sw.doc_id(item) in relevant
        for s in item.get("sources", []):
            hits[s["expert"]] = hits.get(s["expert"], False) or found
    return hits


async def run_router_arm(
    arm: Arm,
    sw: Target,
    queries: list[EvalQuery],
    classes: dict[str, str],
    opts: EvalOptions,
    store: Store,
    limit: int,
    bar: Progress,
    qrels: dict[str, dict[str, int]],
) -> list[QueryResult]:
    assert arm.config_dir is not None
    # receipts go to the eval store, signed by its key: `ENGINE_HOME=<home>/store engine receipts verify`
    router = Router(
        arm.config_dir, sw.workspace(), arm=arm.name, store=store, keys=KeyRing(eval_home(opts.home) / "store")
    )
    out: list[QueryResult] = []
    try:
        if opts.warmup and queries:  # config load, key, index readers: a cost per Router, not per question
            router.arm = f"{arm.name}:warmup"
            await router.run(opts.pipeline, {"question": queries[0].text, "no_cache": True, "limit": limit})
            router.flush(ingest=False)
            router.arm = arm.name
        for q in queries:
            request: dict[str, Any] = {"question": q.text, "no_cache": True, "limit": limit}
            if opts.budget_ms is not None:
                request["budget"] = {"latency_ms": opts.budget_ms}
            if opts.intent_from_class and q.gold_class:
                request["intent"] = q.gold_class
            started = time.perf_counter()
            result = await router.run(opts.pipeline, request)
            latency = (time.perf_counter() - started) * 1000
            receipt_id = (result.response.get("receipt") or {}).get("receipt_id")
            if receipt_id:
                relevant = {d for d, g in qrels.get(q.id, {}).items() if g > 0}
                router.label_hits(receipt_id, expert_hits(result.response, relevant, sw))
            router.flush(ingest=False)  # spool events now, ingest once at the end (off the timed path)
            out.append(
                to_result(
                    q,
                    arm.name,
                    classes[q.id],
                    result.response,
                    result.error.code if result.error else None,
                    latency,
                    sw,
                )
            )
            bar.step(f"{sw.snapshot} {arm.name}")
    finally:
        await router.aclose()
    return out


def run_peer_arm(
    suite: Suite, snapshot: str, queries: list[EvalQuery], classes: dict[str, str], bar: Progress
) -> list[QueryResult]:
    peer = Bm25Peer(suite.docs_for(snapshot))
    out = []
    for q in queries:
        r = peer.search(q)
        out.append(QueryResult(qid=q.id, arm=PEER, ranked=r.ranked, latency_ms=r.latency_ms, klass=classes[q.id]))
        bar.step(f"{snapshot} {PEER}")
    return out


def report_classes(suite: Suite, config_dir: Path) -> dict[str, str]:
    """The class each query is reported under: its gold ``class``, else the router's own rules
    (``abstained`` when the classifier abstains and the default expert set runs)."""
    cfg = load_config(config_dir)
    out = {}
    for q in suite.queries:
        if q.gold_class:
            out[q.id] = q.gold_class
        else:
            c = classify(q.text, cfg.classifier, cfg.priors.abstain_below)
            out[q.id] = "abstained" if c.abstained else c.klass
    return out


def prepare_snapshot(
    snapshot: str,
    suite: Suite,
    cfg: ConfigSet,
    to_index: set[str],
    opts: EvalOptions,
    home: Path,
    timing: dict[str, float],
) -> tuple[Target, dict[str, Any]]:
    """Materialize (or reuse) one snapshot and bring its indexes up to date."""
    t = time.perf_counter()
    sw, written = materialize(snapshot, suite.docs_for(snapshot), home, opts.doc_ext)
    timing["materialize_s"] += time.perf_counter() - t
    t = time.perf_counter()
    reports = index_snapshot(sw, cfg, to_index, progress=opts.progress)
    timing["index_s"] += time.perf_counter() - t
    info = {"folder": str(sw.project_dir), "content_hash": sw.content_hash, "written": written}
    return sw, {**info, "docs": len(sw.path_to_doc), "index": [r.to_dict() for r in reports]}


def prepare_live(
    live: LiveWorkspace, cfg: ConfigSet, to_index: set[str], opts: EvalOptions, timing: dict[str, float]
) -> dict[str, Any]:
    """Bring the live workspace's own indexes up to date (a no-op scan after ``engine index -w``)."""
    t = time.perf_counter()
    reports = index_workspace(live.ws, cfg, only=sorted(to_index), progress=opts.progress) if to_index else []
    timing["index_s"] += time.perf_counter() - t
    return {
        "folder": [str(r) for r in live.ws.roots],
        "projects": live.heads,
        "docs": len(live.doc_ids),
        "index": [r.to_dict() for r in reports],
    }


def run_eval(opts: EvalOptions) -> EvalRun:
    """Run every arm over the suite; returns the in-memory run (see :func:`.report.write_run`)."""
    t_start = time.perf_counter()
    home = eval_home(opts.home)
    live = open_live(opts.workspace) if opts.workspace else None
    suite = load_suite(opts.suite, opts.split, opts.limit_queries, corpus=live is None)
    config_dir = opts.config_dir.resolve()
    cfg = load_config(config_dir)
    arms = build_arms(list(opts.arms) if opts.arms else default_arms(cfg), config_dir, home)
    dropped: list[str] = []
    if live is not None:
        dropped = check_qrels(suite, live, drop=opts.drop_unreturnable)
        if any(a.kind == "peer" for a in arms):
            suite.docs_by_snapshot = {ALL: peer_docs(live)}
    store = open_store(home / "store")
    # the eval store is the eval's own: an eval home from before it had a key of its own (receipts
    # were signed by each snapshot's key) gets one here instead of failing on "missing key"
    KeyRing(home / "store").signing_key(fresh=True)
    run = EvalRun(opts, suite, arms, {a.name: [] for a in arms}, home, store, dropped_qrels=dropped)
    classes = report_classes(suite, config_dir)
    limit = opts.request_limit or request_limit(config_dir)
    run.request_limit = limit
    by_snapshot = suite.queries_by_snapshot()
    bar = Progress(len(suite.queries) * len(arms), opts.progress)
    to_index = index_backed(cfg, set().union(*(a.experts for a in arms)))
    timing = {"materialize_s": 0.0, "index_s": 0.0, **{f"query_s.{a.name}": 0.0 for a in arms}}
    for n, (snapshot, queries) in enumerate(by_snapshot.items(), start=1):
        sw: Target | None = None
        if any(a.kind != "peer" for a in arms):
            bar.note(f"snapshot {snapshot} ({n}/{len(by_snapshot)}): preparing, indexing {sorted(to_index)}")
            if live is not None:
                sw, info = live, prepare_live(live, cfg, to_index, opts, timing)
            else:
                sw, info = prepare_snapshot(snapshot, suite, cfg, to_index, opts, home, timing)
            run.snapshots[snapshot] = {**info, "queries": len(queries)}
        for arm in arms:
            t = time.perf_counter()
            if arm.kind == "peer":
                run.results[arm.name] += run_peer_arm(suite, snapshot, queries, classes, bar)
            else:
                assert sw is not None
                run.results[arm.name] += anyio.run(
                    run_router_arm, arm, sw, queries, classes, opts, store, limit, bar, suite.qrels
                )
            timing[f"query_s.{arm.name}"] += time.perf_counter() - t
    bar.note("ingesting benchmark events\n")
    store.sync(timeout_s=60.0)
    timing["total_s"] = time.perf_counter() - t_start
    run.timing = {k: round(v, 2) for k, v in timing.items()}
    return run
