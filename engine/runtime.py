"""The one API every surface uses (CLI, MCP server, eval): ``Router.run(pipeline, request)``.

A Router owns the config (hot-reloaded: the files' mtimes are checked on every run; a bad edit
is reported and the last good config keeps serving), the expert pool, the store and the
signing key. Work that can happen after the answer (benchmark events, cache rows, DuckDB
ingestion) is queued and done by :meth:`Router.flush`, which surfaces call once the answer is
out.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nacl.signing import SigningKey

from .errors import EngineError, InvalidRequest, SpecError
from .experts import Expert, ExpertEnv, adapter_class
from .fusion import item_id
from .graph import PipelineGraph, build_graph
from .index.build import read_head
from .nodes.base import FusedItem, RunState
from .nodes.classify import classify, rules_fingerprint
from .nodes.receipt import write_receipt
from .receipts import load_or_create_key
from .scheduler import run_graph
from .secrets import policy_for
from .spec import ConfigSet, ExpertSpec, PipelineSpec, load_config, parse_request
from .store import Store
from .types import Evidence, Request, canonical_json, sha256_hex
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

    def all(self, config: ConfigSet) -> list[Expert]:
        self.sync(config)
        return [self.get(n) for n in sorted(config.experts)]

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
        self, config_dir: Path, workspace: Workspace, *, arm: str = "router", store: Store | None = None
    ) -> None:
        """``arm`` labels this router's benchmark events (eval runs one Router per arm); ``store``
        lets several routers (one per eval snapshot) share one store."""
        self.config_dir = config_dir.resolve()
        self.workspace = workspace
        self.arm = arm
        self.store = store if store is not None else Store(workspace.data_dir)
        self.pool = ExpertPool(ExpertEnv(workspace))
        self._key: SigningKey | None = None
        self._loaded: _Loaded | None = None
        self.last_reload_error: SpecError | None = None
        self._after: list[tuple[str, dict[str, Any], bool]] = []
        self._after_lock = threading.Lock()  # run() appends on the loop, flush() may drain from a thread
        # answers this process cached itself: a long-lived server skips the DuckDB open (~15-35 ms)
        self._memo: dict[str, tuple[float, dict[str, Any]]] = {}

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
        stamp = self._stamp()
        if self._loaded is not None and self._loaded.stamp == stamp:
            return self._loaded.config
        try:
            cfg = load_config(self.config_dir)
            for spec in cfg.pipelines.values():  # validate every graph before accepting the config
                build_graph(spec, cfg)
        except SpecError as exc:
            if self._loaded is None:
                raise
            self.last_reload_error = exc
            log.error("config reload rejected, still serving config %s: %s", self._loaded.config.root, exc.message)
            self._loaded.stamp = stamp  # do not retry until the files change again
            return self._loaded.config
        self.last_reload_error = None
        self._loaded = _Loaded(cfg, stamp)
        self.pool.sync(cfg)
        return cfg

    def graph(self, spec: PipelineSpec) -> PipelineGraph:
        self.config()
        assert self._loaded is not None
        if spec.name not in self._loaded.graphs:
            self._loaded.graphs[spec.name] = build_graph(spec, self._loaded.config)
        return self._loaded.graphs[spec.name]

    def resolve_pipeline(self, pipeline: str | Path) -> PipelineSpec:
        cfg = self.config()
        if isinstance(pipeline, str) and pipeline in cfg.pipelines:
            return cfg.pipelines[pipeline]
        path = Path(pipeline)
        if not path.exists():
            raise SpecError(f"pipeline {pipeline!r} not found; pipelines: {sorted(cfg.pipelines)}")
        return cfg.pipeline_by_file(path)

    # ------------------------------------------------------------------ services used by nodes
    def signing_key(self) -> SigningKey:
        if self._key is None:
            self._key = load_or_create_key(self.workspace.data_dir)
        return self._key

    async def run_pipeline_in(self, state: RunState, spec: PipelineSpec) -> None:
        await run_graph(self.graph(spec), state)

    # ------------------------------------------------------------------ the API
    async def run(self, pipeline: str | Path, request: Request | dict[str, Any]) -> RunResult:
        created_at = datetime.now(UTC).isoformat(timespec="milliseconds")
        started = time.perf_counter()
        spec = self.resolve_pipeline(pipeline)
        cfg = self.config()
        await self.pool.close_retired()
        version = cfg.config_version(spec, rules_fingerprint())
        try:
            req = request if isinstance(request, Request) else parse_request(request)
            projects = self.workspace.scoped_projects(req.scope, dict(cfg.priors.groups))  # validates project/group
            # a scope path that resolves outside its project (symlinks too) or names a withheld file
            policy = policy_for(self.workspace.data_dir, cfg.raw_experts)
            check_scope_path(projects, req.scope.path, policy, self.workspace.data_dir)
        except InvalidRequest as exc:
            return await self._receipted_failure(spec, cfg, version, request, exc, created_at)
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
        if not req.no_cache and req.mode == "fused":
            key = self._cache_key(version, req)
            state.cache = {"hit": False, "key": key}
            hit = self._memo_get(key) or self.store.lookup_cache(key)
            if hit is not None:
                state.cache["hit"] = True
                state.classification = classify(req.question, cfg.priors.abstain_below)
                state.fused = [FusedItem(it, it["score"]) for it in hit["response"]["items"]]
                state.fusion_info = hit["response"].get("fusion", {})
                state.confidence = hit["response"].get("confidence", {})
                state.pipelines_run.append(spec.name)
                write_receipt(state)
                return self._finish(state)
        await run_graph(self.graph(spec), state)
        if state.receipt is None:  # a pipeline without a receipt node still gets one: no unlogged path
            write_receipt(state)
        return self._finish(state)

    def _finish(self, state: RunState) -> RunResult:
        assert state.receipt is not None
        response: dict[str, Any] = {"items": [f.item for f in state.fused]}
        if state.request.mode == "separate":
            response["separate"] = separate_lists(state)
        if state.confidence:
            response["confidence"] = state.confidence
        if state.error is not None:
            response["error"] = state.error.to_dict()
        response["receipt"] = state.receipt
        self._queue_after(state, response)
        return RunResult(response, state.error)

    async def _receipted_failure(
        self, spec: PipelineSpec, cfg: ConfigSet, version: str, raw: Any, exc: InvalidRequest, created_at: str
    ) -> RunResult:
        question = raw.get("question") if isinstance(raw, dict) else None
        req = Request(question=question if isinstance(question, str) else "")
        state = RunState(
            request=req,
            config=cfg,
            pipeline=spec,
            workspace=self.workspace,
            config_version=version,
            services=self,
            created_at=created_at,
            error=exc,
        )
        state.pipelines_run.append(spec.name)
        write_receipt(state)
        assert state.receipt is not None
        return RunResult({"items": [], "error": exc.to_dict(), "receipt": state.receipt}, exc)

    def _cache_key(self, version: str, req: Request) -> str:
        heads = [read_head(p.root) for p in self.workspace.projects if p.is_git]
        manifests = []
        index_root = self.workspace.data_dir / "index"
        for m in sorted(index_root.glob("*/manifest.json")) if index_root.exists() else []:
            with contextlib.suppress(OSError):
                manifests.append((m.parent.name, m.stat().st_mtime_ns))
        return sha256_hex(canonical_json([version, req.hash(), self.workspace.key(), heads, manifests]))

    def _queue_after(self, state: RunState, response: dict[str, Any]) -> None:
        with self._after_lock:
            self._queue_after_locked(state, response)

    def _queue_after_locked(self, state: RunState, response: dict[str, Any]) -> None:
        receipt = state.receipt or {}
        c = state.classification
        for name, o in sorted(state.outcomes.items()):
            self._after.append(
                (
                    "tool_benchmark_events",
                    {
                        "event_id": f"{receipt.get('receipt_id')}:{name}",
                        "run_id": receipt.get("receipt_id"),
                        "expert_id": name,
                        "arm": self.arm,
                        "task_class": c.klass if c else None,
                        "question_hash": state.request.hash(),
                        "latency_ms": round(o.latency_ms, 3),
                        "result_count": len(o.items),
                        "precision_class": o.precision_class,
                        "status": o.status,
                        "hit": None,
                        "config_version": state.config_version,
                        "created_at": receipt.get("created_at"),
                    },
                    False,
                )
            )
        key = state.cache.get("key")
        if key and not state.cache.get("hit") and state.error is None:
            cached = {"items": response["items"], "fusion": state.fusion_info, "confidence": state.confidence}
            expires = time.time() + CACHE_TTL_S
            self._memo[key] = (expires, {"response": cached, "negative": not response["items"]})
            while len(self._memo) > MEMO_SIZE:
                self._memo.pop(next(iter(self._memo)))
            self._after.append(
                (
                    "cache",
                    {
                        "cache_key": key,
                        "created_at": receipt.get("created_at"),
                        "expires_at": expires,
                        "negative": not response["items"],
                        "response": cached,
                    },
                    False,
                )
            )

    def _memo_get(self, key: str) -> dict[str, Any] | None:
        entry = self._memo.get(key)
        if entry is None or entry[0] <= time.time():
            return None
        return entry[1]

    def label_hits(self, run_id: str, hits: dict[str, bool]) -> None:
        """Mark one run's queued benchmark events with whether each expert returned relevant
        evidence. Only a caller that knows relevance (``engine eval``) can say; unlabelled = null."""
        with self._after_lock:
            for table, row, _ in self._after:
                if table == "tool_benchmark_events" and row["run_id"] == run_id and row["expert_id"] in hits:
                    row["hit"] = hits[row["expert_id"]]

    def flush(self, ingest: bool = True, timeout_s: float = 5.0) -> None:
        """Off-the-hot-path work: spool events and cache rows, then move the spool into DuckDB."""
        with self._after_lock:
            pending, self._after = self._after, []
        for table, row, durable in pending:
            self.store.append(table, row, durable=durable)
        if ingest:
            self.store.ingest(timeout_s=timeout_s)

    async def aclose(self) -> None:
        await self.pool.aclose()
        self.store.close()


def separate_lists(state: RunState) -> dict[str, Any]:
    """mode=separate: each expert's own list, labelled, no cross-expert fusion."""
    snippet = state.config.priors.fusion.snippet_chars
    out: dict[str, Any] = {}
    for name, o in sorted(state.outcomes.items()):
        items = []
        for rank, scored in enumerate(state.scored.get(name, []), start=1):
            e: Evidence = scored["evidence"]
            it: dict[str, Any] = {
                "id": item_id(e),
                "rank": rank,
                "path": e.path,
                "project": e.project,
                "range": {"start_line": e.start_line, "end_line": e.end_line},
                "kind": e.kind,
                "content": e.content[:snippet],
                "score": round(float(e.score), 4),
                "subscores": scored["subscores"],
                "flags": scored["flags"],
            }
            if e.symbol:
                it["symbol"] = e.symbol
            if e.meta:
                it["meta"] = dict(e.meta)
            items.append(it)
            if rank >= state.request.limit:
                break
        out[name] = {"status": o.status, "precision_class": o.precision_class, "items": items}
        if o.error:
            out[name]["error"] = o.error
    return out
