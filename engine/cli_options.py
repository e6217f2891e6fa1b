"""Options and helpers every ``engine`` command module shares (:mod:`.cli`, :mod:`.cli_store`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

import typer

from .configdir import ConfigRef, resolve_config
from .errors import EngineError
from .workspace import Workspace

WorkspaceOpt = Annotated[
    list[Path] | None,
    typer.Option("--workspace", "-w", help="Workspace folder (repeatable). Default: current directory."),
]
ConfigDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--config-dir",
        help="Folder holding experts.yaml, priors.yaml and pipelines/ (default: $ENGINE_CONFIG_DIR, else the "
        "workspace's .engine.yaml, else the packaged defaults; see docs/config.md).",
    ),
]
# One output contract (docs/cli.md): a verb offers exactly the formats it honours; anything else is a
# usage error (exit 2), never silently ignored. Tables are rendered by engine.render.render_table.
AnswerFormat = Literal["json", "markdown", "toon"]
TableFormat = Literal["text", "json", "markdown", "toon"]
AnswerFormatOpt = Annotated[
    AnswerFormat,
    typer.Option("--format", "-f", help="json (the full contract) | markdown (people) | toon (agents: fewest tokens)"),
]
TableFormatOpt = Annotated[
    TableFormat,
    typer.Option("--format", "-f", help="text (aligned columns) | json | markdown (a table) | toon (legend + rows)"),
]


def fail(exc: EngineError) -> None:
    typer.echo(json.dumps(exc.to_dict(), ensure_ascii=False), err=True)
    raise typer.Exit(exc.exit_code)


def open_workspace(workspace: list[Path] | None) -> Workspace:
    return Workspace.open(workspace or [Path.cwd()])


def config_ref(config_dir: Path | None, workspace: list[Path] | None) -> ConfigRef:
    """The config folder every verb that reads config uses (engine/configdir.py)."""
    roots = [Path(w).expanduser().resolve() for w in workspace] if workspace else [Path.cwd()]
    return resolve_config(config_dir, roots)
