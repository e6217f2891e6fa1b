"""The one API every surface uses (CLI, MCP server, eval): ``Router.run(pipeline, request)``.

A Router owns the config (hot-reloaded: the files' mtimes are checked on every run; a bad edit
is reported and the last good config keeps serving), the expert pool, the store and the
signing key. It hands each run to the scheduler and is, to the nodes, the
:class:`~engine.nodes.base.Services` they may ask for (an expert, the answer cache, the clock,
signing, chaining and storing the receipt through the receipt log) — the only place nodes reach
the store. Work that can happen after the answer (benchmark events, cache rows, DuckDB
ingestion) is queued and done by :meth:`Router.flush`, which surfaces call once the answer is
out; a damaged store is logged there, never raised (the receipt is already durable in the spool).

Every request gets a receipt: a request that fails validation (empty, wrong types, undecodable
text) is answered with ``invalid_request`` and a receipt whose request is the escaped input.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .config import load_config
from .errors import EngineError, InvalidRequest, ReceiptError, SpecError, StoreError
from .experts import Expert, ExpertEnv, adapter_class
from .graph import PipelineGraph, build_graph
from .index.build import read_head
from .items import CachedAnswer
from .keys import KeyRing
from .nodes.base import RunState
from .nodes.classify import rules_fingerprint
from .nodes.receipt import write_receipt
from .receipts import ReceiptLog
from .scheduler import run_graph
from .secrets import policy_for
from .spec import ConfigSet, ExpertSpec, PipelineSpec, escape_undecodable, parse_request
from .store import BenchmarkEvent, CacheEntry, Store, open_store
from .types import Request, canonical_json, sha256_hex
from .workspace import Workspace, check_scope_path

log = logging.getLogger("engine")
CACHE_TTL_S = float(os.environ.get("ENGINE_CACHE_TTL_S", "300"))
MEMO_SIZE = 256


class ExpertPool:
    """Expert instances by name, rebuilt only when their spec changes (sessions survive reloads)."""

    def __init__(self, env: ExpertEnv) -> None:
        self.env = env
        self._experts: dict[str, tuple[ExpertSpec, Expert]] = {}
        self._retired: list[Expert] = []
        self.config: ConfigSet | None = None

    def sync(self, config: ConfigSet) -> None:
        self.config = config
        for name in list(self._experts):
            spec, inst = self._experts[name]
            if config.experts.get(name) != spec:
                self._retired.append(inst)
                del self._experts[name]

    def get(self, name: str) -> Expert:
        if name not in self._experts:
            assert self.config is not None
            spec = self.config.experts[name]
            self._experts[name] = (spec, adapter_class(spec.adapter)(spec, self.env))
        return self._experts[name][1]

    def inject(self, name: str, expert: Expert) -> None:
        """Use a ready-made instance for ``name`` (scheduler tests inject FakeExpert handlers)."""
        assert self.config is not None
        self._experts[name] = (self.config.experts[name], expert)

    async def close_retired(self) -> None:
        """Close instances replaced by a config reload (their server processes end now, not at exit)."""
        retired, self._retired = self._retired, []
        for inst in retired:
            try:
                await inst.aclose()
            except Exception:  # noqa: BLE001 - closing must not fail a request
                log.exception("closing expert %s", inst.name)

    async def aclose(self) -> None:
        for inst in self._retired + [i for _, i in self._experts.values()]:
            try:
                await inst.aclose()
            except Exception:  # noqa: BLE001 - closing must not mask the answer
                log.exception("closing expert %s", inst.name)
        self._experts.clear()
        self._retired.clear()


@dataclass
class RunResult:
    response: dict[str, Any]
    error: EngineError | None = None

    @property
    def exit_code(self) -> int:
        return 0 if self.error is None else self.error.exit_code


@dataclass
class _Loaded:
    config: ConfigSet
    stamp: tuple[tuple[str, int], ...]
    graphs: dict[str, PipelineGraph] = field(default_factory=dict)


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
        self._after: list[BenchmarkEvent | CacheEntry] = []
        self._after_lock = threading.Lock()  # run() appends on the loop, flush() may drain from a thread
        # answers this process cached itself: a long-lived server skips the DuckDB open (~15-35 ms)
        self._memo: dict[str, tuple[float, CacheEntry]] = {}

    # ------------------------------------------------------------------ config (hot reload)
    def _stamp(self) -> tuple[tuple[str, int], ...]:
        files = [
            self.config_dir / "experts.yaml",
            self.config_dir / "priors.yaml",
            *sorted((self.config_dir / "pipelines").glob("*.yaml")),
        ]
        out = []
        for f in files:
            try:
                out.append((f.name, f.stat().st_mtime_ns))
            except OSError:
                out.append((f.name, -1))
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

    def store_receipt(self, receipt: dict[str, Any]) -> dict[str, Any]:
        """Sign, chain and durably store one receipt body: the one place a receipt reaches the store."""
        try:
            return self.receipt_log.append(receipt)
        except EngineError:
            raise
        except Exception as exc:  # noqa: BLE001 - any signing/storage failure fails the request
            raise ReceiptError(f"receipt could not be signed and stored: {type(exc).__name__}: {exc}") from exc

    def cache_key(self, request: Request, config_version: str) -> str:
        heads = [read_head(p.root) for p in self.workspace.projects if p.is_git]
        manifests = []
        index_root = self.workspace.data_dir / "index"
        for m in sorted(index_root.glob("*/manifest.json")) if index_root.exists() else []:
            with contextlib.suppress(OSError):
                manifests.append((m.parent.name, m.stat().st_mtime_ns))
        return sha256_hex(canonical_json([config_version, request.hash(), self.workspace.key(), heads, manifests]))

    def cached_answer(self, key: str) -> CachedAnswer | None:
        try:
            hit = self._memo_get(key)
            if hit is None:
                hit = self.store.cache_get(key)
                if hit is not None:  # a long-lived router (serve, the CLI daemon) reads the store once per key
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
        created_at = datetime.now(UTC).isoformat(timespec="milliseconds")
        started = self.clock()
        loaded = self._current()  # one config version for the whole run, sub-pipelines included
        cfg = loaded.config
        spec = self._resolve(cfg, pipeline)
        await self.pool.close_retired()
        version = cfg.config_version(spec, rules_fingerprint())
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
        response: dict[str, Any] = {"items": [it.to_dict() for it in state.fused]}
        if state.request.mode == "separate":
            response["separate"] = state.separate
        if state.confidence is not None:
            response["confidence"] = state.confidence.to_dict()
        if state.error is not None:
            response["error"] = state.error.to_dict()
        response["receipt"] = state.receipt
        self._queue_after(state, response)
        return RunResult(response, state.error)

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
        # undecodable text is receipted escaped: the signed body must be valid UTF-8 JSON
        req = Request(question=escape_undecodable(question) if isinstance(question, str) else "")
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
        return RunResult({"items": [], "error": exc.to_dict(), "receipt": state.receipt}, exc)

    def _queue_after(self, state: RunState, response: dict[str, Any]) -> None:
        with self._after_lock:
            self._queue_after_locked(state, response)

    def _queue_after_locked(self, state: RunState, response: dict[str, Any]) -> None:
        receipt = state.receipt or {}
        c = state.classification
        for name, o in sorted(state.outcomes.items()):
            self._after.append(
                BenchmarkEvent(
                    event_id=f"{receipt.get('receipt_id')}:{name}",
                    run_id=str(receipt.get("receipt_id")),
                    expert_id=name,
                    arm=self.arm,
                    task_class=c.klass if c else None,
                    question_hash=state.request.hash(),
                    latency_ms=round(o.latency_ms, 3),
                    result_count=len(o.items),
                    precision_class=o.precision_class,
                    status=o.status,
                    config_version=state.config_version,
                    created_at=str(receipt.get("created_at")),
                )
            )
        key = state.cache.get("key")
        if key and not state.cache.get("hit") and state.error is None:
            cached = CachedAnswer(tuple(state.fused), state.fusion_info, state.confidence).to_dict()
            entry = CacheEntry(
                key, cached, not response["items"], str(receipt.get("created_at")), time.time() + CACHE_TTL_S
            )
            self._remember(entry)
            self._after.append(entry)

    def _remember(self, entry: CacheEntry) -> None:
        self._memo[entry.key] = (entry.expires_at, entry)
        while len(self._memo) > MEMO_SIZE:
            self._memo.pop(next(iter(self._memo)))

    def _memo_get(self, key: str) -> CacheEntry | None:
        entry = self._memo.get(key)
        if entry is None or entry[0] <= time.time():
            return None
        return entry[1]

    def label_hits(self, run_id: str, hits: dict[str, bool]) -> None:
        """Mark one run's queued benchmark events with whether each expert returned relevant
        evidence. Only a caller that knows relevance (``engine eval``) can say; unlabelled = null."""
        with self._after_lock:
            self._after = [
                dataclasses.replace(e, hit=hits[e.expert_id])
                if isinstance(e, BenchmarkEvent) and e.run_id == run_id and e.expert_id in hits
                else e
                for e in self._after
            ]

    def flush(self, ingest: bool = True, timeout_s: float = 5.0) -> None:
        """Off-the-hot-path work: record events and cache rows, then let the store ingest them.
        A damaged store is logged, never raised: the answer is out and its receipt is durable in
        the spool (``engine doctor`` says how to repair)."""
        with self._after_lock:
            pending, self._after = self._after, []
        try:
            self.store.record_events(e for e in pending if isinstance(e, BenchmarkEvent))
            for entry in pending:
                if isinstance(entry, CacheEntry):
                    self.store.cache_put(entry)
            if ingest:
                self.store.sync(timeout_s=timeout_s)
        except StoreError as exc:
            log.warning("store: %s", exc.message)

    async def aclose(self) -> None:
        await self.pool.aclose()
        self.store.close()
