"""``engine doctor``: what works here and what does not, before a question finds out."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from .config import load_config
from .errors import EngineError
from .experts import ExpertEnv, adapter_class
from .experts.indexed import IndexedExpert
from .graph import build_graph
from .index.build import freshness
from .receipts import load_or_create_key
from .store import Store
from .workspace import Workspace, rg_binary


def _check(name: str, fn: Any) -> dict[str, Any]:
    try:
        detail = fn()
        return {"check": name, "ok": True, "detail": detail}
    except (EngineError, OSError, subprocess.SubprocessError, ValueError) as exc:
        return {"check": name, "ok": False, "detail": str(exc)}


def run_doctor(ws: Workspace, config_dir: Path) -> list[dict[str, Any]]:
    out = [
        _check(
            "ripgrep",
            lambda: subprocess.run(
                [rg_binary(), "--version"], capture_output=True, text=True, check=True
            ).stdout.splitlines()[0],
        ),
        _check("git", lambda: shutil.which("git") or (_ for _ in ()).throw(OSError("git not on PATH"))),
        _check("projects", lambda: [f"{p.name}{' (git)' if p.is_git else ''}" for p in ws.projects]),
        _check(
            "data dir writable",
            lambda: (
                (os.access(ws.data_dir.parent, os.W_OK) and str(ws.data_dir))
                or (_ for _ in ()).throw(OSError(f"cannot write {ws.data_dir}"))
            ),
        ),
        _check("signing key", lambda: load_or_create_key(ws.data_dir).verify_key.encode().hex()),
        _check("store", lambda: f"{Store(ws.data_dir).query('SELECT count(*) FROM receipts')[0][0]} receipts"),
    ]
    cfg_check = _check("config", lambda: load_config(config_dir))
    out.append({**cfg_check, "detail": str(config_dir) if cfg_check["ok"] else cfg_check["detail"]})
    if not cfg_check["ok"]:
        return out
    cfg = cfg_check["detail"]
    for spec in cfg.pipelines.values():
        out.append(_check(f"pipeline {spec.name}", lambda s=spec: f"{len(build_graph(s, cfg).nodes)} nodes"))
    env = ExpertEnv(ws)
    for name, spec in sorted(cfg.experts.items()):
        if not spec.enabled:
            out.append({"check": f"expert {name}", "ok": True, "detail": "disabled"})
            continue

        def expert_state(name: str = name, spec: Any = spec) -> Any:
            inst = adapter_class(spec.adapter)(spec, env)
            if isinstance(inst, IndexedExpert):
                if not inst.manifest_path.exists():
                    raise OSError(f"no index yet: run `engine index` ({inst.manifest_path.parent})")
                return freshness(inst.manifest_path, ws.projects)
            return f"{spec.adapter} ({', '.join(inst.capabilities()) or 'external'})"

        out.append(_check(f"expert {name}", expert_state))
    return out
