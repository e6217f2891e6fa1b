"""Which config may run what: a config a repository chose does not run programs (docs/security.md)."""

from __future__ import annotations

from .errors import SchemaError
from .screen import EXTERNAL_ADAPTERS
from .spec import ConfigSet
from .yamlfile import line_of

#: adapters whose expert runs a program or talks to a server the config names
PROGRAM_ADAPTERS = EXTERNAL_ADAPTERS


def check_workspace_trust(cfg: ConfigSet) -> None:
    """A config a workspace's ``.engine.yaml`` chose (source ``workspace``) comes with the
    repository: whoever wrote the repository would choose what runs on the machine of whoever
    searches it. Such a config may tune priors, pipelines and rules, but may not enable an expert
    that runs a program or reaches a server (``command``, ``mcp``, ``http``, or a ``binary``
    setting); that takes the user's own choice of the folder (``--config-dir``, ``ENGINE_CONFIG_DIR``).

    Raises:
        SpecError: naming the expert, its file and line, and how to choose the folder explicitly.
    """
    if cfg.source != "workspace":
        return
    file = cfg.root / "experts.yaml"
    for name, spec in cfg.experts.items():
        if not spec.enabled:
            continue
        what = f"adapter {spec.adapter}" if spec.adapter in PROGRAM_ADAPTERS else None
        if what is None and "binary" in spec.settings:
            what = f"binary {spec.settings['binary']!r}"
        if what is None:
            continue
        raise SchemaError(
            f"the workspace's .engine.yaml chose this config folder, and it enables expert {name!r} ({what}), "
            "which runs a program or reaches a server: a repository does not choose what runs here. "
            f"If you trust it, choose the folder yourself: --config-dir {cfg.root} (or ENGINE_CONFIG_DIR)",
            file=str(file),
            path=f"experts/{name}",
            line=line_of(file, ["experts", name]),
        )
