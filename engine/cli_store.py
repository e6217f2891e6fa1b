"""``engine receipts …``, ``engine keys …`` and ``engine store …``: the receipt log, its keys and
its store, as thin typer glue over :mod:`engine.store`, :mod:`engine.keys` and :mod:`engine.audit`.

Every command reports a damaged store as a classified error with its fix (exit 1), never a
traceback; ``receipts verify`` still audits the log of record when the store cannot be read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from .cli_options import TableFormatOpt, WorkspaceOpt
from .cli_options import fail as _fail
from .cli_options import open_workspace as _workspace
from .errors import EngineError, ReceiptError
from .render import render_table

receipts_app = typer.Typer(no_args_is_help=True, help="List, show and verify stored receipts.")
keys_app = typer.Typer(no_args_is_help=True, help="The signing key and the public keys verification pins.")
store_app = typer.Typer(no_args_is_help=True, help="The store's health, repair and per-expert stats.")


def _instant(value: str | None) -> str | None:
    """An ISO time as the stores' ``created_at`` form (UTC, milliseconds): the bounds compare as
    text, so ``20:00+01:00`` must become ``19:00Z`` first; a time without an offset is UTC."""
    if value is None:
        return None
    from datetime import UTC, datetime

    from .store.records import timestamp

    try:
        when = datetime.fromisoformat(value.strip())
    except ValueError:
        raise typer.BadParameter(
            f"{value!r} is not an ISO time (e.g. 2026-12-01T19:00:00+00:00 or 2026-12-01)"
        ) from None
    return timestamp(when if when.tzinfo is not None else when.replace(tzinfo=UTC))


Since = Annotated[
    str | None,
    typer.Option(help="ISO time, inclusive (e.g. 2026-12-01T00:00:00+00:00; no offset: UTC)", callback=_instant),
]
Until = Annotated[str | None, typer.Option(help="ISO time, exclusive", callback=_instant)]


def _data_dir(workspace: list[Path] | None) -> Path:
    return _workspace(workspace).data_dir


def _echo_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2, ensure_ascii=False, default=str))


@receipts_app.command("list")
def receipts_list(
    workspace: WorkspaceOpt = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many receipts, newest first.")] = 20,
    klass: Annotated[str | None, typer.Option("--class", help="Classifier class")] = None,
    status: Annotated[str | None, typer.Option(help="ok or an error code")] = None,
    pipeline: Annotated[str | None, typer.Option(help="A pipeline on the receipt's path")] = None,
    config_version: Annotated[str | None, typer.Option("--config-version")] = None,
    since: Since = None,
    until: Until = None,
    fmt: TableFormatOpt = "text",
) -> None:
    """Newest receipts first, filtered: time, class, status, question (truncated), result count, id."""
    from .store import ReceiptQuery, open_store

    query = ReceiptQuery(klass, status, pipeline, config_version, since, until, limit)
    try:
        rows = open_store(_data_dir(workspace)).list_receipts(query)
    except EngineError as exc:
        _fail(exc)
        return
    data = [r.to_dict() for r in rows]
    if fmt != "json":  # json carries the whole question; tables a line each
        data = [
            {**d, "time": d["created_at"][:19], "question": _truncate(d["question"]), "results": d["result_count"]}
            for d in data
        ]
    typer.echo(render_table(data, RECEIPT_COLUMNS, fmt))


RECEIPT_COLUMNS = ("time", "class", "status", "question", "results", "pipeline", "receipt_id")
QUESTION_CHARS = 48


def _truncate(question: str | None) -> str | None:
    if question is None:
        return None
    flat = " ".join(question.split())
    return flat if len(flat) <= QUESTION_CHARS else flat[: QUESTION_CHARS - 1] + "…"


@receipts_app.command("show")
def receipts_show(receipt_id: str, workspace: WorkspaceOpt = None) -> None:
    """Print one receipt as JSON."""
    from .errors import NotFound
    from .store import open_store

    try:
        body = open_store(_data_dir(workspace)).get_receipt(receipt_id)
        if body is None:
            raise NotFound(f"no receipt {receipt_id!r}", receipt_id=receipt_id)
    except EngineError as exc:
        _fail(exc)
        return
    _echo_json(body)


@receipts_app.command("verify")
def receipts_verify(workspace: WorkspaceOpt = None, receipt_id: Annotated[str | None, typer.Argument()] = None) -> None:
    """Audit the receipt log (or one receipt): pinned-key signatures, indexed columns, presence in
    store and log, and each writer's hash chain. Exit 1 on any problem."""
    from .audit import audit
    from .keys import KeyRing
    from .store import open_store

    data_dir = _data_dir(workspace)
    note = None
    try:
        pinned = KeyRing(data_dir).verification_keys()
    except ReceiptError as exc:
        pinned, note = {}, exc.message
    if not pinned and note is None:
        note = "no pinned key: the signing key is missing and none is retired or trusted (`engine doctor`)"
    try:
        report = audit(open_store(data_dir), pinned, receipt_id)
    except (EngineError, OSError) as exc:
        _echo_json({"ok": False, "error": "verify_failed", "message": str(exc)})
        raise typer.Exit(1) from None
    out = report.to_dict()
    if note:
        out["keys"] = note
    if report.not_found:
        out["error"] = f"no receipt {receipt_id!r}"
    _echo_json(out)
    raise typer.Exit(0 if report.ok else 1)


@keys_app.command("list")
def keys_list(workspace: WorkspaceOpt = None) -> None:
    """The public keys verification trusts: current, retired, trusted."""
    from .keys import KeyRing

    try:
        _echo_json(
            [
                {"public_key": p.public_key, "role": p.role, "since": p.since}
                for p in KeyRing(_data_dir(workspace)).pinned()
            ]
        )
    except EngineError as exc:
        _fail(exc)


@keys_app.command("init")
def keys_init(
    workspace: WorkspaceOpt = None,
    force: Annotated[
        bool, typer.Option("--force", help="Create a key even though receipts exist (the old key is lost)")
    ] = False,
) -> None:
    """Create the signing key. Refused when receipts exist (a lost key is not silently replaced) unless --force."""
    from .keys import INIT_FIX, KeyRing
    from .store import open_store

    data_dir = _data_dir(workspace)
    keys = KeyRing(data_dir)
    try:
        key = keys.load()
        if key is None:
            if open_store(data_dir).holds_data() and not force:
                raise ReceiptError(f"receipts exist in {data_dir} but the signing key is missing; {INIT_FIX}")
            key = keys.create()
    except EngineError as exc:
        _fail(exc)
        return
    _echo_json({"public_key": key.verify_key.encode().hex(), "path": str(keys.key_path)})


@keys_app.command("rotate")
def keys_rotate(
    workspace: WorkspaceOpt = None,
    revoke: Annotated[
        bool,
        typer.Option(
            "--revoke",
            help="The old key leaked: receipts it signed stop verifying (without it, what it signed "
            "before the rotation still verifies and nothing it signs afterwards does).",
        ),
    ] = False,
) -> None:
    """Start a new signing key; the old public key stays pinned (retired: it verifies receipts made
    before the rotation, not after). The workspace's `engine run` daemons are stopped; running
    `engine serve` servers sign with the new key from their next receipt."""
    from .daemon.client import stop_all
    from .keys import INIT_FIX, KeyRing
    from .store import open_store

    try:
        data_dir = _data_dir(workspace)
        keys = KeyRing(data_dir)
        # a missing key is not "rotated": a new one would silently take the place of a lost one whose
        # public key was never pinned, and every receipt it signed would stop verifying (as `init`)
        if keys.load() is None and open_store(data_dir).holds_data():
            raise ReceiptError(f"receipts exist in {data_dir} but the signing key is missing; {INIT_FIX}")
        old, new = keys.rotate(revoke=revoke)
    except EngineError as exc:
        _fail(exc)
        return
    stop_all(data_dir)  # a daemon holds the old key: the next `engine run` starts one with the new
    _echo_json({"revoked" if revoke else "retired": old, "current": new})


@keys_app.command("trust")
def keys_trust(public_key: str, workspace: WorkspaceOpt = None) -> None:
    """Pin a public key you vouch for (a lost key's, say), so receipts it signed verify."""
    from .keys import KeyRing

    try:
        KeyRing(_data_dir(workspace)).trust(public_key)
    except EngineError as exc:
        _fail(exc)
        return
    _echo_json({"trusted": public_key.lower()})


@store_app.command("status")
def store_status(workspace: WorkspaceOpt = None) -> None:
    """Can the store be read and written? Exit 1 with the fix when not."""
    from .store import open_store

    health = open_store(_data_dir(workspace)).health()
    _echo_json(health.to_dict())
    raise typer.Exit(0 if health.ok else 1)


@store_app.command("repair")
def store_repair(workspace: WorkspaceOpt = None) -> None:
    """Rebuild the store from the spool log: every logged receipt exactly once. The old file is kept aside."""
    from .daemon.client import stop_all
    from .store import open_store

    try:
        data_dir = _data_dir(workspace)
        stop_all(data_dir)  # a daemon holds the store open: let it finish and go before the file is rebuilt
        report = open_store(data_dir).repair()
    except EngineError as exc:
        _fail(exc)
        return
    _echo_json(report.to_dict())


@store_app.command("export")
def store_export(
    out: Annotated[Path, typer.Argument(help="Folder for one <table>.parquet per table")],
    workspace: WorkspaceOpt = None,
    parquet: Annotated[bool, typer.Option("--parquet", help="Parquet files (the one format so far)")] = True,
) -> None:
    """Export every table (receipts, events, feedback, experiments, hints, bandit state, config
    snapshots) of whichever store the data dir uses, for analysis in any engine."""
    from .store import open_store
    from .store.export import export_parquet

    try:
        counts = export_parquet(open_store(_data_dir(workspace)), out)
    except EngineError as exc:
        _fail(exc)
        return
    _echo_json({"out": str(out), "format": "parquet", "rows": counts})


@store_app.command("stats")
def store_stats(
    workspace: WorkspaceOpt = None,
    since: Since = None,
    until: Until = None,
    arm: Annotated[str | None, typer.Option(help="Only events of this arm (eval), e.g. router")] = None,
    fmt: TableFormatOpt = "text",
) -> None:
    """Per expert over a window: calls, p50/p95 latency, timeout and error rates, hit rate."""
    from .store import EventQuery, open_store

    try:
        stats = open_store(_data_dir(workspace)).expert_stats(EventQuery(since=since, until=until, arm=arm))
    except EngineError as exc:
        _fail(exc)
        return
    rows = [s.to_dict() for s in stats]
    if fmt == "text":  # people read rounded milliseconds and percentages; the other formats keep the numbers
        rows = [
            {
                **r,
                **{k: f"{r[k]:.1f}" for k in ("p50_ms", "p95_ms")},
                **{k: f"{r[k]:.2%}" for k in ("timeout_rate", "error_rate")},
                "hit_rate": None if r["hit_rate"] is None else f"{r['hit_rate']:.2f}",
            }
            for r in rows
        ]
    typer.echo(render_table(rows, STATS_COLUMNS, fmt))


STATS_COLUMNS = ("expert_id", "count", "p50_ms", "p95_ms", "timeout_rate", "error_rate", "labelled", "hit_rate")
