"""History: ``git log`` pickaxe (``-S``), diff regex (``-G``), message search (``--grep``) and per-file history.

Items are of kind ``commit`` with sha, date, author, subject and the files touched. Every
question-derived string is one argv element attached to its option (``-S<text>``,
``--grep=<text>``), so it can never be read as another option or a shell word.

Ranking: commits found by more of the searches first (pickaxe on an exact string counts
double: it is where the string was introduced or removed), then newest first.
"""

from __future__ import annotations

from typing import Any

import anyio

from ..errors import ExpertUnconfigured
from ..types import Evidence, Project, Query
from ..workspace import is_excluded, normalize_scope_path
from .base import POSITIVE_INT, Expert, expert_errors, run_process, settings

_FMT = "--format=%x1e%H%x1f%aI%x1f%an%x1f%s"


class GitExpert(Expert):
    adapter = "git"
    reads_history = True
    settings_schema = settings({"binary": {"type": "string", "minLength": 1}, "max_commits": POSITIVE_INT})

    def plan(self, query: Query) -> dict[str, Any]:
        f = query.features
        searches: list[dict[str, str]] = []
        for lit in (f.literals or f.identifiers)[:3]:
            searches.append({"kind": "pickaxe", "arg": f"-S{lit}"})
        if f.regex:
            searches.append({"kind": "diff-regex", "arg": f"-G{f.regex}"})
        words = [k for k in f.keywords if len(k) >= 4][:4]
        for w in words:
            searches.append({"kind": "message", "arg": f"--grep={w}"})
        for p in f.paths[:2]:
            searches.append({"kind": "file-history", "arg": p})
        if not searches:
            raise ExpertUnconfigured("nothing in the question to search history for", expert=self.name)
        git_projects = [p.name for p in query.projects if p.is_git]
        return {
            "searches": searches,
            "max_commits": int(self.settings.get("max_commits", 50)),
            "path": normalize_scope_path(query.scope.path),
            "projects": git_projects,
        }

    async def search(self, query: Query, plan: dict[str, Any]) -> list[Evidence]:
        hits: dict[tuple[str, str], dict[str, Any]] = {}
        weight = {"pickaxe": 2.0, "diff-regex": 1.5, "message": 1.0, "file-history": 1.0}

        async def one(project: Project, search: dict[str, str]) -> None:
            argv = [
                self.settings.get("binary", "git"),
                "--no-pager",
                "-c",
                "core.quotepath=off",
                "log",
                "--no-color",
                "--name-only",
                _FMT,
                f"--max-count={plan['max_commits']}",
            ]
            if search["kind"] == "message":
                argv.append("--regexp-ignore-case")
            if search["kind"] == "file-history":
                argv += ["--", search["arg"]]
            else:
                argv.append(search["arg"])
                argv += ["--"] + ([plan["path"]] if plan.get("path") else [])
            res = await run_process(argv, expert=self.name, cwd=project.root, ok_codes=(0, 128), sweep_on_exit=False)
            if res.returncode == 128:  # empty repo (no commits yet) or a path git does not know
                return
            with expert_errors(self.name):
                for sha, date, author, subject, files in _parse_log(res.stdout):
                    key = (project.name, sha)
                    hit = hits.setdefault(
                        key,
                        {
                            "sha": sha,
                            "date": date,
                            "author": author,
                            "subject": subject,
                            "files": files,
                            "score": 0.0,
                            "found_by": [],
                        },
                    )
                    hit["score"] += weight[search["kind"]]
                    hit["found_by"].append(search["kind"])

        projects = [p for p in query.projects if p.name in plan["projects"]]
        with expert_errors(self.name):
            async with anyio.create_task_group() as tg:
                for project in projects:
                    for search in plan["searches"]:
                        tg.start_soon(one, project, search)
        # score desc, then newest first, then (project, sha) so equal inputs give equal output
        ranked = sorted(hits.items(), key=lambda kv: (-kv[1]["score"], _neg_date(kv[1]["date"]), kv[0]))
        items = []
        for (project_name, sha), h in ranked[: query.limit]:
            files = [f for f in h["files"] if not is_excluded(f)]
            content = f"{sha[:12]} {h['date'][:10]} {h['author']}: {h['subject']}"
            if files:
                content += "\n" + "\n".join(f"  {f}" for f in files[:20])
            items.append(
                Evidence(
                    project=project_name,
                    path=files[0] if files else "",
                    kind="commit",
                    start_line=1,
                    end_line=1,
                    content=content,
                    score=h["score"],
                    meta={
                        "sha": sha,
                        "date": h["date"],
                        "author": h["author"],
                        "subject": h["subject"],
                        "files": files[:50],
                        "found_by": sorted(set(h["found_by"])),
                    },
                )
            )
        return items


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
