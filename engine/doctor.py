"""``engine doctor``: what works here and what does not, before a question finds out.

Each check is ``{"check", "ok", "detail"}``; ``"warn": true`` marks a check that passes but
needs attention (a stale index, withheld files, folders not served). Only a failed check makes
the command exit 1.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .config import load_config
from .datadir import mode_problems
from .errors import EngineError
from .experts import ExpertEnv, adapter_class
from .experts.indexed import IndexedExpert
from .graph import build_graph
from .index.build import freshness
from .index.files import list_paths
from .keys import INIT_FIX, KeyRing
from .secrets import SecretsPolicy, policy_for
from .store import open_store
from .workspace import Workspace, contained, rg_binary, skipped_folders


def _check(name: str, fn: Any) -> dict[str, Any]:
    try:
        detail = fn()
        return {"check": name, "ok": True, "detail": detail}
    except (EngineError, OSError, subprocess.SubprocessError, ValueError) as exc:
        return {"check": name, "ok": False, "detail": str(exc)}


def store_checks(data_dir: Path) -> list[dict[str, Any]]:
    """The signing key and the store, read-only: doctor never creates a key or repairs a store."""
    store = open_store(data_dir)
    keys = KeyRing(data_dir)
    out = []
    try:
        key = keys.load()
        if key is None and store.holds_data():
            detail, ok = f"missing ({keys.key_path}) but receipts exist; fix: {INIT_FIX}", False
        elif key is None:
            detail, ok = "none yet: created on first use", True
        else:
            unsafe = mode_problems([keys.key_path])
            detail = f"{key.verify_key.encode().hex()}, {len(keys.pinned()) - 1} retired/trusted key(s) pinned"
            ok = not unsafe
            if unsafe:
                detail = f"{unsafe[0]}; fix: chmod 600 {keys.key_path}"
    except EngineError as exc:
        detail, ok = exc.message, False
    out.append({"check": "signing key", "ok": ok, "detail": detail})
    try:
        health = store.health()
    except OSError as exc:  # a read-only or unusable data dir: a failed check, the other checks still run
        out.append({"check": "store", "ok": False, "detail": f"cannot open: {exc.strerror or exc} ({exc.filename})"})
        return out
    detail = health.detail + (f"; fix: {health.fix}" if health.fix and health.fix not in health.detail else "")
    if health.pending_bytes:
        detail += f" ({health.pending_bytes} bytes of spool not yet ingested)"
    out.append({"check": "store", "ok": health.ok, "detail": detail})
    return out


def run_doctor(ws: Workspace, config_dir: Path) -> list[dict[str, Any]]:
    out = [
        _check(
            "ripgrep",
            lambda: subprocess.run(
                [rg_binary(), "--version"], capture_output=True, text=True, check=True
            ).stdout.splitlines()[0],
        ),
        _check("git", lambda: shutil.which("git") or (_ for _ in ()).throw(OSError("git not on PATH"))),
        _check(
            "projects",
            lambda: [
                f"{p.name}{' (git)' if p.is_git else ' (not a git repo: served without history)'}" for p in ws.projects
            ],
        ),
        _folders_not_served(ws),
        _check(
            "data dir writable",
            lambda: (
                (os.access(ws.data_dir.parent, os.W_OK) and str(ws.data_dir))
                or (_ for _ in ()).throw(OSError(f"cannot write {ws.data_dir}"))
            ),
        ),
        *store_checks(ws.data_dir),
    ]
    cfg_check = _check("config", lambda: load_config(config_dir))
    out.append({**cfg_check, "detail": str(config_dir) if cfg_check["ok"] else cfg_check["detail"]})
    if not cfg_check["ok"]:
        return out
    cfg = cfg_check["detail"]
    out.append(_withheld(ws, policy_for(ws.data_dir, cfg.raw_experts)))
    for spec in cfg.pipelines.values():
        out.append(_check(f"pipeline {spec.name}", lambda s=spec: f"{len(build_graph(s, cfg).nodes)} nodes"))
    env = ExpertEnv(ws)
    for name, spec in sorted(cfg.experts.items()):
        if not spec.enabled:
            out.append({"check": f"expert {name}", "ok": True, "detail": "disabled"})
            continue

        def expert_state(name: str = name, spec: Any = spec) -> Any:
            _program_exists(spec.settings)
            inst = adapter_class(spec.adapter)(spec, env)
            if isinstance(inst, IndexedExpert):
                if not inst.manifest_path.exists():
                    raise OSError(f"no index yet: run `engine index` ({inst.manifest_path.parent})")
                return freshness(inst.manifest_path, ws.projects)
            return f"{spec.adapter} ({', '.join(inst.capabilities()) or 'external'})"

        check = _check(f"expert {name}", expert_state)
        out.append(_stale_warning(check))
    return out


def _program_exists(settings: Mapping[str, Any]) -> None:
    """The program an enabled expert's settings name (``binary``, an MCP ``command``, a command
    expert's ``argv``) can be run: doctor said "ok" for a missing one that every run then
    reported unavailable."""
    for key in ("binary", "command", "argv"):
        value = settings.get(key)
        program = value[0] if isinstance(value, list) and value else value
        if not isinstance(program, str) or not program or "{{" in program:
            continue  # absent, or filled in per call
        found = os.access(program, os.X_OK) if "/" in program else shutil.which(program) is not None
        if not found:
            raise OSError(f"settings.{key}: {program!r} is not an executable program here")


def _stale_warning(check: dict[str, Any]) -> dict[str, Any]:
    """An index behind HEAD, or with files pending, passes with a warning that says how to fix it."""
    fresh = check["detail"]
    if not check["ok"] or not isinstance(fresh, dict):
        return check
    stale = sorted(fresh.get("stale") or {})
    pending = int(fresh.get("files_pending") or 0)
    if not stale and not pending:
        return check
    why = ([f"stale for {', '.join(stale)} (indexed sha != HEAD)"] if stale else []) + (
        [f"{pending} files pending"] if pending else []
    )
    return {**check, "warn": True, "detail": f"{'; '.join(why)}: run `engine index`", "freshness": fresh}


def _folders_not_served(ws: Workspace) -> dict[str, Any]:
    skipped = [f"{path}: {reason}" for root in ws.roots for path, reason in skipped_folders(root)]
    if not skipped:
        return {"check": "folders not served", "ok": True, "detail": "none"}
    return {"check": "folders not served", "ok": True, "warn": True, "detail": skipped}


def _withheld(ws: Workspace, policy: SecretsPolicy) -> dict[str, Any]:
    """Every file the secrets policy withholds from the experts: path and rule, never the secret."""
    try:
        rows = []
        for project in ws.projects:
            for rel in list_paths(project, policy, withheld=True):
                real = contained(project.root, rel)
                rule = policy.name_rule(rel) or (policy.file_rule(real, rel) if real is not None else None)
                if rule:
                    rows.append(f"{project.name}/{rel}: {rule}")
        policy.save()
    except (EngineError, OSError, RuntimeError) as exc:
        return {"check": "secrets withheld", "ok": False, "detail": str(exc)}
    if not rows:
        return {"check": "secrets withheld", "ok": True, "detail": "no file withheld"}
    return {"check": "secrets withheld", "ok": True, "warn": True, "detail": rows}
