"""Options and helpers every ``engine`` command module shares (:mod:`.cli`, :mod:`.cli_store`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

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
        help="Folder holding experts.yaml, priors.yaml and pipelines/ "
        "(default: beside the pipeline file's pipelines/ folder).",
    ),
]
FormatOpt = Annotated[str, typer.Option("--format", "-f", help="json | markdown | toon")]


def fail(exc: EngineError) -> None:
    typer.echo(json.dumps(exc.to_dict(), ensure_ascii=False), err=True)
    raise typer.Exit(exc.exit_code)


def open_workspace(workspace: list[Path] | None) -> Workspace:
    return Workspace.open(workspace or [Path.cwd()])
