"""Which config folder a command uses: one resolution for every verb (docs/config.md, "Where the
config comes from").

A config folder holds ``experts.yaml``, ``priors.yaml`` and ``pipelines/``. The first of these
wins:

1. ``--config-dir DIR`` (source ``--config-dir``);
2. for ``engine run PATH``, when ``PATH`` is an existing pipeline file: the folder above its
   ``pipelines/`` folder, if that holds an ``experts.yaml`` (source ``pipeline-file``);
3. ``$ENGINE_CONFIG_DIR`` (source ``ENGINE_CONFIG_DIR``);
4. the workspace: the first ``--workspace`` root holding a ``.engine.yaml`` file whose
   ``config_dir`` names the folder, relative to that root (source ``workspace``);
5. the defaults shipped inside the package, ``engine/defaults/`` (source ``packaged``). In a
   source checkout (an editable install) there is no copy: the repository's own
   ``experts.yaml``, ``priors.yaml`` and ``pipelines/`` are the defaults (one home for them; the
   wheel build copies them in, see setup.py).

Nothing here imports runtime code: the launcher and the daemon client resolve a config without
loading the engine.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .errors import SchemaError, SpecError

WORKSPACE_FILE = ".engine.yaml"
ENV_VAR = "ENGINE_CONFIG_DIR"
SOURCES = ("--config-dir", "pipeline-file", ENV_VAR, "workspace", "packaged")
_PIPELINE_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True, slots=True)
class ConfigRef:
    """A config folder and why it was chosen (one of :data:`SOURCES`); named in every receipt."""

    path: Path
    source: str

    def to_dict(self) -> dict[str, str]:
        return {"path": str(self.path), "source": self.source}


def packaged_config_dir() -> Path:
    """The defaults: ``engine/defaults`` in an installed wheel, the repository root in a checkout."""
    here = Path(__file__).resolve().parent
    shipped = here / "defaults"
    if (shipped / "experts.yaml").is_file():
        return shipped
    return here.parent


def workspace_config(roots: Sequence[Path]) -> Path | None:
    """The folder a workspace root's ``.engine.yaml`` names (the first root that has one)."""
    for root in roots:
        file = root / WORKSPACE_FILE
        if not file.is_file():
            continue
        from .spec import line_of, load_yaml  # yaml + jsonschema: only when a workspace has the file

        raw = load_yaml(file, "workspace")
        folder = (root / Path(raw["config_dir"]).expanduser()).resolve()
        if not (folder / "experts.yaml").is_file():
            raise SchemaError(
                f"config_dir {raw['config_dir']!r} → {folder} holds no experts.yaml",
                file=str(file),
                path="config_dir",
                line=line_of(file, ["config_dir"]),
            )
        return folder
    return None


def resolve_config(
    explicit: Path | None,
    roots: Sequence[Path],
    *,
    env: Mapping[str, str] | None = None,
    pipeline_file: Path | None = None,
) -> ConfigRef:
    """The config folder a command uses (see the module docstring for the order)."""
    env = os.environ if env is None else env
    if explicit is not None:
        return ConfigRef(explicit.expanduser().resolve(), "--config-dir")
    if pipeline_file is not None:
        beside = pipeline_file.resolve().parent.parent
        if (beside / "experts.yaml").is_file():
            return ConfigRef(beside, "pipeline-file")
    if env.get(ENV_VAR):
        return ConfigRef(Path(env[ENV_VAR]).expanduser().resolve(), ENV_VAR)
    found = workspace_config(roots)
    if found is not None:
        return ConfigRef(found, "workspace")
    return ConfigRef(packaged_config_dir(), "packaged")


def resolve_run(
    pipeline: str,
    explicit: Path | None,
    roots: Sequence[Path],
    cwd: Path,
    *,
    env: Mapping[str, str] | None = None,
) -> tuple[ConfigRef, str | Path]:
    """``engine run PIPELINE``: the config folder and what to run in it (a pipeline name, or a file).

    ``PIPELINE`` is an existing file (relative to ``cwd``) when it looks like one (a ``.yaml`` name
    or a path), else a pipeline name (``router``),
    else a file name inside the config folder (``pipelines/router.yaml``, ``router.yaml``), so the
    same command works from any directory.
    """
    given = Path(pipeline).expanduser()
    here = given if given.is_absolute() else cwd / given
    # a file when it says so (a .yaml name or a path): a stray file named `router` in the current
    # directory must not hijack `engine run router`
    looks_like_file = given.suffix in _PIPELINE_SUFFIXES or len(given.parts) > 1
    if looks_like_file and here.is_file():
        file = here.resolve()
        return resolve_config(explicit, roots, env=env, pipeline_file=file), file
    ref = resolve_config(explicit, roots, env=env)
    if not looks_like_file:
        return ref, pipeline
    for candidate in (ref.path / given, ref.path / "pipelines" / given.name):
        if not given.is_absolute() and candidate.is_file():
            return ref, candidate.resolve()
    raise SpecError(
        f"pipeline {pipeline!r} not found: no such file from {cwd}, nor in the config folder {ref.path} "
        f"({ref.source}); give a pipeline name (e.g. router) or a path",
        file=pipeline,
    )
