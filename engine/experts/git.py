"""History: ``git log`` pickaxe (``-S``), diff regex (``-G``), message search (``--grep``) and per-file history.

Items are of kind ``commit`` with sha, date, author, subject and the files touched. Every
question-derived string is one argv element attached to its option (``-S<text>``,
``--grep=<text>``), so it can never be read as another option or a shell word; paths go after
``--`` as ``:(literal)``/``:(glob)`` pathspecs (:mod:`.git_files`).

**A file the question names** (``which commit last changed sessions.py``) is resolved against
each project's files at HEAD first — all matches, each labelled — and every search of that
project is then about those files. The resolution is recorded in the sub-query (``plan["resolved"]``,
added by ``search``: only it can list the files). A commit item then points at the named file,
its content the commit's diff hunk for that file (bounded; the fan-out's screen redacts secrets
and drops the hunk of a withheld file). The words of the file name and of the question's own
phrasing ("which commit last changed") are not searched in commit messages: they find commits
that mention the file, not the ones that changed it.

Ranking: commits found by more of the searches first (pickaxe on an exact string counts
double: it is where the string was introduced or removed), then newest first.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio

from ..errors import ExpertUnconfigured
from ..index.build import read_head
from ..types import Evidence, Project, Query
from ..workspace import is_excluded, normalize_scope_path
from .base import POSITIVE_INT, Expert, expert_errors, run_process, settings
from .git_files import Resolved, hunk_for, hunks_by_file, name_words, resolve

_FMT = "--format=%x1e%H%x1f%aI%x1f%an%x1f%s"
MAX_NAMED_FILES = 2
MAX_SHOW_BYTES = 8_000_000  # git show's output past this is dropped (those commits keep their file list)
#: words that say the question is about history, not what the commits are about
QUESTION_WORDS = frozenset(
    (  # noqa: SIM905 - a word list reads better as words
        "commit commits changed change changes changing last latest recent recently modified modify touched "
        "history added removed introduced deleted when which what who why"
    ).split()
)


class GitExpert(Expert):
    adapter = "git"
    reads_history = True
    settings_schema = settings({"binary": {"type": "string", "minLength": 1}, "max_commits": POSITIVE_INT})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._listings: dict[str, tuple[str | None, list[str]]] = {}  # project root → (HEAD, files at HEAD)

    def plan(self, query: Query) -> dict[str, Any]:
        f = query.features
        named = list(f.paths[:MAX_NAMED_FILES])
        searches: list[dict[str, str]] = []
        for lit in (f.literals or f.identifiers)[:3]:
            searches.append({"kind": "pickaxe", "arg": f"-S{lit}"})
        if f.regex:
            searches.append({"kind": "diff-regex", "arg": f"-G{f.regex}"})
        skip = QUESTION_WORDS | name_words(named)
        words = [k for k in f.keywords if len(k) >= 4 and k not in skip][:4]
        for w in words:
            searches.append({"kind": "message", "arg": f"--grep={w}"})
        for p in named:
            searches.append({"kind": "file-history", "arg": p})
        if not searches:
            raise ExpertUnconfigured("nothing in the question to search history for", expert=self.name)
        git_projects = [p.name for p in query.projects if p.is_git]
        return {
            "searches": searches,
            "max_commits": int(self.settings.get("max_commits", 50)),
            "path": normalize_scope_path(query.scope.path),
            "projects": git_projects,
            **({"files": named} if named else {}),
        }

    def _git(self, *args: str) -> list[str]:
        return [self.settings.get("binary", "git"), "--no-pager", "-c", "core.quotepath=off", *args]

    async def _files_at_head(self, project: Project) -> list[str]:
        """The files committed at HEAD (cached per HEAD: only committed files have history)."""
        head = read_head(project.root)
        cached = self._listings.get(str(project.root))
        if cached is not None and head is not None and cached[0] == head:
            return cached[1]
        argv = self._git("ls-tree", "-r", "-z", "--name-only", "HEAD")
        res = await run_process(argv, expert=self.name, cwd=project.root, ok_codes=(0, 128), sweep_on_exit=False)
        files = [] if res.returncode else [p for p in res.stdout.decode("utf-8", "replace").split("\0") if p]
        self._listings[str(project.root)] = (head, files)
        return files

    async def search(self, query: Query, plan: dict[str, Any]) -> list[Evidence]:
        hits: dict[tuple[str, str], dict[str, Any]] = {}
        weight = {"pickaxe": 2.0, "diff-regex": 1.5, "message": 1.0, "file-history": 1.0}
        named: dict[str, list[Resolved]] = {}  # project → the named files there
        cut: dict[str, int] = {}

        async def one(project: Project, search: dict[str, str]) -> None:
            argv = self._git("log", "--no-color", "--name-only", _FMT, f"--max-count={plan['max_commits']}")
            if search["kind"] == "message":
                argv.append("--regexp-ignore-case")
            if search["kind"] != "file-history":
                argv.append(search["arg"])
            resolved = named.get(project.name)
            if resolved:
                if search["kind"] in ("file-history", "message"):
                    argv.append("--full-diff")  # list every file of the commit (a pickaxe must not see them)
                argv += ["--", *(r.pathspec for r in resolved)]
            elif search["kind"] == "file-history":
                return  # no named file in this project (or no file named at all)
            else:
                argv += ["--"] + ([plan["path"]] if plan.get("path") else [])
            res = await run_process(argv, expert=self.name, cwd=project.root, ok_codes=(0, 128), sweep_on_exit=False)
            if res.returncode == 128:  # empty repo (no commits yet) or a path git does not know
                return
            with expert_errors(self.name):
                for sha, date, author, subject, files in _parse_log(res.stdout):
                    hit = hits.setdefault(
                        (project.name, sha),
                        {
                            "sha": sha,
                            "date": date,
                            "author": author,
                            "subject": subject,
                            "files": [],
                            "score": 0.0,
                            "found_by": [],
                        },
                    )
                    hit["files"] += [f for f in files if f not in hit["files"]]
                    hit["score"] += weight[search["kind"]]
                    hit["found_by"].append(search["kind"])

        async def project_searches(project: Project) -> None:
            if plan.get("files"):  # the named files first: every search of this project is about them
                files = await self._files_at_head(project)
                named[project.name], cut[project.name] = resolve(project.name, plan["files"], files, plan.get("path"))
            async with anyio.create_task_group() as tg:
                for search in plan["searches"]:
                    tg.start_soon(one, project, search)

        projects = [p for p in query.projects if p.name in plan["projects"]]
        with expert_errors(self.name):
            try:
                async with anyio.create_task_group() as tg:
                    for project in projects:
                        tg.start_soon(project_searches, project)
            finally:  # what was resolved is in the receipt, even when the deadline cut the searches
                if plan.get("files"):
                    plan["resolved"] = [r.to_dict() for p in projects for r in named.get(p.name, [])]
                    if sum(cut.values()):
                        plan["resolved_dropped"] = sum(cut.values())  # matches past MAX_MATCHES per name
        # score desc, then newest first, then (project, sha) so equal inputs give equal output
        ranked = sorted(hits.items(), key=lambda kv: (-kv[1]["score"], _neg_date(kv[1]["date"]), kv[0]))
        top = ranked[: query.limit]
        targets: dict[tuple[str, str], str] = {}  # (project, sha) → the named file it changed
        for (project_name, sha), h in top:
            files = [f for f in h["files"] if not is_excluded(f)]
            target = next((f for f in files if any(r.covers(f) for r in named.get(project_name, ()))), None)
            if target is not None:
                targets[(project_name, sha)] = target
        diffs = await self._diffs(projects, targets) if targets else {}
        cut_at = {p.name: _shallow_boundary(p.root) for p in projects}
        items = [self._item(project_name, sha, h, targets, diffs) for (project_name, sha), h in top]
        return [
            # a shallow clone's oldest commit holds every file as if it had added it: never "where
            # this was introduced" (agents often work in `git clone --depth 1` checkouts)
            replace(e, flags=(*e.flags, "history-truncated")) if e.meta["sha"] in cut_at[e.project] else e
            for e in items
        ]

    async def _diffs(
        self, projects: list[Project], targets: dict[tuple[str, str], str]
    ) -> dict[tuple[str, str], tuple[str, int, int]]:
        """The diff hunk each (project, commit) made to its named file: one ``git show`` per project."""
        by_project: dict[str, dict[str, str]] = defaultdict(dict)
        for (project_name, sha), path in targets.items():
            by_project[project_name][sha] = path
        out: dict[tuple[str, str], tuple[str, int, int]] = {}

        async def one(project: Project, wanted: dict[str, str]) -> None:
            # in rank order: should a huge diff fill the output cap, the best-ranked commits have theirs
            argv = self._git("show", "--no-color", "--no-ext-diff", "--format=%x1e%H", "-U3", *wanted)
            argv += ["--", *sorted({f":(literal){p}" for p in wanted.values()})]
            res = await run_process(
                argv, expert=self.name, cwd=project.root, max_output=MAX_SHOW_BYTES, sweep_on_exit=False
            )
            with expert_errors(self.name):
                sections = hunks_by_file(res.stdout)
            for sha, path in wanted.items():
                hunk = hunk_for(sections.get(sha, {}), path)
                if hunk is not None:
                    out[(project.name, sha)] = hunk

        async with anyio.create_task_group() as tg:
            for project in projects:
                if by_project.get(project.name):
                    tg.start_soon(one, project, by_project[project.name])
        return out

    @staticmethod
    def _item(
        project_name: str,
        sha: str,
        h: dict[str, Any],
        targets: dict[tuple[str, str], str],
        diffs: dict[tuple[str, str], tuple[str, int, int]],
    ) -> Evidence:
        files = [f for f in h["files"] if not is_excluded(f)]
        content = f"{sha[:12]} {h['date'][:10]} {h['author']}: {h['subject']}"
        meta: dict[str, Any] = {
            "sha": sha,
            "date": h["date"],
            "author": h["author"],
            "subject": h["subject"],
            "files": files[:50],
            "found_by": sorted(set(h["found_by"])),
        }
        target = targets.get((project_name, sha))
        path, start, end = (files[0] if files else ""), 1, 1
        if target is not None:
            path = target
            diff = diffs.get((project_name, sha))
            if diff is not None:
                hunk, start, end = diff
                content += "\n" + hunk
                meta["diff_of"] = target  # the screen drops this hunk if the file is withheld
        if "diff_of" not in meta and files:
            content += "\n" + "\n".join(f"  {f}" for f in files[:20])
        return Evidence(
            project=project_name,
            path=path,
            kind="commit",
            start_line=start,
            end_line=end,
            content=content,
            score=h["score"],
            meta=meta,
        )


def _shallow_boundary(root: Path) -> frozenset[str]:
    """The commits a shallow clone's history stops at (``.git/shallow``); empty for a full clone."""
    try:
        return frozenset((root / ".git" / "shallow").read_text().split())
    except (OSError, UnicodeDecodeError):
        return frozenset()


def _neg_date(date: str) -> tuple[int, ...]:
    return tuple(-ord(c) for c in date)


def _parse_log(stdout: bytes) -> list[tuple[str, str, str, str, list[str]]]:
    out = []
    for record in stdout.decode("utf-8", "replace").split("\x1e"):
        if not record.strip():
            continue
        head, _, rest = record.partition("\n")
        sha, date, author, subject = head.split("\x1f", 3)
        files = [line.strip() for line in rest.splitlines() if line.strip()]
        out.append((sha, date, author, subject, files))
    return out
