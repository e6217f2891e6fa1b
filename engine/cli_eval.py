"""``engine eval SUITE``, ``engine eval compare BASE NEW`` and ``engine bench``: thin typer glue over
:mod:`engine.evaluation` (the work happens there)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from typer.core import TyperGroup

from .cli_options import ConfigDirOpt, WorkspaceOpt, config_ref
from .cli_options import fail as _fail
from .errors import EngineError, SpecError

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
ReportFmt = Annotated[Literal["markdown", "json"], typer.Option("--format", "-f", help="markdown (table) | json")]


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
    limit_queries: Annotated[int | None, typer.Option("--limit-queries", min=1, help="First N queries only")] = None,
    request_limit: Annotated[
        int | None,
        typer.Option(
            "--limit",
            min=1,
            help="Items each question asks for, like `engine run --limit` (default: enough for 10 distinct files)",
        ),
    ] = None,
    budget_ms: Annotated[
        int | None, typer.Option("--budget-ms", min=1, help="budget.latency_ms of every question (a budget sweep)")
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
    drop_unreturnable: Annotated[
        bool,
        typer.Option(
            "--drop-unreturnable",
            help="--workspace: score without gold files the engine cannot return (e.g. withheld by the secrets "
            "policy) instead of refusing; report.md lists them",
        ),
    ] = False,
    fmt: ReportFmt = "markdown",
) -> None:
    """Run every arm over the suite; write metrics.json, TREC runs, report.md and store rows."""
    from .evaluation.report import write_run
    from .evaluation.runner import EvalOptions, run_eval

    opts = EvalOptions(
        suite=suite,
        config_dir=config_ref(config_dir, workspace).path,
        split=split,
        arms=arms.split(",") if arms else None,
        limit_queries=limit_queries,
        request_limit=request_limit,
        budget_ms=budget_ms,
        out=out,
        home=cache_dir,
        pipeline=pipeline,
        doc_ext=doc_ext,
        intent_from_class=intent_from_class,
        warmup=warmup,
        progress=progress,
        workspace=workspace or None,
        drop_unreturnable=drop_unreturnable,
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
    fmt: Annotated[Literal["text", "json"], typer.Option("--format", "-f", help="text | json")] = "text",
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


def bench(
    workspace: WorkspaceOpt = None,
    config_dir: ConfigDirOpt = None,
    questions: Annotated[Path | None, typer.Option(help="One question per line (or JSON lines)")] = None,
    n_questions: Annotated[int, typer.Option("--n-questions", help="Generated questions when no file")] = 30,
    rounds: Annotated[int, typer.Option(min=1, help="Measured passes over the questions")] = 3,
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
        _bench_load(
            workspace,
            config_ref(config_dir, workspace).path,
            questions,
            n_questions,
            data_dir,
            fmt,
            LoadLadder(replicas, concurrency, duration, soak, chaos, store),
        )
        return

    opts = BenchOptions(
        workspaces=workspace or [Path.cwd()],
        config_dir=config_ref(config_dir, workspace).path,
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


@dataclass(frozen=True)
class LoadLadder:
    """``engine bench --load``'s own options, as given on the command line."""

    replicas: str
    concurrency: str
    duration_s: float
    soak_s: float
    chaos_s: float
    store: str | None


def _bench_load(
    workspace: list[Path] | None,
    config_dir: Path,
    questions: Path | None,
    n_questions: int,
    data_dir: Path | None,
    fmt: str,
    ladder: LoadLadder,
) -> None:
    from .evaluation.load_bench import LoadOptions, load_table, run_load

    try:
        opts = LoadOptions(
            workspaces=workspace or [Path.cwd()],
            config_dir=config_dir,
            store=ladder.store,
            data_dir=data_dir,
            replicas=[int(x) for x in ladder.replicas.split(",")],
            concurrency=[int(x) for x in ladder.concurrency.split(",")],
            duration_s=ladder.duration_s,
            soak_s=ladder.soak_s,
            chaos_s=ladder.chaos_s,
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
