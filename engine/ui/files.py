"""The file view: a workspace file with an answer's lines highlighted, under the engine's own rules.

A file is shown only when an expert could have returned it (docs/security.md): it resolves
inside its project (:func:`engine.workspace.contained`, symlinks included), lies in no private
or excluded folder and is not hidden or git-ignored, is not the data dir, is text and not too
large, and the secrets policy (:func:`engine.secrets.policy_for`: name rules, detect-secrets,
the workspace's patterns) withholds nothing in it. A refusal is a 404 naming the rule, never any
of the file's content.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from ..secrets import SecretsPolicy, policy_for
from ..types import Project
from ..workspace import MAX_FILE_BYTES, PRIVATE_DIRS, contained, in_excluded_dir, looks_binary, normalize_scope_path
from .pages import backend, in_thread, page
from .security import small_int

MAX_SHOWN_LINES = 20_000


class NotViewable(Exception):
    """Why a file is not shown (said to the user without confirming the file exists)."""


@dataclass(frozen=True)
class FileText:
    project: str
    path: str
    lines: list[str]


def viewable(project: Project, rel: str, policy: SecretsPolicy, data_dir: Path) -> Path:
    """The real path of ``rel`` in ``project`` when the engine may show it, else :class:`NotViewable`."""
    if "\x00" in rel:
        raise NotViewable("not a path inside the project")
    try:
        norm = normalize_scope_path(rel)
    except Exception:  # noqa: BLE001 - InvalidRequest: absolute or escaping; one answer for every refusal
        raise NotViewable("not a path inside the project") from None
    if norm is None or norm != rel.replace("\\", "/").strip("/"):
        raise NotViewable("not a path inside the project")
    _served_name(norm)
    real = contained(project.root, norm)
    if real is None:
        raise NotViewable("resolves outside the project")
    if real == data_dir or real.is_relative_to(data_dir):
        raise NotViewable("not served: the data dir")
    if not real.is_file():
        raise NotViewable("no such file")
    real_rel = real.relative_to(os.path.realpath(project.root)).as_posix()
    _served_name(real_rel)  # a symlink named like an ordinary file may point into .git or a hidden folder
    if policy.name_rule(norm) or policy.file_rule(real, real_rel):
        raise NotViewable("withheld by the secrets policy")
    if project.is_git and _git_ignored(project.root, real_rel):
        raise NotViewable("not served: ignored by git")
    return real


def _served_name(rel: str) -> None:
    """Refuse a project-relative path inside a private, hidden or excluded folder."""
    parts = PurePosixPath(rel).parts
    if any(p in PRIVATE_DIRS for p in parts):
        raise NotViewable("not served: a private folder")
    if any(p.startswith(".") for p in parts):
        raise NotViewable("not served: a hidden file or folder")
    if in_excluded_dir(rel):
        raise NotViewable("not served: an excluded folder")


def _git_ignored(root: Path, rel: str) -> bool:
    res = subprocess.run(
        ["git", "-C", str(root), "check-ignore", "-q", "--", rel], capture_output=True, check=False, timeout=10
    )
    return res.returncode == 0


def read_viewable(project: Project, rel: str, policy: SecretsPolicy, data_dir: Path) -> FileText:
    real = viewable(project, rel, policy, data_dir)
    try:
        with open(real, "rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    except OSError:
        raise NotViewable("no such file") from None
    if len(data) > MAX_FILE_BYTES or looks_binary(data):
        raise NotViewable("not served: binary or larger than the engine indexes")
    lines = data.decode("utf-8", "replace").splitlines()[:MAX_SHOWN_LINES]
    return FileText(project.name, rel, lines)


def _line(value: str | None) -> int:
    return small_int(value or "") or 0


async def file_view(request: Request) -> Response:
    router = backend(request).router
    q = request.query_params
    name, rel = q.get("project", ""), q.get("path", "")
    project = next((p for p in router.workspace.projects if p.name == name), None)
    policy = policy_for(router.workspace.data_dir, router.config().raw_experts)
    try:
        if project is None:
            raise NotViewable("no such project")
        text: FileText = await in_thread(lambda: read_viewable(project, rel, policy, router.workspace.data_dir))
    except NotViewable as exc:
        raise HTTPException(404, f"file not shown: {exc}") from None
    finally:
        policy.save_soon()
    start, end = _line(q.get("start")), _line(q.get("end"))
    end = max(end, start)
    return page(request, "file.html", file=text, start=start, end=end)
