"""Helpers for the edge tests (containment, secrets, process hygiene, fuzz, chaos): a workspace with
attack files planted, a config with command experts, and a Router runner. Imported, not fixtures."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio

from engine.runtime import Router, RunResult
from engine.workspace import Workspace
from tests.conftest import git
from tests.external_support import copy_config

PYTHON = sys.executable
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
SSH_BODY = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW"
TOKEN = "ghp_abcdefghijklmnopqrstuvwxyzABCDEF1234"
OUTSIDE_MARKER = "OUTSIDE-THE-WORKSPACE-7f3a"

SECRET_FILES = {
    "secrets.yaml": f"aws:\n  access_key_id: AKIAIOSFODNN7EXAMPLE\n  secret_access_key: {AWS_SECRET}\n",
    "deploy_key": f"-----BEGIN OPENSSH PRIVATE KEY-----\n{SSH_BODY}\nQyNTUxOQAAACBvZXJ0eXVpb3Bh\n"
    "-----END OPENSSH PRIVATE KEY-----\n",
    "backup/keys.txt": f"old key\n-----BEGIN OPENSSH PRIVATE KEY-----\n{SSH_BODY}\n-----END OPENSSH PRIVATE KEY-----\n",
    "alpha/prod_settings.py": f'DEBUG = False\nAWS_SECRET_ACCESS_KEY = "{AWS_SECRET}"\nALLOWED_HOSTS = ["prod"]\n',
    "id_utils.py": "def make_id_helper():\n    return 42\n",  # `id_*` must not withhold ordinary modules
}


def plant_attacks(repo: Path, outside: Path) -> None:
    """Secret files, symlinks out (file and folder) and symlinks in to secrets, plus a commit whose
    subject holds a token — the reproductions of issue 8, committed so git sees them too."""
    outside.mkdir(parents=True, exist_ok=True)
    (outside / "secret.txt").write_text(f"{OUTSIDE_MARKER} root:x:0:0\n")
    for rel, text in SECRET_FILES.items():
        p = repo / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    links = {
        "passwd_link.txt": "/etc/passwd",
        "outside_link.txt": str(outside / "secret.txt"),
        "outside_dir": str(outside),
        "env_link.txt": ".env",
        "key_link.txt": "deploy/id_rsa",
    }
    for name, target in links.items():
        os.symlink(target, repo / name)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", f"Rotate the CI token {TOKEN} for deploys")


def command_expert(code: str, timeout_ms: int = 10_000, **settings: Any) -> dict[str, Any]:
    """A ``command`` expert running ``python -c code`` once per project, ``path:line:text`` output."""
    return {
        "adapter": "command",
        "precision_class": "lexical",
        "timeout_ms": timeout_ms,
        "settings": {"argv": [PYTHON, "-c", code], "ok_codes": [0, 1], **settings},
    }


def config_with(tmp: Path, experts: dict[str, dict[str, Any]], klass: str = "identifier", **extra: Any) -> Path:
    """The repo's config plus ``experts``, which become the only experts of ``klass``."""
    cfg = copy_config(tmp, experts=experts)
    import yaml

    priors = yaml.safe_load((cfg / "priors.yaml").read_text())
    priors["classes"][klass] = dict.fromkeys(experts, 1.0)
    (cfg / "priors.yaml").write_text(yaml.safe_dump(priors, sort_keys=False))
    if extra:
        ex = yaml.safe_load((cfg / "experts.yaml").read_text())
        ex.update(extra)
        (cfg / "experts.yaml").write_text(yaml.safe_dump(ex, sort_keys=False))
    return cfg


def run(config: Path, workspace: Path | Workspace, request: dict[str, Any], pipeline: str = "router") -> RunResult:
    ws = workspace if isinstance(workspace, Workspace) else Workspace.open([workspace])
    router = Router(config, ws)

    async def go() -> RunResult:
        try:
            return await router.run(pipeline, {"no_cache": True, **request})
        finally:
            await router.aclose()

    result = anyio.run(go)
    router.flush()
    return result


def leftovers(marker: str) -> list[int]:
    """Live (non-zombie) processes whose command line holds ``marker``."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            if marker.encode() in (d / "cmdline").read_bytes() and " Z " not in (d / "stat").read_text():
                pids.append(int(d.name))
        except OSError:
            continue
    return pids
