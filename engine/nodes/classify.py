"""classify: cheap local rules → intent class, confidence, the rule that fired (DESIGN §6.1).

The rules are data (:data:`RULES`) and part of ``config_version``. Order matters: the first
rule that matches wins. Below ``priors.classifier.abstain_below`` the classifier abstains and
the gate runs the documented default expert set. A caller's ``intent`` or a class pipeline run
directly overrides the rules (and the receipt says so).
"""

from __future__ import annotations

import re
from typing import Any

from ..index.tokenize import STOP_WORDS
from ..types import Classification, Features
from .base import Node, RunState, node_kind

#: (name, class, confidence, regex over the lowercased question); first match wins
RULES: list[tuple[str, str, float, str]] = [
    (
        "history-phrase",
        "history",
        0.85,
        r"\b(when (did|was|were)|why (was|were|did)\b.*\b(change|changed|added|removed|introduced)|who (changed|added|"
        r"removed|wrote)|which commit|what commit|git (log|blame|history)|history of|changed in|introduced in|"
        r"last (changed|modified))",
    ),
    (
        "impact-phrase",
        "cross-repo-impact",
        0.8,
        r"\b(who (calls|uses|imports|references)|what (calls|uses|breaks|depends)|callers? of|call sites? of|"
        r"usages? of|references? to|used by|depends on|impact of|would break|affected by|importers of)\b",
    ),
    (
        "definition-phrase",
        "typed-symbol",
        0.85,
        r"\b(where is|where's|where are)\b.*\b(defined|declared|implemented)\b|\b(definition|declaration|signature) "
        r"of\b|\b(subclasses|implementations|implementers) of\b|\bwhat (subclasses|implements|extends)\b",
    ),
    (
        "docs-phrase",
        "docs",
        0.7,
        r"\b(how (do|can|should) (i|we|you)|how to|docs? (for|about|on)|documentation|readme|guide (to|for)|"
        r"tutorial|getting started|what does the doc)\b",
    ),
]
QUOTED = re.compile(r'"([^"\n]{2,})"|(?<![\w])\'([^\'\n]{2,}?)\'(?![\w])|`([^`\n]+)`|“([^”\n]{2,})”')
REGEX = re.compile(r"(?:^|\s)/((?:[^/\s\\]|\\.)*[\^$.*+?()\[\]{}|\\](?:[^/\\]|\\.)*)/(?=\s|$|[.,;:!?])")
IDENT = re.compile(
    r"\b(?:[A-Za-z_][A-Za-z0-9_]*\.)+[A-Za-z_][A-Za-z0-9_]*\b"  # dotted
    r"|\b[a-z][a-z0-9]*(?:[A-Z][a-z0-9]*)+\b"  # camelCase
    r"|\b(?:[A-Z][a-z0-9]+){2,}[A-Z]?\b"  # PascalCase with 2+ humps
    r"|\b_*[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+_*\b"  # snake_case / SCREAMING_CASE
    r"|\b[A-Za-z_]\w*(?=\(\))"
)  # name()
NAMED = re.compile(
    r"\b(?:where is|where's|definition of|class|function|method|def|interface|struct|type|"
    r"subclasses of|implementations of|callers of|usages of|references to|who calls|who uses)\s+"
    r"`?([A-Za-z_][A-Za-z0-9_.]*)`?"
)
PATH = re.compile(
    r"(?<![\w/])(?:[\w.-]+/)+[\w.-]+\.\w+|\b[\w-]+\.(?:py|js|ts|tsx|go|rs|java|md|rst|yaml|yml|toml|json)\b"
)
WORD = re.compile(r"[A-Za-z][A-Za-z0-9_'-]*")
FILE_EXT_WORDS = {"py", "js", "ts", "md", "txt"}
MAX_FEATURES = {"literals": 8, "identifiers": 16, "keywords": 64, "paths": 8}
#: a question this long is a description (an issue, a stack trace, a paragraph), not a lookup:
#: its quotes and phrases are incidental, so it is searched as a conceptual question
LONG_QUESTION_WORDS = 40


def _uniq(xs: list[str], n: int) -> tuple[str, ...]:
    return tuple(dict.fromkeys(x for x in xs if x))[:n]


def extract_features(question: str) -> Features:
    literals = [next(g for g in m.groups() if g) for m in QUOTED.finditer(question)]
    regex_m = REGEX.search(question)
    regex = regex_m.group(1) if regex_m else None
    unquoted = QUOTED.sub(" ", question)
    idents = [m.group(0).strip(".") for m in IDENT.finditer(unquoted)]
    idents += [
        m.group(1).strip(".")
        for m in NAMED.finditer(unquoted)
        if m.group(1).lower() not in STOP_WORDS and len(m.group(1)) > 1
    ]
    paths = [m.group(0) for m in PATH.finditer(question)]
    idents = [i for i in idents if i not in paths and i.split(".")[-1] not in FILE_EXT_WORDS]
    keywords = []
    for w in WORD.findall(unquoted):
        lw = w.lower().strip("'-")
        if len(lw) >= 3 and lw not in STOP_WORDS:
            keywords.append(lw)
    return Features(
        literals=_uniq(literals, MAX_FEATURES["literals"]),
        regex=regex,
        identifiers=_uniq(idents, MAX_FEATURES["identifiers"]),
        keywords=_uniq(keywords, MAX_FEATURES["keywords"]),
        paths=_uniq(paths, MAX_FEATURES["paths"]),
    )


def classify(question: str, abstain_below: float) -> Classification:
    features = extract_features(question)
    text = question.lower()
    klass, confidence, rule = "conceptual", 0.3, "fallback"
    if len(WORD.findall(question)) >= LONG_QUESTION_WORDS:
        return Classification("conceptual", 0.7, "long-description", False, features)
    for name, cls, conf, pattern in RULES:
        if re.search(pattern, text):
            klass, confidence, rule = cls, conf, name
            break
    else:
        if features.literals or features.regex:
            klass, confidence, rule = "identifier", 0.9, "quoted-literal" if features.literals else "regex-literal"
        elif features.identifiers:
            klass, confidence, rule = "typed-symbol", 0.75, "code-token"
        elif len(features.keywords) >= 3:
            klass, confidence, rule = "conceptual", 0.6, "natural-language"
    return Classification(klass, confidence, rule, confidence < abstain_below, features)


def rules_fingerprint() -> dict[str, Any]:
    """The classifier's rules as data, hashed into config_version."""
    return {
        "rules": RULES,
        "quoted": QUOTED.pattern,
        "regex": REGEX.pattern,
        "ident": IDENT.pattern,
        "named": NAMED.pattern,
        "path": PATH.pattern,
        "limits": MAX_FEATURES,
        "long_words": LONG_QUESTION_WORDS,
    }


@node_kind
class ClassifyNode(Node):
    kind = "classify"

    async def run(self, state: RunState) -> None:
        if state.classification is not None:  # already classified by the router that dispatched here
            return None
        req = state.request
        c = classify(req.question, state.config.priors.abstain_below)
        if req.intent:
            c = Classification(req.intent, 1.0, "caller-intent", False, c.features)
        elif state.pipeline.klass:
            c = Classification(state.pipeline.klass, 1.0, f"pipeline-class:{state.pipeline.name}", False, c.features)
        state.classification = c
        return None
