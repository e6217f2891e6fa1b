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
import re
import sys
import traceback
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
import typer

from .cli_daemon import daemon_app
from .cli_eval import bench, eval_app
from .cli_options import (
    AnswerFormatOpt,
    ConfigDirOpt,
    TableFormatOpt,
    WorkspaceOpt,
    config_ref,
    fail,
    open_workspace,
)
from .cli_store import keys_app, receipts_app, store_app
from .config import load_config
from .errors import EngineError, SpecError
from .render import render_table
from .schema_bundle import bundled_schema

_fail, _workspace = fail, open_workspace

SCHEMAS = ("request", "response", "receipt", "experts", "priors", "classifier", "pipeline", "workspace")
INDEX_COLUMNS = ("index", "added_or_changed", "removed", "unchanged", "units", "seconds")

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Search router: one question in, fused provenanced evidence and a signed receipt out.",
)


@app.command()
def run(
    pipeline: Annotated[
        str,
        typer.Argument(help="Pipeline name (router, identifier, docs …) or file; works from any directory"),
    ],
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
    fmt: AnswerFormatOpt = "markdown",
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Do not read the answer cache.")] = False,
    session_id: Annotated[str | None, typer.Option("--session-id")] = None,
    no_daemon: Annotated[
        bool,
        typer.Option(
            "--no-daemon",
            help="Answer in this process instead of the workspace's background daemon (same output; "
            "also ENGINE_NO_DAEMON=1). See `engine daemon`.",
        ),
    ] = False,
) -> None:
    """Answer one question with a pipeline; prints the answer and its signed receipt.

    Called from a shell, the answer comes from a per-workspace background daemon that keeps the
    router warm (started on first use, stopped after $ENGINE_DAEMON_IDLE_S idle seconds); this
    in-process path is what the daemon runs and what --no-daemon runs here.
    """
    from .cli_run import RunCall, answer_reply, error_reply
    from .daemon import emit
    from .runtime import Router

    call = RunCall.from_params(locals())
    try:
        roots, ref, target = call.locate(Path.cwd(), os.environ)
        router = Router(ref.path, _workspace(roots), config_source=ref.source)
        result = anyio.run(router.run, target, call.request)
    except EngineError as exc:
        reply = error_reply(exc)
        emit(reply.stdout, reply.stderr)
        raise typer.Exit(reply.code) from None
    reply = answer_reply(result.response, result.exit_code, call.fmt)
    emit(reply.stdout, reply.stderr)
    try:
        # after the answer is out: events, cache rows, DuckDB ingest. The receipt is already durable
        # in the spool; with the store's lock held elsewhere its ingest is left to the next process
        # after a short wait (an agent waits for this command to exit, not only for its answer)
        router.flush(timeout_s=3.0, last=True)
    finally:
        anyio.run(router.aclose)
    raise typer.Exit(reply.code)


@app.command()
def index(
    workspace: WorkspaceOpt = None,
    config_dir: ConfigDirOpt = None,
    only: Annotated[list[str] | None, typer.Option("--only", help="Index only these experts.")] = None,
    fmt: TableFormatOpt = "text",
    watch_: Annotated[bool, typer.Option("--watch", help="Keep indexing changes until interrupted.")] = False,
    interval: Annotated[float, typer.Option(help="Seconds between scans with --watch.", min=0.05)] = 0.5,
    background: Annotated[
        bool,
        typer.Option(
            "--background/--wait",
            help="Embeddings (semantic) catch up in a background process once the other indexes are "
            "searchable (default), or wait for every index.",
        ),
    ] = True,
    executor: Annotated[
        str, typer.Option(help="local | ray: where parsing and embedding run (ray: RAY_ADDRESS or a local cluster)")
    ] = "local",
) -> None:
    """Build or update every index-backed expert's index, incrementally (content hashes)."""
    from .index.executor import make_executor
    from .indexing import index_workspace, watch

    try:
        ws = _workspace(workspace)
        ref = config_ref(config_dir, workspace)
        cfg = load_config(ref.path)
        if watch_:

            def report(rs: list[Any]) -> None:
                typer.echo(" ".join(f"{r.name}:+{r.added}/-{r.removed}" for r in rs if r.added or r.removed))

            try:
                watch(ws, lambda: load_config(ref.path), interval_s=interval, on_change=report)
            except KeyboardInterrupt:
                return
        runner = make_executor(executor)
        try:
            reports = index_workspace(
                ws, cfg, only=only, progress=fmt == "text", background=background, executor=runner
            )
        finally:
            runner.close()
    except EngineError as exc:
        _fail(exc)
        return
    rows = [r.to_dict() for r in reports]
    typer.echo(render_table(rows, INDEX_COLUMNS, fmt))
    for d in rows:  # what is still indexing: a note under the table (json carries it in the rows; a
        bg = d.get("background")  # markdown or toon table stays parseable: the note goes to stderr)
        if bg and fmt != "json":
            typer.echo(
                f"{d['index']}: {bg['files_pending']} files indexing in the background (pid {bg['pid']}); "
                f"answers say partial until done; log {bg['log']}; `engine index --wait` waits for it",
                err=fmt != "text",
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
        ref = config_ref(config_dir, workspace)
        run_server(
            ref.path,
            _workspace(workspace),
            config_source=ref.source,
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
def validate(config_dir: ConfigDirOpt = None, workspace: WorkspaceOpt = None) -> None:
    """Validate experts.yaml, priors.yaml and every pipeline graph; report file, line, path and reason."""
    from .graph import build_graph

    try:
        ref = config_ref(config_dir, workspace)
        cfg = load_config(ref.path)
        for spec in cfg.pipelines.values():
            build_graph(spec, cfg)
    except EngineError as exc:
        _fail(exc)
        return
    typer.echo(f"config {ref.path} ({ref.source})")
    for _name, spec in sorted(cfg.pipelines.items()):
        typer.echo(f"ok  {spec.file.name:<24} config_version={cfg.config_version(spec)}")


@app.command()
def schema(which: Annotated[str, typer.Argument(help=" | ".join(SCHEMAS))]) -> None:
    """Print one of the JSON Schemas every request, answer, receipt and config file validates against
    (self-contained: the schemas it references are bundled under ``$defs``)."""
    if which not in SCHEMAS:
        _fail(SpecError(f"unknown schema {which!r}; choose {', '.join(SCHEMAS)}"))
    typer.echo(json.dumps(bundled_schema(which), indent=2, ensure_ascii=False))


@app.command()
def diff(
    a: Annotated[str, typer.Argument(help="Config folder or git revision")],
    b: Annotated[str, typer.Argument(help="Config folder or git revision")],
    repo: Annotated[Path, typer.Option(help="Repo to read revisions from")] = Path("."),
    fmt: Annotated[Literal["text", "json"], typer.Option("--format", "-f", help="text | json")] = "text",
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
def doctor(workspace: WorkspaceOpt = None, config_dir: ConfigDirOpt = None, fmt: TableFormatOpt = "text") -> None:
    """Check binaries, projects, data dir, signing key, store, config, pipelines and every expert's index."""
    from .doctor import run_doctor

    try:
        ws, ref = _workspace(workspace), config_ref(config_dir, workspace)
    except EngineError as exc:
        _fail(exc)
        return
    checks = run_doctor(ws, ref.path)
    if fmt == "text":
        for c in checks:
            status = "FAIL" if not c["ok"] else "WARN" if c.get("warn") else "ok  "
            detail = c["detail"]
            if isinstance(detail, list) and c.get("warn"):
                detail = "".join(f"\n       {d}" for d in detail)
            typer.echo(f"{status} {c['check']:<28} {detail}")
    else:
        rows = [{**c, "status": "fail" if not c["ok"] else "warn" if c.get("warn") else "ok"} for c in checks]
        typer.echo(render_table(rows, ("status", "check", "detail"), fmt, data=checks))
    raise typer.Exit(0 if all(c["ok"] for c in checks) else 1)


@app.command()
def tune(
    metrics: Annotated[
        list[Path],
        typer.Argument(
            help="metrics.json files from `engine eval` with single-expert arms (with --rerank: eval run folders "
            "of dev splits)"
        ),
    ],
    config_dir: ConfigDirOpt = None,
    out: Annotated[Path | None, typer.Option("--out", help="Write the proposed priors.yaml here")] = None,
    metric: Annotated[str, typer.Option(help="Metric to weigh experts by")] = "ndcg@10",
    min_queries: Annotated[
        int,
        typer.Option(
            min=1, help="Classes with fewer queries are left alone (--confidence: fewer questions in all is an error)"
        ),
    ] = 20,
    rerank: Annotated[
        bool, typer.Option("--rerank", help="Fit the rerank weight sets (priors.yaml rerank) from eval runs instead")
    ] = False,
    confidence: Annotated[
        bool,
        typer.Option("--confidence", help="Fit the confidence model (priors.yaml confidence) from eval runs instead"),
    ] = False,
    fmt: TableFormatOpt = "text",
    release: Annotated[
        Path | None,
        typer.Option(
            "--release",
            help="Ship the proposal as a gated config version: a copy of the config folder here with the new "
            "priors.yaml, `engine diff` against the current one, and `engine eval compare` of the router on --suite's "
            "dev split as the gate",
        ),
    ] = None,
    suite: Annotated[Path | None, typer.Option("--suite", help="--release: the suite whose dev split gates")] = None,
    split: Annotated[str, typer.Option("--split", help="--release: the gate's split (dev splits only)")] = "dev",
    workspace: Annotated[
        list[Path] | None, typer.Option("--workspace", "-w", help="--release: the suite's live workspace, if any")
    ] = None,
    adopt: Annotated[
        bool,
        typer.Option("--adopt", help="--release: replace priors.yaml when the gate passes (old kept as .previous)"),
    ] = False,
) -> None:
    """Propose per-class expert priors from measured single-expert quality, or (``--rerank``) fit the
    rerank node's weights on eval runs of dev splits (review with `engine diff`); ``--release`` ships
    the proposal as a config version gated by `engine eval compare` on a dev split."""
    from .tune import tune as run_tune
    from .tune import tune_confidence_file, tune_rerank_file
    from .tune_release import check_dev_metrics

    if release is not None:
        _tune_release(
            metrics,
            config_ref(config_dir, None).path,
            release,
            suite,
            split,
            workspace,
            adopt,
            metric,
            fmt,
            min_queries,
        )
        return

    if (rerank or confidence) and fmt not in ("text", "json"):  # nested reports: no table form
        _fail(SpecError(f"--format {fmt} is not offered with --rerank / --confidence; use text or json"))
    if confidence:
        try:
            report = tune_confidence_file(metrics, config_ref(config_dir, None).path, out=out, min_queries=min_queries)
        except EngineError as exc:
            _fail(exc)
            return
        typer.echo(json.dumps(report, indent=2))
        return
    if rerank:
        try:
            rows = tune_rerank_file(metrics, config_ref(config_dir, None).path, out=out)
        except EngineError as exc:
            _fail(exc)
            return
        if fmt == "json":
            typer.echo(json.dumps(rows, indent=2))
            return
        for r in rows:
            typer.echo(
                f"{r['set']:<18} {r['questions']:>4} questions  nDCG@10 {r['ndcg@10_before']:.4f} → "
                f"{r['ndcg@10_after']:.4f}  {json.dumps(r['weights'])}"
            )
            for run, (before, after) in r["runs"].items():
                typer.echo(f"{'':<20}{run}: {before:.4f} → {after:.4f}")
        return
    try:
        check_dev_metrics(metrics)  # like --release, --rerank and --confidence: learn from dev splits only
        rows = run_tune(metrics, config_ref(config_dir, None).path, metric=metric, min_queries=min_queries, out=out)
    except EngineError as exc:
        _fail(exc)
        return
    if fmt != "text":
        typer.echo(render_table(rows, ("class", "expert", "old", "new", "ratio", "queries"), fmt))
        return
    for r in rows:
        typer.echo(
            f"{r['class']:<18} {r['expert']:<10} {r['old']!s:>5} → {r['new']!s:>5}   "
            f"({metric} ratio {r['ratio']}, {r['queries']} queries)"
        )


def _tune_release(
    metrics: list[Path],
    config_dir: Path,
    out_dir: Path,
    suite: Path | None,
    split: str,
    workspace: list[Path] | None,
    adopt: bool,
    metric: str,
    fmt: str,
    min_queries: int,
) -> None:
    from .tune_release import release

    if suite is None:
        _fail(SpecError("--release needs --suite: the suite whose dev split gates the release"))
        return
    if fmt not in ("text", "json"):
        _fail(SpecError(f"--format {fmt} is not offered with --release; use text or json"))
    try:
        r = release(
            metrics,
            config_dir,
            out_dir,
            suite,
            split=split,
            workspace=workspace,
            adopt=adopt,
            metric=metric,
            min_queries=min_queries,
        )
    except EngineError as exc:
        _fail(exc)
        return
    if fmt == "json":
        typer.echo(json.dumps({**vars(r), "candidate": str(r.candidate)}, indent=1))
    else:
        typer.echo(f"candidate config: {r.candidate}\n\n{r.diff}\n\ngate ({split}):")
        typer.echo("\n".join(r.gate))
        verdict = (
            "adopted"
            if r.adopted
            else "unchanged (the candidate's priors equal the current ones: nothing to adopt)"
            if r.unchanged
            else ("passed (not adopted: --adopt)" if r.regressions == 0 else "REFUSED")
        )
        typer.echo(f"{r.regressions} regression(s): {verdict}")
    raise typer.Exit(1 if r.regressions else 0)


app.add_typer(eval_app, name="eval")
app.command()(bench)
app.add_typer(daemon_app, name="daemon")
app.add_typer(receipts_app, name="receipts")
app.add_typer(keys_app, name="keys")
app.add_typer(store_app, name="store")


#: SQLite errors that mean the disk, not the code: full, read-only, unopenable
_MACHINE_SQLITE = re.compile(r"disk is full|disk I/O error|readonly database|unable to open database", re.I)


def _os_problem(exc: OSError) -> str:
    """An OSError as one line that names the file and what is wrong with it."""
    what = exc.strerror or (f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
    if exc.filename is None and isinstance(exc, FileNotFoundError):
        return f"{what}: the current directory no longer exists? (cd somewhere that does)"
    where = f": {exc.filename}" if exc.filename is not None else ""
    return f"{what}{where} (check the data dir, ENGINE_HOME, and the permissions of that path)"


def main() -> None:
    """The console script: every exit is 0, 1 or 2 (see the module docstring)."""
    try:
        app(standalone_mode=True)
    except EngineError as exc:  # one a command did not catch itself
        typer.echo(json.dumps(exc.to_dict(), ensure_ascii=False), err=True)
        sys.exit(exc.exit_code)
    except OSError as exc:  # the machine, not a bug: a data dir that is a file or read-only, a gone cwd
        typer.echo(
            json.dumps({"error": "environment_error", "message": _os_problem(exc)}, ensure_ascii=False), err=True
        )
        sys.exit(1)
    except Exception as exc:  # noqa: BLE001 - a bug: say so in the same shape, keep the traceback for the report
        import sqlite3

        if isinstance(exc, sqlite3.OperationalError) and _MACHINE_SQLITE.search(str(exc)):
            # an index's SQLite file on a full or read-only disk: the machine, not a bug
            message = f"an index could not be written: {exc} (free space in the data dir, or check its permissions)"
            typer.echo(json.dumps({"error": "environment_error", "message": message}, ensure_ascii=False), err=True)
            sys.exit(1)
        traceback.print_exc()
        message = f"{type(exc).__name__}: {exc}"
        typer.echo(json.dumps({"error": "internal_error", "message": message}, ensure_ascii=False), err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
