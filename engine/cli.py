"""The ``engine`` command: thin typer glue over :mod:`engine.runtime` (work happens elsewhere).

Exit codes: 0 answered (empty included), 2 invalid request or config, 1 router failure.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import anyio
import typer

from .errors import EngineError, SpecError
from .render import render
from .spec import config_dir_for, load_config, load_schema
from .workspace import Workspace

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Search router: one question in, fused provenanced evidence and a signed receipt out.")
receipts_app = typer.Typer(no_args_is_help=True, help="List, show and verify stored receipts.")
app.add_typer(receipts_app, name="receipts")

WorkspaceOpt = Annotated[Optional[list[Path]], typer.Option("--workspace", "-w",
                         help="Workspace folder (repeatable). Default: current directory.")]
ConfigDirOpt = Annotated[Optional[Path], typer.Option("--config-dir",
                         help="Folder holding experts.yaml, priors.yaml and pipelines/ (default: beside the pipeline file's pipelines/ folder).")]
FormatOpt = Annotated[str, typer.Option("--format", "-f", help="json | markdown | toon")]


def _fail(exc: EngineError) -> None:
    typer.echo(json.dumps(exc.to_dict(), ensure_ascii=False), err=True)
    raise typer.Exit(exc.exit_code)


def _workspace(workspace: list[Path] | None) -> Workspace:
    return Workspace.open(workspace or [Path.cwd()])


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
    intent: Annotated[Optional[str], typer.Option(help="conceptual|identifier|typed-symbol|cross-repo-impact|docs|history|unknown")] = None,
    scope_project: Annotated[Optional[str], typer.Option("--scope-project")] = None,
    scope_group: Annotated[Optional[str], typer.Option("--scope-group")] = None,
    scope_path: Annotated[Optional[str], typer.Option("--scope-path")] = None,
    scope_language: Annotated[Optional[str], typer.Option("--scope-language")] = None,
    budget_ms: Annotated[Optional[int], typer.Option("--budget-ms")] = None,
    max_experts: Annotated[Optional[int], typer.Option("--max-experts")] = None,
    min_precision_class: Annotated[Optional[str], typer.Option("--min-precision-class")] = None,
    mode: Annotated[str, typer.Option(help="fused | separate")] = "fused",
    limit: Annotated[int, typer.Option(help="Number of items")] = 10,
    fmt: FormatOpt = "markdown",
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Do not read the answer cache.")] = False,
    session_id: Annotated[Optional[str], typer.Option("--session-id")] = None,
) -> None:
    """Answer one question with a pipeline; prints the answer and its signed receipt."""
    from .runtime import Router

    request: dict[str, Any] = {"question": question, "mode": mode, "limit": limit, "format": fmt,
                               "no_cache": no_cache}
    if intent:
        request["intent"] = intent
    scope = {k: v for k, v in {"project": scope_project, "group": scope_group, "path": scope_path,
                                "language": scope_language}.items() if v is not None}
    budget = {k: v for k, v in {"latency_ms": budget_ms, "max_experts": max_experts,
                                 "min_precision_class": min_precision_class}.items() if v is not None}
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
    only: Annotated[Optional[list[str]], typer.Option("--only", help="Index only these experts.")] = None,
    fmt: FormatOpt = "table",
    watch_: Annotated[bool, typer.Option("--watch", help="Keep indexing changes until interrupted.")] = False,
    interval: Annotated[float, typer.Option(help="Seconds between scans with --watch.")] = 0.5,
) -> None:
    """Build or update every index-backed expert's index, incrementally (content hashes)."""
    from .indexing import index_workspace, watch

    try:
        ws = _workspace(workspace)
        cfg = load_config(config_dir or _default_config_dir())
        if watch_:
            def report(rs: list[Any]) -> None:
                typer.echo(" ".join(f"{r.name}:+{r.added}/-{r.removed}" for r in rs if r.added or r.removed))

            try:
                watch(ws, lambda: load_config(config_dir or _default_config_dir()), interval_s=interval,
                      on_change=report)
            except KeyboardInterrupt:
                return
        reports = index_workspace(ws, cfg, only=only, progress=not fmt == "json")
    except EngineError as exc:
        _fail(exc)
        return
    if fmt == "json":
        typer.echo(json.dumps([r.to_dict() for r in reports], indent=2))
    else:
        for r in reports:
            d = r.to_dict()
            typer.echo(f"{d['index']:<10} +{d['added_or_changed']} -{d['removed']} ={d['unchanged']} "
                       f"units={d['units']} {d['seconds']}s")


@app.command()
def serve(
    workspace: WorkspaceOpt = None,
    config_dir: ConfigDirOpt = None,
    transport: Annotated[str, typer.Option(help="stdio | http (streamable HTTP at /mcp)")] = "stdio",
    host: Annotated[str, typer.Option(help="HTTP bind address; anything but loopback requires --token")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="HTTP port")] = 8765,
    token: Annotated[Optional[str], typer.Option(envvar="ENGINE_MCP_TOKEN",
                     help="HTTP: every request must carry 'Authorization: Bearer TOKEN'")] = None,
) -> None:
    """Serve every pipeline as an MCP tool (plus feedback and receipt); see docs/serve.md."""
    from .serve import serve as run_server

    try:
        run_server((config_dir or _default_config_dir()).resolve(), _workspace(workspace), transport=transport,
                   host=host, port=port, token=token)
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
    for name, spec in sorted(cfg.pipelines.items()):
        typer.echo(f"ok  {spec.file.name:<24} config_version={cfg.config_version(spec, rules_fingerprint())}")


@app.command()
def schema(which: Annotated[str, typer.Argument(help="request | response | receipt | experts | priors | pipeline")]) -> None:
    """Print one of the JSON Schemas every request, answer, receipt and config file validates against."""
    try:
        typer.echo(json.dumps(load_schema(which), indent=2, ensure_ascii=False))
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
            typer.echo(f"{'ok ' if c['ok'] else 'FAIL'} {c['check']:<28} {c['detail']}")
    raise typer.Exit(0 if all(c["ok"] for c in checks) else 1)


def _store(workspace: list[Path] | None):  # noqa: ANN202 - avoids importing duckdb for every command
    from .store import Store

    return Store(_workspace(workspace).data_dir)


@receipts_app.command("list")
def receipts_list(workspace: WorkspaceOpt = None, limit: int = 20, fmt: FormatOpt = "text") -> None:
    """Newest receipts first."""
    rows = _store(workspace).query(
        "SELECT receipt_id, created_at, pipeline, class, status, result_count FROM receipts "
        "ORDER BY created_at DESC, receipt_id LIMIT ?", [limit])
    if fmt == "json":
        keys = ("receipt_id", "created_at", "pipeline", "class", "status", "result_count")
        typer.echo(json.dumps([dict(zip(keys, r)) for r in rows], indent=2))
        return
    for r in rows:
        typer.echo(f"{r[0]}  {r[1]}  {r[2]:<28} {str(r[3]):<18} {r[4]:<16} {r[5]}")


@receipts_app.command("show")
def receipts_show(receipt_id: str, workspace: WorkspaceOpt = None) -> None:
    """Print one receipt as JSON."""
    rows = _store(workspace).query("SELECT body FROM receipts WHERE receipt_id = ?", [receipt_id])
    if not rows:
        typer.echo(json.dumps({"error": "not_found", "receipt_id": receipt_id}), err=True)
        raise typer.Exit(1)
    typer.echo(json.dumps(json.loads(rows[0][0]), indent=2, ensure_ascii=False))


@receipts_app.command("verify")
def receipts_verify(workspace: WorkspaceOpt = None, receipt_id: Annotated[Optional[str], typer.Argument()] = None
                    ) -> None:
    """Recompute every stored receipt's signature (or one). Exit 1 if any fails."""
    from .receipts import verify

    sql, params = "SELECT receipt_id, body FROM receipts", []
    if receipt_id:
        sql, params = sql + " WHERE receipt_id = ?", [receipt_id]
    rows = _store(workspace).query(sql, params)
    bad = [rid for rid, body in rows if not verify(json.loads(body))]
    typer.echo(json.dumps({"checked": len(rows), "valid": len(rows) - len(bad), "invalid": bad}))
    raise typer.Exit(1 if bad or (receipt_id and not rows) else 0)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
