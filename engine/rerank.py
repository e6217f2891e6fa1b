"""Rerank features: what is known about one fused item and the question, as numbers in [0, 1].

Pure functions; the ``rerank`` node (:mod:`engine.nodes.rerank`) scores the top fused items with
a linear model over these, weights from ``priors.yaml: rerank`` (fitted by ``engine tune
--rerank`` on the dev splits of eval suites, :mod:`engine.tune_rerank`). Every feature is general —
nothing names a suite, a repository or a file:

* ``rrf`` — the item's fused score over the best fused score (the first pass's verdict);
* ``pos`` — 1 / its fused position;
* ``agree`` — how many experts and lanes returned it (4 or more: 1.0);
* ``src.<expert or lane>`` — 1 / its rank in that expert's (or lane's) own list;
* ``ident`` — share of the question's identifiers found in the item (path, symbol or lines);
* ``ident_def`` — the item *is* a definition of a name the question uses;
* ``path_mention`` — the question names this file (its path, the file of a stack-trace frame,
  its dotted module path; a bare file name counts half);
* ``path_words`` — share of the words of the file's name and folder that the question uses;
* ``test`` / ``doc`` / ``packaging`` — file kinds: a test, prose documentation, a packaging or
  release-notes copy (``PKG-INFO``, ``CHANGELOG``, ``HISTORY``, ``NEWS``, lock files);
* ``definition`` — a definition (symbol index row, typed analysis or grep's definition line);
* ``reference`` — a use of a name (a call, an import, a base class) from the symbol experts;
* ``semantic_only`` — only embedding similarity supports it;
* ``project_named`` — the question names the item's project;
* ``project_excluded`` — the question rules the item's project out ("outside X", "other than X").
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import PurePosixPath

from .index.tokenize import code_tokens, split_identifier
from .items import AnswerItem
from .types import Features
from .workspace import is_doc_file, is_test_file

FEATURES = (
    "rrf",
    "pos",
    "agree",
    "ident",
    "ident_def",
    "path_mention",
    "path_words",
    "test",
    "doc",
    "packaging",
    "definition",
    "reference",
    "semantic_only",
    "project_named",
    "project_excluded",
)
SOURCE_PREFIX = "src."
FRAME_FILE = re.compile(r'File "([^"\n]+\.\w+)"')
MODULE = re.compile(r"(?<![\w.])[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*){1,}(?![\w(])")
PACKAGING = re.compile(
    r"^(pkg-info|changelog|changes|history|news|releases?|authors|contributors|license|licence|copying|notice)"
    r"(\.(md|rst|txt|markdown))?$|\.lock$|^package-lock\.json$|\.egg-info$",
    re.I,
)
EXCLUDING = r"\b(?:outside(?: of)?|other than|besides|except(?: for)?|apart from|not in|beyond)\s+(?:the\s+)?"
GENERIC_PATH_WORDS = frozenset(
    {"src", "lib", "init", "index", "main", "mod", "utils", "util", "base", "core", "py", "ts", "js", "tests", "test"}
)


def is_packaging(path: str) -> bool:
    """A packaging or release-notes copy: PKG-INFO (a README copy), CHANGELOG, HISTORY, lock files."""
    p = PurePosixPath(path)
    return bool(PACKAGING.search(p.name)) or any(part.endswith(".egg-info") for part in p.parts[:-1])


@dataclass(frozen=True, slots=True)
class QuestionSignals:
    """What the features compare items against, read once per question."""

    identifiers: frozenset[str]  # last components, lowercased
    words: frozenset[str]  # code tokens of the question
    mentions: tuple[str, ...]  # paths, frame files, dotted module paths (as paths)
    projects: frozenset[str]  # project names the question uses
    excluded: frozenset[str] = frozenset()  # project names it rules out ("outside X")

    @classmethod
    def of(cls, question: str, features: Features, projects: Iterable[str]) -> QuestionSignals:
        idents = {i.split(".")[-1].lower() for i in features.identifiers}
        idents |= {lit.lower() for lit in features.literals if re.fullmatch(r"[A-Za-z_]\w{2,}", lit)}
        mentions = list(features.paths) + FRAME_FILE.findall(question)
        for m in MODULE.findall(question):
            if m.count(".") >= 2:  # pkg.mod.Name: the module itself, or the module of an attribute
                mentions += [m.replace(".", "/"), m.rsplit(".", 1)[0].replace(".", "/")]
        lower = question.lower()
        named = {p for p in projects if re.search(rf"(?<![\w-]){re.escape(p.lower())}(?![\w-])", lower)}
        excluded = {p for p in named if re.search(EXCLUDING + re.escape(p.lower()) + r"(?![\w-])", lower)}
        return cls(
            identifiers=frozenset(i for i in idents if len(i) >= 3),
            words=frozenset(code_tokens(question, stop_words=True)),
            mentions=tuple(dict.fromkeys(m.strip("/") for m in mentions if m.strip("/"))),
            projects=frozenset(named),
            excluded=frozenset(excluded),
        )


def path_mention(path: str, mentions: Sequence[str]) -> float:
    """1.0 when a mention names this file (suffix either way, extension optional), 0.5 for its bare name."""
    exact, stems, tails, names = _mention_index(tuple(mentions))
    mine_forms, name = _path_forms(path)
    if path in tails:  # a mention ends with "/" + the path
        return 1.0
    for mine in mine_forms:
        if mine in exact:  # the mention, or the mention without its suffix
            return 1.0
        i = mine.find("/")
        while i >= 0:  # mine ends with "/" + a mention without its suffix
            if mine[i + 1 :] in stems:
                return 1.0
            i = mine.find("/", i + 1)
    return 0.5 if name in names else 0.0


@lru_cache(maxsize=64)
def _mention_index(
    mentions: tuple[str, ...],
) -> tuple[frozenset[str], frozenset[str], frozenset[str], frozenset[str]]:
    """A question's mentions as sets, made once per question (not once per item and mention):
    (each folder mention with and without its suffix, those without, every tail after a "/" of
    a folder mention, the bare names)."""
    exact: set[str] = set()
    stems: set[str] = set()
    tails: set[str] = set()
    names: set[str] = set()
    for m in mentions:
        slashed, m_stem = _mention_form(m)
        if not slashed:
            names.add(m)
            continue
        exact.update((m, m_stem))
        stems.add(m_stem)
        i = m.find("/")
        while i >= 0:
            tails.add(m[i + 1 :])
            i = m.find("/", i + 1)
    return frozenset(exact), frozenset(stems), frozenset(tails), frozenset(names)


# cached: a long issue text names dozens of paths and modules, each compared with 30 items; the
# PurePosixPath parsing of every pair was 1 ms of the answer's tail on swebench (issue 10)
@lru_cache(maxsize=8192)
def _path_forms(path: str) -> tuple[tuple[str, str, str], str]:
    """(the path, without its suffix, without a trailing ``/__init__``), and its file name."""
    p = PurePosixPath(path)
    stem = str(p.with_suffix(""))
    return (path, stem, stem.removesuffix("/__init__")), p.name


@lru_cache(maxsize=8192)
def _mention_form(m: str) -> tuple[bool, str]:
    """Does the mention name a folder path, and the mention without its suffix (if it has one)."""
    if "/" not in m:
        return False, m
    pm = PurePosixPath(m)
    return True, (str(pm.with_suffix("")) if pm.suffix else m)


@lru_cache(maxsize=8192)
def path_tokens(path: str) -> frozenset[str]:
    """The words naming a file: its name's and its parent folder's (a file's path never changes them)."""
    p = PurePosixPath(path)
    parts = [p.stem, *(p.parts[-2:-1] if len(p.parts) > 1 else ())]
    toks = {t.lower() for part in parts for t in [part, *split_identifier(part)] if len(t) >= 3}
    return frozenset(toks - GENERIC_PATH_WORDS)


@lru_cache(maxsize=8192)
def file_kinds(path: str) -> tuple[float, float, float]:
    """(test, doc, packaging) for a path, computed once per path and process."""
    return float(is_test_file(path)), float(is_doc_file(path)), float(is_packaging(path))


@lru_cache(maxsize=8192)
def path_words(path: str, words: frozenset[str]) -> float:
    """Share of the words naming the file (its name and parent folder) that the question uses."""
    toks = path_tokens(path)
    return len(toks & words) / len(toks) if toks else 0.0


def features(item: AnswerItem, position: int, best_score: float, q: QuestionSignals) -> dict[str, float]:
    """The item's features (only the non-zero ones; fractions rounded to 4 places). Straight-line
    code, not a dict comprehension over every feature: it runs for the top 30 items of every
    answer, after the slowest expert (issue 10)."""
    out: dict[str, float] = {}
    rrf = item.score / best_score if best_score > 0 else 0.0
    if rrf:
        out["rrf"] = round(rrf, 4)
    out["pos"] = round(1.0 / position, 4)
    if item.sources:
        out["agree"] = min(len(item.sources), 4) / 4
    meta = item.meta
    definition = meta.get("role") == "definition" or meta.get("definition") is True
    if q.identifiers:
        hay = f"{item.path} {item.symbol or ''} {item.content}".lower()
        found = sum(1 for i in q.identifiers if i in hay)
        if found:
            out["ident"] = round(found / len(q.identifiers), 4)
        if definition and (item.symbol or "").split(".")[-1].lower() in q.identifiers:
            out["ident_def"] = 1.0
    if q.mentions:
        mention = path_mention(item.path, q.mentions)
        if mention:
            out["path_mention"] = mention
    words = path_words(item.path, q.words)
    if words:
        out["path_words"] = round(words, 4)
    test, doc, packaging = file_kinds(item.path)
    if test:
        out["test"] = test
    if doc:
        out["doc"] = doc
    if packaging:
        out["packaging"] = packaging
    if definition:
        out["definition"] = 1.0
    if meta.get("role") == "reference":
        out["reference"] = 1.0
    if item.tier == "semantic-only":
        out["semantic_only"] = 1.0
    if item.project in q.projects:
        out["project_named"] = 1.0
    if item.project in q.excluded:
        out["project_excluded"] = 1.0
    for s in item.sources:
        out[SOURCE_PREFIX + s.expert] = round(1.0 / s.rank, 4)
    return out


def score(feats: Mapping[str, float], weights: Mapping[str, float]) -> float:
    return math.fsum(weights.get(k, 0.0) * v for k, v in feats.items())


def known_feature(name: str) -> bool:
    return name in FEATURES or (name.startswith(SOURCE_PREFIX) and len(name) > len(SOURCE_PREFIX))


def rerank(cands: Sequence[AnswerItem], q: QuestionSignals, weights: Mapping[str, float]) -> list[AnswerItem]:
    """``cands`` (fused order) ordered by the linear score of their features, ranks from 1; each
    item's features go into its sub-scores as ``rr.<feature>`` and its new score as ``rerank``."""
    best = max(it.score for it in cands)
    rows = []
    for pos, it in enumerate(cands, start=1):
        f = features(it, pos, best, q)
        rows.append((round(score(f, weights), 6), pos, it, f))
    rows.sort(key=lambda r: (-r[0], r[1]))
    out = []
    for n, (s, _, it, f) in enumerate(rows, start=1):
        sub = dict(it.subscores)
        for k, v in f.items():
            sub[_RR_KEYS.get(k) or _rr_key(k)] = v
        sub["rerank"] = s
        out.append(it.ranked(n, s, sub))
    return out


_RR_KEYS: dict[str, str] = {}  # feature → "rr.<feature>": made once, not per item of every answer


def _rr_key(feature: str) -> str:
    key = _RR_KEYS[feature] = "rr." + feature
    return key
