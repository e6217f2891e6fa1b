"""The ``engine`` command: thin typer glue over :mod:`engine.runtime` (work happens elsewhere).

Exit codes (docs/cli.md), taken from the error classes of :mod:`engine.errors`:

* 0 — answered (an empty answer included), or the command did what it was asked;
* 2 — the request, the config or the command line is wrong (``InvalidRequest``, ``SpecError``,
  ``EvalError``; click's own usage errors);
* 1 — the router failed (any other ``EngineError``: a receipt that could not be stored, a zero
  expert gate, a failing ``doctor`` check, a receipt that does not verify) — or a bug: anything
  outside the error tree is printed as ``internal_error`` with its traceback on stderr.

Every error goes to stderr as one JSON object (``{"error": code, "message": ...}``).
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Annotated, Any

import anyio
import typer
from typer.core import TyperGroup

from .cli_options import ConfigDirOpt, FormatOpt, WorkspaceOpt, fail, open_workspace
from .cli_store import keys_app, receipts_app, store_app
from .config import load_config
from .errors import EngineError, SpecError
from .render import render
from .schema_bundle import bundled_schema
from .spec import config_dir_for

_fail, _workspace = fail, open_workspace

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Search router: one question in, fused provenanced evidence and a signed receipt out.",
)


def _default_config_dir() -> Path:
    """Config folder for commands that take no pipeline file: $ENGINE_CONFIG_DIR, ./, or the repo's own."""
    env = os.environ.get("ENGINE_CONFIG_DIR")
    if env:
        return Path(env)
    if (Path.cwd() / "experts.yaml").exists():
        return Path.cwd()
    return Path(__file__).resolve().parent.parent


@app.command()
def run(
    pipeline: Annotated[Path, typer.Argument(help="Pipeline file, e.g. pipelines/router.yaml")],
    question: Annotated[str, typer.Option("--question", "-q", help="The question, in plain words.")],
    workspace: WorkspaceOpt = None,
    config_dir: ConfigDirOpt = None,
    intent: Annotated[
        str | None, typer.Option(help="conceptual|identifier|typed-symbol|cross-repo-impact|docs|history|unknown")
    ] = None,
    scope_project: Annotated[str | None, typer.Option("--scope-project")] = None,
    scope_group: Annotated[str | None, typer.Option("--scope-group")] = None,
    scope_path: Annotated[str | None, typer.Option("--scope-path")] = None,
    scope_language: Annotated[str | None, typer.Option("--scope-language")] = None,
    budget_ms: Annotated[int | None, typer.Option("--budget-ms")] = None,
    max_experts: Annotated[int | None, typer.Option("--max-experts")] = None,
    min_precision_class: Annotated[str | None, typer.Option("--min-precision-class")] = None,
    mode: Annotated[str, typer.Option(help="fused | separate")] = "fused",
    limit: Annotated[int, typer.Option(help="Number of items")] = 10,
    fmt: FormatOpt = "markdown",
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Do not read the answer cache.")] = False,
    session_id: Annotated[str | None, typer.Option("--session-id")] = None,
) -> None:
    """Answer one question with a pipeline; prints the answer and its signed receipt."""
    from .runtime import Router

    request: dict[str, Any] = {"question": question, "mode": mode, "limit": limit, "format": fmt, "no_cache": no_cache}
    if intent:
        request["intent"] = intent
    scope = {
        k: v
        for k, v in {
            "project": scope_project,
            "group": scope_group,
            "path": scope_path,
            "language": scope_language,
        }.items()
        if v is not None
    }
    budget = {
        k: v
        for k, v in {
            "latency_ms": budget_ms,
            "max_experts": max_experts,
            "min_precision_class": min_precision_class,
        }.items()
        if v is not None
    }
    if scope:
        request["scope"] = scope
    if budget:
        request["budget"] = budget
    if session_id:
        request["session_id"] = session_id
    try:
        ws = _workspace(workspace)
        router = Router(config_dir_for(pipeline, config_dir), ws)
        result = anyio.run(router.run, pipeline, request)
    except EngineError as exc:
        _fail(exc)
        return
    out_fmt = fmt if fmt in ("json", "markdown", "toon") else "json"
    typer.echo(render(result.response, out_fmt))
    sys.stdout.flush()
    try:
        router.flush(timeout_s=10.0)  # after the answer is out: events, cache rows, DuckDB ingest
    finally:
        anyio.run(router.aclose)
    raise typer.Exit(result.exit_code)


@app.command()
def index(
    workspace: WorkspaceOpt = None,
    config_dir: ConfigDirOpt = None,
    only: Annotated[list[str] | None, typer.Option("--only", help="Index only these experts.")] = None,
    fmt: FormatOpt = "table",
    watch_: Annotated[bool, typer.Option("--watch", help="Keep indexing changes until interrupted.")] = False,
    interval: Annotated[float, typer.Option(help="Seconds between scans with --watch.")] = 0.5,
    executor: Annotated[
        str, typer.Option(help="local | ray: where parsing and embedding run (ray: RAY_ADDRESS or a local cluster)")
    ] = "local",
) -> None:
    """Build or update every index-backed expert's index, incrementally (content hashes)."""
    from .index.executor import make_executor
    from .indexing import index_workspace, watch

    try:
        ws = _workspace(workspace)
        cfg = load_config(config_dir or _default_config_dir())
        if watch_:

            def report(rs: list[Any]) -> None:
                typer.echo(" ".join(f"{r.name}:+{r.added}/-{r.removed}" for r in rs if r.added or r.removed))

            try:
                watch(
                    ws, lambda: load_config(config_dir or _default_config_dir()), interval_s=interval, on_change=report
                )
            except KeyboardInterrupt:
                return
        runner = make_executor(executor)
        try:
            reports = index_workspace(ws, cfg, only=only, progress=fmt != "json", executor=runner)
        finally:
            runner.close()
    except EngineError as exc:
        _fail(exc)
        return
    if fmt == "json":
        typer.echo(json.dumps([r.to_dict() for r in reports], indent=2))
    else:
        for r in reports:
            d = r.to_dict()
            typer.echo(
                f"{d['index']:<10} +{d['added_or_changed']} -{d['removed']} ={d['unchanged']} "
                f"units={d['units']} {d['seconds']}s"
            )


@app.command()
def serve(
    workspace: WorkspaceOpt = None,
    config_dir: ConfigDirOpt = None,
    transport: Annotated[str, typer.Option(help="stdio | http (streamable HTTP at /mcp)")] = "stdio",
    host: Annotated[str, typer.Option(help="HTTP bind address; anything but loopback requires --token")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="HTTP port")] = 8765,
    token: Annotated[
        str | None,
        typer.Option(envvar="ENGINE_MCP_TOKEN", help="HTTP: every request must carry 'Authorization: Bearer TOKEN'"),
    ] = None,
) -> None:
    """Serve every pipeline as an MCP tool (plus feedback and receipt); see docs/serve.md."""
    from .serve import serve as run_server

    try:
        run_server(
            (config_dir or _default_config_dir()).resolve(),
            _workspace(workspace),
            transport=transport,
            host=host,
            port=port,
            token=token,
        )
    except EngineError as exc:
        _fail(exc)
    except KeyboardInterrupt:
        pass


@app.command()
def validate(config_dir: ConfigDirOpt = None) -> None:
    """Validate experts.yaml, priors.yaml and every pipeline graph; report file, path and reason."""
    from .graph import build_graph
    from .nodes.classify import rules_fingerprint

    try:
        cfg = load_config(config_dir or _default_config_dir())
        for spec in cfg.pipelines.values():
            build_graph(spec, cfg)
    except EngineError as exc:
        _fail(exc)
        return
    for _name, spec in sorted(cfg.pipelines.items()):
        typer.echo(f"ok  {spec.file.name:<24} config_version={cfg.config_version(spec, rules_fingerprint())}")


@app.command()
def schema(
    which: Annotated[str, typer.Argument(help="request | response | receipt | experts | priors | pipeline")],
) -> None:
    """Print one of the JSON Schemas every request, answer, receipt and config file validates against
    (self-contained: the schemas it references are bundled under ``$defs``)."""
    try:
        typer.echo(json.dumps(bundled_schema(which), indent=2, ensure_ascii=False))
    except FileNotFoundError:
        _fail(SpecError(f"unknown schema {which!r}; choose request, response, receipt, experts, priors, pipeline"))


@app.command()
def diff(
    a: Annotated[str, typer.Argument(help="Config folder or git revision")],
    b: Annotated[str, typer.Argument(help="Config folder or git revision")],
    repo: Annotated[Path, typer.Option(help="Repo to read revisions from")] = Path("."),
    fmt: FormatOpt = "text",
) -> None:
    """Compare two config sets semantically: priors, experts, pipeline nodes and edges, both hashes."""
    from .diff import diff_configs, format_diff

    try:
        result = diff_configs(a, b, repo)
    except EngineError as exc:
        _fail(exc)
        return
    typer.echo(json.dumps(result, indent=2, ensure_ascii=False) if fmt == "json" else format_diff(result))


@app.command()
def doctor(workspace: WorkspaceOpt = None, config_dir: ConfigDirOpt = None, fmt: FormatOpt = "text") -> None:
    """Check binaries, projects, data dir, signing key, store, config, pipelines and every expert's index."""
    from .doctor import run_doctor

    checks = run_doctor(_workspace(workspace), config_dir or _default_config_dir())
    if fmt == "json":
        typer.echo(json.dumps(checks, indent=2, default=str))
    else:
        for c in checks:
            status = "FAIL" if not c["ok"] else "WARN" if c.get("warn") else "ok  "
            detail = c["detail"]
            if isinstance(detail, list) and c.get("warn"):
                detail = "".join(f"\n       {d}" for d in detail)
            typer.echo(f"{status} {c['check']:<28} {detail}")
    raise typer.Exit(0 if all(c["ok"] for c in checks) else 1)


@app.command()
def tune(
    metrics: Annotated[
        list[Path], typer.Argument(help="metrics.json files from `engine eval` with single-expert arms")
    ],
    config_dir: ConfigDirOpt = None,
    out: Annotated[Path | None, typer.Option("--out", help="Write the proposed priors.yaml here")] = None,
    metric: Annotated[str, typer.Option(help="Metric to weigh experts by")] = "ndcg@10",
    min_queries: Annotated[int, typer.Option(help="Classes with fewer queries are left alone")] = 20,
    fmt: FormatOpt = "text",
) -> None:
    """Propose per-class expert priors from measured single-expert quality (review with `engine diff`)."""
    from .tune import tune as run_tune

    try:
        rows = run_tune(metrics, config_dir or _default_config_dir(), metric=metric, min_queries=min_queries, out=out)
    except EngineError as exc:
        _fail(exc)
        return
    if fmt == "json":
        typer.echo(json.dumps(rows, indent=2))
        return
    for r in rows:
        typer.echo(
            f"{r['class']:<18} {r['expert']:<10} {r['old']!s:>5} → {r['new']!s:>5}   "
            f"({metric} ratio {r['ratio']}, {r['queries']} queries)"
        )


# ---------------------------------------------------------------------------------------------
# engine eval SUITE | engine eval compare BASE NEW | engine bench   (work happens in engine/evaluation)


class _EvalGroup(TyperGroup):
    """``engine eval SUITE`` runs a suite and ``engine eval compare A B`` compares two runs. Click
    parses a group's own arguments before its subcommand name, so a first word that is not a
    subcommand is routed to the ``run`` subcommand instead (``engine eval run SUITE`` works too)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:  # ctx: click's Context (typer vendors click)
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


eval_app = typer.Typer(
    cls=_EvalGroup,
    no_args_is_help=True,
    help="Evaluate the router on a BEIR suite (`engine eval SUITE`) or compare two runs.",
)
app.add_typer(eval_app, name="eval")
ReportFmt = Annotated[str, typer.Option("--format", "-f", help="markdown (table) | json")]


@eval_app.command("run")
def eval_run(
    suite: Annotated[Path, typer.Argument(help="Suite folder: corpus.jsonl[.gz], queries.jsonl, qrels/<split>.tsv")],
    split: Annotated[str, typer.Option(help="qrels split")] = "test",
    workspace: Annotated[
        list[Path] | None,
        typer.Option(
            "--workspace",
            "-w",
            help="Search this live workspace (repeatable) instead of the suite's corpus; qrels name <project>/<path>.",
        ),
    ] = None,
    arms: Annotated[
        str | None,
        typer.Option(
            help="Comma list: router, any expert id, bm25-peer. Default: router, each expert it can select, bm25-peer."
        ),
    ] = None,
    limit_queries: Annotated[int | None, typer.Option("--limit-queries", help="First N queries only")] = None,
    request_limit: Annotated[
        int | None,
        typer.Option(
            "--limit",
            min=1,
            help="Items each question asks for, like `engine run --limit` (default: enough for 10 distinct files)",
        ),
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Run folder (default: <cache-dir>/runs/<suite>-<time>)")] = None,
    config_dir: ConfigDirOpt = None,
    pipeline: Annotated[str, typer.Option(help="Pipeline name or file")] = "router",
    cache_dir: Annotated[
        Path | None,
        typer.Option(
            "--cache-dir",
            help="Eval home: snapshots, arm configs, store (default $ENGINE_EVAL_HOME or ~/.cache/engine-eval)",
        ),
    ] = None,
    doc_ext: Annotated[str, typer.Option("--doc-ext", help="Extension for docs that name no file path")] = ".py",
    intent_from_class: Annotated[
        bool, typer.Option("--intent-from-class", help="Pass each query's gold class as the request intent")
    ] = False,
    warmup: Annotated[
        bool,
        typer.Option(
            "--warmup/--no-warmup",
            help="One untimed question per snapshot and arm first (Router start-up is not a per-question cost)",
        ),
    ] = True,
    progress: Annotated[bool, typer.Option("--progress/--no-progress")] = True,
    fmt: ReportFmt = "markdown",
) -> None:
    """Run every arm over the suite; write metrics.json, TREC runs, report.md and store rows."""
    from .evaluation.report import write_run
    from .evaluation.runner import EvalOptions, run_eval

    opts = EvalOptions(
        suite=suite,
        config_dir=config_dir or _default_config_dir(),
        split=split,
        arms=arms.split(",") if arms else None,
        limit_queries=limit_queries,
        request_limit=request_limit,
        out=out,
        home=cache_dir,
        pipeline=pipeline,
        doc_ext=doc_ext,
        intent_from_class=intent_from_class,
        warmup=warmup,
        progress=progress,
        workspace=workspace or None,
    )
    try:
        run_dir, metrics = write_run(run_eval(opts))
    except EngineError as exc:  # SuiteError and unknown arms are EvalError (exit 2)
        _fail(exc)
        return
    if fmt == "json":
        typer.echo(json.dumps(metrics, indent=1, ensure_ascii=False))
    else:
        typer.echo((run_dir / "report.md").read_text())
    typer.echo(f"run folder: {run_dir}", err=True)


@eval_app.command("compare")
def eval_compare(
    base: Annotated[Path, typer.Argument(help="metrics.json or run folder of the baseline")],
    new: Annotated[Path, typer.Argument(help="metrics.json or run folder of the candidate")],
    latency_floor_ms: Annotated[
        float, typer.Option("--latency-floor-ms", help="Latency rises smaller than this never count (noise)")
    ] = 5.0,
    fmt: Annotated[str, typer.Option("--format", "-f", help="text | json")] = "text",
) -> None:
    """Exit 1 when NEW regresses BASE (p95 +10 %, p99 +20 %, nDCG@10 or selection F1 -0.05 in any class,
    receipts below 100 %)."""
    from .evaluation.compare import compare_paths

    try:
        checks, warnings = compare_paths(base, new, latency_floor_ms)
    except EngineError as exc:
        _fail(exc)
        return
    bad = [c for c in checks if c.regression]
    if fmt == "json":
        typer.echo(
            json.dumps({"regressions": len(bad), "warnings": warnings, "checks": [vars(c) for c in checks]}, indent=1)
        )
    else:
        for w in warnings:
            typer.echo(f"warning: {w}")
        for c in checks:
            typer.echo(c.line())
        typer.echo(f"{len(bad)} regression(s) in {len(checks)} checks")
    raise typer.Exit(1 if bad else 0)


@app.command()
def bench(
    workspace: WorkspaceOpt = None,
    config_dir: ConfigDirOpt = None,
    questions: Annotated[Path | None, typer.Option(help="One question per line (or JSON lines)")] = None,
    n_questions: Annotated[int, typer.Option("--n-questions", help="Generated questions when no file")] = 30,
    rounds: Annotated[int, typer.Option(help="Measured passes over the questions")] = 3,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            "--data-dir",
            help="Index/store here (default: a fresh "
            "temporary dir, so the cold index build is measured and your index is untouched)",
        ),
    ] = None,
    freshness: Annotated[
        bool,
        typer.Option(
            "--freshness/--no-freshness", help="Save a probe file in the workspace to time save-to-searchable"
        ),
    ] = True,
    fmt: ReportFmt = "markdown",
    load: Annotated[
        bool, typer.Option("--load", help="Load ladder over replicas sharing one PostgreSQL store (docs/scale.md)")
    ] = False,
    replicas: Annotated[str, typer.Option(help="--load: replica counts, comma list")] = "1,3",
    concurrency: Annotated[str, typer.Option(help="--load: MCP client counts, comma list")] = "1,10,50",
    duration: Annotated[float, typer.Option(help="--load: seconds per ladder cell")] = 60.0,
    soak: Annotated[float, typer.Option(help="--load: seconds of soak at 3 replicas (0: none)")] = 0.0,
    chaos: Annotated[float, typer.Option(help="--load: seconds per chaos cell (0: no chaos slice)")] = 0.0,
    store: Annotated[
        str | None, typer.Option(help="--load: postgresql:// URL (default: a throwaway local cluster)")
    ] = None,
) -> None:
    """Router overhead, per-expert latency, warm end-to-end latency, index throughput, save-to-searchable
    time and peak RSS on one workspace; with --load, the load ladder, soak and chaos slice instead."""
    from .evaluation.bench import BenchOptions, bench_table, run_bench

    if load:
        _bench_load(workspace, config_dir, questions, n_questions, data_dir, fmt, replicas, concurrency, duration,
                    soak, chaos, store)  # fmt: skip
        return

    opts = BenchOptions(
        workspaces=workspace or [Path.cwd()],
        config_dir=config_dir or _default_config_dir(),
        questions_file=questions,
        n_questions=n_questions,
        rounds=rounds,
        data_dir=data_dir,
        freshness=freshness,
        progress=fmt != "json",
    )
    try:
        result = run_bench(opts)
    except EngineError as exc:
        _fail(exc)
        return
    typer.echo(json.dumps(result, indent=1) if fmt == "json" else bench_table(result))


def _bench_load(
    workspace: list[Path] | None,
    config_dir: Path | None,
    questions: Path | None,
    n_questions: int,
    data_dir: Path | None,
    fmt: str,
    replicas: str,
    concurrency: str,
    duration: float,
    soak: float,
    chaos: float,
    store: str | None,
) -> None:
    from .evaluation.load_bench import LoadOptions, load_table, run_load

    try:
        opts = LoadOptions(
            workspaces=workspace or [Path.cwd()],
            config_dir=config_dir or _default_config_dir(),
            store=store,
            data_dir=data_dir,
            replicas=[int(x) for x in replicas.split(",")],
            concurrency=[int(x) for x in concurrency.split(",")],
            duration_s=duration,
            soak_s=soak,
            chaos_s=chaos,
            questions_file=questions,
            n_questions=n_questions,
            log=lambda m: typer.echo(m, err=True),
        )
        result = run_load(opts)
    except ValueError as exc:
        _fail(SpecError(f"--replicas and --concurrency are comma lists of integers: {exc}"))
        return
    except EngineError as exc:
        _fail(exc)
        return
    typer.echo(json.dumps(result, indent=1) if fmt == "json" else load_table(result))


app.add_typer(receipts_app, name="receipts")
app.add_typer(keys_app, name="keys")
app.add_typer(store_app, name="store")


def main() -> None:
    """The console script: every exit is 0, 1 or 2 (see the module docstring)."""
    try:
        app(standalone_mode=True)
    except EngineError as exc:  # one a command did not catch itself
        typer.echo(json.dumps(exc.to_dict(), ensure_ascii=False), err=True)
        sys.exit(exc.exit_code)
    except Exception as exc:  # noqa: BLE001 - a bug: say so in the same shape, keep the traceback for the report
        traceback.print_exc()
        message = f"{type(exc).__name__}: {exc}"
        typer.echo(json.dumps({"error": "internal_error", "message": message}, ensure_ascii=False), err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
