"""The one API every surface uses (CLI, MCP server, eval): ``Router.run(pipeline, request)``.

A Router owns the config (hot-reloaded: the files' mtimes are checked on every run; a bad edit
is reported and the last good config keeps serving), the expert pool, the store and the
signing key. It hands each run to the scheduler and is, to the nodes, the
:class:`~engine.nodes.base.Services` they may ask for (an expert, the answer cache, the clock,
signing, chaining and storing the receipt through the receipt log) — the only place nodes reach
the store. Work that can happen after the answer (benchmark events, cache rows, DuckDB
ingestion) is queued and done by :meth:`Router.flush`, which surfaces call once the answer is
out; a damaged store is logged there, never raised (the receipt is already in the spool). The receipt
is written before the answer and fsync'ed by :meth:`Router.flush`, after it.

Every request gets a receipt: a request that fails validation (empty, wrong types, undecodable
text) is answered with ``invalid_request`` and a receipt whose request is the escaped input.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import heap
from .bandit import Bandit
from .config import load_config
from .deadlines import TAIL, LatencyModel
from .errors import EngineError, InvalidRequest, ReceiptError, SpecError, StoreError
from .experts import Expert, ExpertEnv
from .flywheel import Flywheel, Learn
from .graph import PipelineGraph, build_graph
from .hints import HINT_LANE, HintBook
from .index.build import read_head
from .index.manifest import read_generation
from .items import CachedAnswer
from .keys import KeyRing
from .nodes.base import RunState
from .nodes.receipt import bounded, write_receipt
from .pool import ExpertPool
from .receipts import ReceiptLog
from .scheduler import run_graph
from .secrets import policy_for
from .spec import CONFIG_FILES, ConfigSet, PipelineSpec, escape_undecodable, parse_request
from .store import BenchmarkEvent, CacheEntry, ConfigSnapshot, Feedback, Store, open_store
from .trust import check_workspace_trust
from .types import Request, canonical_json, sha256_hex
from .workspace import Workspace, check_scope_path
from .yamlfile import load_schema

log = logging.getLogger("engine")
CACHE_TTL_S = float(os.environ.get("ENGINE_CACHE_TTL_S", "300"))
MEMO_SIZE = 256
#: answers whose bookkeeping (events, cache row, flywheel, latency) waits for the next flush; past
#: this many the next answer does it itself (a caller that never flushes keeps memory bounded)
PENDING_ANSWERS = 64
#: flushes after which the heap built so far is collected, frozen out of the cyclic GC and trimmed
#: (engine/heap.py), and how often it is trimmed besides. A one-shot `engine run` flushes once and
#: never pays for it.
SETTLE_AT = frozenset({2, 16, 128, 1024})
TRIM_EVERY = 64


@dataclass
class RunResult:
    response: dict[str, Any]
    error: EngineError | None = None

    @property
    def exit_code(self) -> int:
        return 0 if self.error is None else self.error.exit_code


@dataclass(frozen=True)
class _NewVersion:
    """A config version this router used for the first time: snapshotted by :meth:`Router.flush`."""

    config: ConfigSet
    pipeline: PipelineSpec
    version: str
    created_at: str

    def snapshot(self) -> ConfigSnapshot:
        content = self.config.config_content(self.pipeline)
        return ConfigSnapshot(self.version, json.loads(canonical_json(content)), self.created_at)


@dataclass
class _Loaded:
    config: ConfigSet
    stamp: tuple[tuple[str, int, int, int], ...]
    graphs: dict[str, PipelineGraph] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)  # pipeline → config_version, hashed once

    def config_version(self, spec: PipelineSpec) -> str:
        if spec.name not in self.versions:
            self.versions[spec.name] = self.config.config_version(spec)
        return self.versions[spec.name]


class Router:
    def __init__(
        self,
        config_dir: Path,
        workspace: Workspace,
        *,
        arm: str = "router",
        store: Store | None = None,
        keys: KeyRing | None = None,
        config_source: str = "api",
    ) -> None:
        """``arm`` labels this router's benchmark events (eval runs one Router per arm); ``store``
        and ``keys`` let several routers (one per eval snapshot, or per config folder in the CLI
        daemon) share one store and its key; ``config_source`` says why ``config_dir`` was chosen
        (engine/configdir.py) and is named in every receipt."""
        self.config_dir = config_dir.resolve()
        self.config_source = config_source
        self.workspace = workspace
        self.arm = arm
        self.store = store if store is not None else open_store(workspace.data_dir)
        self.receipt_log = ReceiptLog(self.store, keys if keys is not None else KeyRing(workspace.data_dir))
        self.pool = ExpertPool(ExpertEnv(workspace))
        self._loaded: _Loaded | None = None
        #: why the files on disk are not the config serving (a rejected edit); None when they are
        self.reload_error: SpecError | None = None
        self._after: list[BenchmarkEvent | CacheEntry | _NewVersion | Learn] = []
        # answers out, their bookkeeping not done yet (:meth:`_settle_answers`, under _after_lock)
        self._answered: list[tuple[RunState, dict[str, Any]]] = []
        self._versions_seen: set[str] = set()  # config versions already queued for a snapshot
        self._after_lock = threading.Lock()  # run() appends on the loop, flush() may drain from a thread
        # answers this process cached itself: a long-lived server skips the DuckDB open (~15-35 ms)
        self._memo: dict[str, tuple[float, CacheEntry]] = {}
        self._config_files: list[str] | None = None
        self._pipelines_mtime = -1
        self._latency: LatencyModel | None = None
        self._flushes = 0
        self.flywheel = Flywheel(self.store)  # hints and the bandit: read by nodes, fed after answers

    # ------------------------------------------------------------------ config (hot reload)
    def _stamp(self) -> tuple[tuple[str, int, int, int], ...]:
        """(file, mtime, size) of every config file: one ``stat`` each per request (~2 µs). The list
        of pipeline files is read again only when the pipelines folder's own mtime moves (a file
        added, removed or renamed over, as editors save)."""
        pipelines = os.path.join(self.config_dir, "pipelines")
        try:
            dir_mtime = os.stat(pipelines).st_mtime_ns
        except OSError:
            dir_mtime = -1
        if self._config_files is None or dir_mtime != self._pipelines_mtime:
            found = sorted(str(f) for f in Path(pipelines).glob("*.yaml"))
            self._config_files = [str(self.config_dir / n) for n in CONFIG_FILES] + found
            self._pipelines_mtime = dir_mtime
        out = []
        for f in self._config_files:
            try:
                st = os.stat(f)
                # ctime too: `cp -p` / `rsync -t` can replace a file keeping its size and mtime
                out.append((f, st.st_mtime_ns, st.st_size, st.st_ctime_ns))
            except OSError:
                out.append((f, -1, -1, -1))
        return tuple(out)

    def config(self) -> ConfigSet:
        """The current config; reloads when a file changed. A bad edit keeps the last good config."""
        return self._current().config

    def _current(self) -> _Loaded:
        """The current config with every pipeline's graph, built and checked once per version."""
        stamp = self._stamp()
        if self._loaded is not None and self._loaded.stamp == stamp:
            return self._loaded
        try:
            cfg = dataclasses.replace(load_config(self.config_dir), source=self.config_source)
            check_workspace_trust(cfg)
            graphs = {name: build_graph(spec, cfg) for name, spec in cfg.pipelines.items()}
        except SpecError as exc:
            if self._loaded is None:
                raise
            log.error("config reload rejected, still serving config %s: %s", self._loaded.config.root, exc.message)
            self._loaded.stamp = stamp  # do not retry until the files change again
            self.reload_error = exc
            return self._loaded
        self._loaded = _Loaded(cfg, stamp, graphs)
        self.reload_error = None
        self.pool.sync(cfg)
        return self._loaded

    def graph(self, spec: PipelineSpec) -> PipelineGraph:
        return self._current().graphs[spec.name]

    def resolve_pipeline(self, pipeline: str | Path) -> PipelineSpec:
        return self._resolve(self.config(), pipeline)

    @staticmethod
    def _resolve(cfg: ConfigSet, pipeline: str | Path) -> PipelineSpec:
        if isinstance(pipeline, str) and pipeline in cfg.pipelines:
            return cfg.pipelines[pipeline]
        path = Path(pipeline)
        if not path.exists():
            raise SpecError(f"pipeline {pipeline!r} not found; pipelines: {sorted(cfg.pipelines)}")
        return cfg.pipeline_by_file(path)

    # ------------------------------------------------------------------ Services (what nodes may ask for)
    def clock(self) -> float:
        return time.perf_counter()

    def expert(self, name: str) -> Expert:
        return self.pool.get(name)

    @property
    def latency(self) -> LatencyModel:
        """Recent expert latencies of this router's store and arm (shared by the routers of a process)."""
        if self._latency is None or self._latency.arm != self.arm:
            self._latency = LatencyModel.shared(self.store, self.arm)
        return self._latency

    def latency_p95(self, expert: str) -> float | None:
        return self.latency.p95(expert)

    def hint_book(self) -> HintBook:
        return self.flywheel.hint_book()

    def bandit(self) -> Bandit:
        return self.flywheel.bandit()

    def record_feedback(self, feedback: Feedback) -> None:
        """Store feedback (checked against its receipt) and, for an answer this Router gave recently,
        queue the hints it teaches (written by :meth:`flush`).

        Raises:
            InvalidRequest: the receipt or an item id is unknown (:meth:`Store.put_feedback`).
            StoreError: it could not be stored.
        """
        self.store.put_feedback(feedback)
        with self._after_lock:  # the memo of recent answers is written under it, after each answer
            self._settle_answers()  # an answer not flushed yet is known to the flywheel first
            learn = self.flywheel.feedback(feedback)
            if learn is not None:
                self._after.append(learn)

    def store_receipt(self, receipt: dict[str, Any]) -> dict[str, Any]:
        """Sign, chain and store one receipt body (durable at the next :meth:`flush`): the one place
        a receipt reaches the store."""
        try:
            return self.receipt_log.append(receipt)
        except EngineError:
            raise
        except Exception as exc:  # noqa: BLE001 - any signing/storage failure fails the request
            raise ReceiptError(f"receipt could not be signed and stored: {type(exc).__name__}: {exc}") from exc

    def cache_key(self, request: Request, config_version: str) -> str:
        """What the answer depends on: config, request, workspace, every HEAD and what every index
        holds (its manifest's ``generation``: an ``engine index`` that changed nothing keeps it).
        Cheap: a stat per manifest (its first bytes read once per version) and small reads of .git."""
        heads = [read_head(p.root) for p in self.workspace.projects if p.is_git]
        index_root = self.workspace.data_dir / "index"
        paths = sorted(index_root.glob("*/manifest.json")) if index_root.exists() else []
        indexes = [(m.parent.name, read_generation(m)) for m in paths]
        return sha256_hex(canonical_json([config_version, request.hash(), self.workspace.key(), heads, indexes]))

    def cached_answer(self, key: str) -> CachedAnswer | None:
        try:
            hit = self._memo_get(key)
            if hit is None:
                hit = self.store.cache_get(key)
                if hit is not None:  # a long-lived router (serve, the CLI daemon) reads the store once per key
                    with self._after_lock:  # the memo is also written by the flush, in its thread
                        self._remember(hit)
        except StoreError as exc:  # a damaged store is a cache miss, never a lost answer
            log.warning("store: %s", exc.message)
            return None
        if hit is None:
            return None
        try:
            return CachedAnswer.from_dict(hit.response)
        except (KeyError, TypeError, ValueError):  # a row of another shape is a miss, never a crash
            return None

    # ------------------------------------------------------------------ the API
    async def run(self, pipeline: str | Path, request: Request | dict[str, Any]) -> RunResult:
        # one config version for the whole run, sub-pipelines included. Loaded before the clock
        # starts: a (re)load happens once per config version, at start-up or after an edit, and
        # costs ~0.5 s (YAML, schemas, adapter imports); budget.latency_ms bounds the question's work
        loaded = self._current()
        created_at = datetime.now(UTC).isoformat(timespec="milliseconds")
        started = self.clock()
        cfg = loaded.config
        spec = self._resolve(cfg, pipeline)
        await self.pool.close_retired()
        version = loaded.config_version(spec)
        try:
            req = parse_request(request.to_dict() if isinstance(request, Request) else request)
            if isinstance(request, Request):
                req = request  # fields to_dict leaves out (no_cache) stay as the caller set them
            projects = self.workspace.scoped_projects(req.scope, dict(cfg.priors.groups))  # validates project/group
            # a scope path that resolves outside its project (symlinks too) or names a withheld file
            policy = policy_for(self.workspace.data_dir, cfg.raw_experts)
            check_scope_path(projects, req.scope.path, policy, self.workspace.data_dir)
        except InvalidRequest as exc:
            return self._receipted_failure(spec, cfg, version, request, exc, created_at, started)
        state = RunState(
            request=req,
            config=cfg,
            pipeline=spec,
            workspace=self.workspace,
            config_version=version,
            services=self,
            started=started,
            created_at=created_at,
        )
        await run_graph(loaded.graphs[spec.name], state, loaded.graphs.__getitem__)
        if state.receipt is None:  # a pipeline without a receipt node still gets one: no unlogged path
            write_receipt(state)
        return self._finish(state)

    def _finish(self, state: RunState) -> RunResult:
        assert state.receipt is not None
        self._note_tail(state)
        response: dict[str, Any] = {"items": [it.to_dict() for it in state.fused]}
        if state.request.mode == "separate":
            response["separate"] = state.separate
        if state.confidence is not None:
            response["confidence"] = state.confidence.to_dict()
        if state.error is not None:
            response["error"] = state.error.to_dict()
        response["receipt"] = state.receipt
        with self._after_lock:  # its bookkeeping is done after the answer (flush), not before it
            self._answered.append((state, response))
            if len(self._answered) > PENDING_ANSWERS:
                self._settle_answers()
        return RunResult(response, state.error)

    def _note_tail(self, state: RunState) -> None:
        """What followed the experts' deadline in this request, for the next budgets' reserve
        (engine.deadlines): the fan-out's end to the signed receipt, plus how late the fan-out
        ended past the deadline it was given (a loaded machine fires timers late)."""
        if state.fanout_end is None:
            return
        tail = (self.clock() - state.fanout_end) * 1000
        budget = state.request.budget.latency_ms
        if budget is not None and state.reserve_ms is not None:
            deadline_at = state.started + (budget - state.reserve_ms) / 1000
            tail += max(0.0, (state.fanout_end - deadline_at) * 1000)
        self.latency.observe(TAIL, tail, "ok")

    def _receipted_failure(
        self,
        spec: PipelineSpec,
        cfg: ConfigSet,
        version: str,
        raw: Any,
        exc: InvalidRequest,
        created_at: str,
        started: float,
    ) -> RunResult:
        question = raw.question if isinstance(raw, Request) else raw.get("question") if isinstance(raw, dict) else None
        # undecodable text is receipted escaped: the signed body must be valid UTF-8 JSON; a question
        # refused for its length is receipted cut to the longest one accepted (never echoed whole)
        text = escape_undecodable(question) if isinstance(question, str) else ""
        req = Request(question=bounded(text, int(load_schema("request")["properties"]["question"]["maxLength"])))
        state = RunState(
            request=req,
            config=cfg,
            pipeline=spec,
            workspace=self.workspace,
            config_version=version,
            services=self,
            started=started,
            created_at=created_at,
            error=exc,
        )
        state.pipelines_run.append(spec.name)
        write_receipt(state)
        assert state.receipt is not None
        with self._after_lock:
            self._note_version(state)
        return RunResult({"items": [], "error": exc.to_dict(), "receipt": state.receipt}, exc)

    def _settle_answers(self) -> None:
        """The bookkeeping of the answers given since the last call (caller holds ``_after_lock``):
        benchmark events and latencies, the cache row and memo, what the flywheel observed. Done by
        :meth:`flush`, or first by whatever needs it sooner (feedback, labels, a cache lookup)."""
        answered, self._answered = self._answered, []
        for state, response in answered:
            self._bookkeep(state, response)

    def _note_version(self, state: RunState) -> None:
        if state.config_version not in self._versions_seen:  # once per version: a set lookup per run
            self._versions_seen.add(state.config_version)
            self._after.append(_NewVersion(state.config, state.pipeline, state.config_version, state.created_at))

    def _bookkeep(self, state: RunState, response: dict[str, Any]) -> None:
        """One answer's events, latencies, cache row and flywheel observation (:meth:`_settle_answers`)."""
        self._note_version(state)
        receipt = state.receipt or {}
        c = state.classification
        question_hash = str(receipt.get("request_hash") or state.request.hash())
        learn = self.flywheel.observed(state, str(receipt.get("receipt_id") or ""))
        if learn is not None:
            self._after.append(learn)
        for name, o in sorted(state.outcomes.items()):
            if o.expert == HINT_LANE:  # read from memory, no expert was called
                continue
            self.latency.observe(o.expert, o.latency_ms, o.status)
            if o.status == "skipped":  # not called (engine.deadlines): no call to record
                continue
            self._after.append(
                BenchmarkEvent(
                    event_id=f"{receipt.get('receipt_id')}:{name}",  # name: the expert, or a lane's key
                    run_id=str(receipt.get("receipt_id")),
                    expert_id=o.expert,
                    arm=self.arm,
                    task_class=c.klass if c else None,
                    question_hash=question_hash,
                    latency_ms=round(o.latency_ms, 3),
                    result_count=len(o.items),
                    precision_class=o.precision_class,
                    status=o.status,
                    config_version=state.config_version,
                    created_at=str(receipt.get("created_at")),
                )
            )
        key = state.cache.get("key")
        # kept only when the receipt says so: complete answers (engine.nodes.cache.not_kept)
        if key and (receipt.get("cache") or {}).get("kept"):
            roots = {p.name: p.root for p in state.workspace.projects}
            cached = CachedAnswer.kept(state.fused, state.fusion_info, state.confidence, roots).to_dict()
            entry = CacheEntry(
                key, cached, not response["items"], str(receipt.get("created_at")), time.time() + CACHE_TTL_S
            )
            self._remember(entry)
            self._after.append(entry)

    def _remember(self, entry: CacheEntry) -> None:
        """Keep a cached answer in memory (caller holds ``_after_lock``: the loop and the flush write it)."""
        self._memo[entry.key] = (entry.expires_at, entry)
        while len(self._memo) > MEMO_SIZE:
            self._memo.pop(next(iter(self._memo)))

    def _memo_get(self, key: str) -> CacheEntry | None:
        if self._answered:  # an answer not flushed yet may be the one asked again
            with self._after_lock:
                self._settle_answers()
        entry = self._memo.get(key)
        if entry is None or entry[0] <= time.time():
            return None
        return entry[1]

    def label_hits(self, run_id: str, hits: dict[str, bool]) -> None:
        """Mark one run's queued benchmark events with whether each expert returned relevant
        evidence. Only a caller that knows relevance (``engine eval``) can say; unlabelled = null."""
        with self._after_lock:
            self._settle_answers()
            self._after = [
                dataclasses.replace(e, hit=hits[e.expert_id])
                if isinstance(e, BenchmarkEvent) and e.run_id == run_id and e.expert_id in hits
                else e
                for e in self._after
            ]

    def flush(self, ingest: bool = True, timeout_s: float = 5.0, last: bool = False) -> None:
        """Off-the-hot-path work: make the receipts durable (the spool's ``fsync``), do the answers'
        bookkeeping (:meth:`_settle_answers`), record events and cache rows, then let the store
        ingest them. A damaged store is logged, never raised:
        the answer is out and its receipt is in the spool (``engine doctor`` says how to repair).
        ``last``: no answer follows (a one-shot ``engine run``), so nothing is read back for the
        next one — with another process holding the store's lock those reads kept the finished
        command alive for a minute after its answer (waiting ``timeout_s`` is all it does)."""
        self.receipt_log.settle()  # the chain hash of the last receipt, for the next one
        try:
            self.store.make_durable()
        except StoreError as exc:
            log.warning("store: %s", exc.message)
        with self._after_lock:
            self._settle_answers()
            pending, self._after = self._after, []
        self._flushes += 1
        self.latency.update()  # this process's own calls, noted as the answers went out
        if self._flushes in SETTLE_AT:
            heap.settle()
        elif self._flushes % TRIM_EVERY == 0:
            heap.trim()
        try:
            self.store.record_events(e for e in pending if isinstance(e, BenchmarkEvent))
            for entry in pending:
                if isinstance(entry, CacheEntry):
                    self.store.cache_put(entry)
                elif isinstance(entry, _NewVersion):  # kept so two versions seen in receipts can be diffed
                    self.store.put_config_snapshot(entry.snapshot())
                elif isinstance(entry, Learn):
                    self.flywheel.learn(entry)
            if ingest:
                self.store.sync(timeout_s=timeout_s)
                # recent latencies of every process on this store, read in a daemon thread; a
                # one-shot `engine run` flushes once and exits, so it never starts one
                if self._flushes > 1:
                    self.latency.refresh_soon()
            if not last:
                self.flywheel.load()  # what the answers asked for and memory lacked: stored hints, arms
        except StoreError as exc:
            log.warning("store: %s", exc.message)
        if self._loaded is not None:  # the screen's new secrets verdicts (no-op when none)
            try:
                policy_for(self.workspace.data_dir, self._loaded.config.raw_experts).save()
            except OSError as exc:
                log.warning("secrets verdict cache not saved: %s", exc)

    async def aclose(self) -> None:
        await self.pool.aclose()
        try:
            self.store.make_durable()  # a caller that never flushed still leaves durable receipts
        except StoreError as exc:
            log.warning("store: %s", exc.message)
        self.store.close()
