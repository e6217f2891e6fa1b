"""``engine daemon status|stop``: the per-workspace daemon that answers ``engine run`` from a shell
(docs/adr/0014-cli-daemon.md). ``engine run`` starts it on first use; nothing here is needed to use it."""

from __future__ import annotations

import time
from typing import Any

import typer

from .cli_options import TableFormatOpt, WorkspaceOpt
from .cli_options import fail as _fail
from .cli_options import open_workspace as _workspace
from .errors import EngineError
from .render import render_table

daemon_app = typer.Typer(
    no_args_is_help=True,
    help="The background daemon that answers `engine run` from a shell (started on first use; "
    "idle exit after $ENGINE_DAEMON_IDLE_S seconds; bypass with --no-daemon or ENGINE_NO_DAEMON=1).",
)
COLUMNS = ("pid", "alive", "served", "idle_for_s", "idle_s", "uptime_s", "roots", "configs", "socket")


def _rows(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    now = time.time()
    return [
        {
            **d,
            "uptime_s": round(now - float(d.get("started", now))),
            "configs": [f"{c['source']}:{c['path']}" for c in d.get("configs", [])],
        }
        for d in found
    ]


@daemon_app.command("status")
def status(workspace: WorkspaceOpt = None, fmt: TableFormatOpt = "text") -> None:
    """The workspace's daemons: pid, calls served, idle time, roots, config folders, socket."""
    from .daemon.client import daemons

    try:
        found = daemons(_workspace(workspace).data_dir)
    except EngineError as exc:
        _fail(exc)
        return
    typer.echo(render_table(_rows(found), COLUMNS, fmt, data=found))


@daemon_app.command("stop")
def stop(workspace: WorkspaceOpt = None, fmt: TableFormatOpt = "text") -> None:
    """Stop the workspace's daemons (they finish the calls in flight); the next `engine run` starts one."""
    from .daemon.client import stop_all

    try:
        found = stop_all(_workspace(workspace).data_dir)
    except EngineError as exc:
        _fail(exc)
        return
    typer.echo(render_table(_rows(found), COLUMNS, fmt, data=found))
