"""The classifier's rules as data: ``classifier.yaml`` beside priors.yaml, loaded, checked, applied.

A config folder's ``classifier.yaml`` holds everything the classifier decides with: the regexes
that read features out of a question (quoted literals, a ``/regex/``, identifiers, paths, words),
how many of each are kept, and the ordered rules (name, class, confidence, conditions). The
first rule whose conditions all hold wins; none ⇒ ``fallback``. Conditions:

* ``pattern`` — a regex searched in the lowercased question;
* ``min_words`` / ``max_words`` — the question's word count (``min_words`` of the
  ``long-description`` rule is the long-description threshold);
* ``has`` — at least one of the named features was found (``code_identifiers``: identifiers
  shaped like code — with ``_``, ``.``, ``()`` or a capital letter — not a plain word caught after a
  cue like "type" or "function");
* ``min_keywords`` — at least this many content words.

A regex that does not compile is a :class:`~engine.errors.SchemaError` naming the file, the
line and the path (``rules/3/pattern``). The raw file is hashed into ``config_version`` by the
loader (:meth:`engine.spec.ConfigSet.config_version`), so ``engine diff`` sees each revision's
own rules. A config folder without ``classifier.yaml`` gets ``engine/classifier_v0.yaml``:
the rules exactly as they were when they lived in code, so an older config folder classifies as
it always did.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from .errors import SchemaError
from .index.tokenize import STOP_WORDS
from .types import Classification, Features
from .yamlfile import line_of, load_yaml

FILE_NAME = "classifier.yaml"
FEATURE_KINDS = ("literals", "regex", "identifiers", "code_identifiers", "paths")
PLAIN_WORD = re.compile(r"[a-z]+")


def feature_present(features: Features, kind: str) -> bool:
    if kind == "code_identifiers":
        return any(not PLAIN_WORD.fullmatch(i) for i in features.identifiers)
    return bool(getattr(features, kind))


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    klass: str
    confidence: float
    pattern: re.Pattern[str] | None = None
    min_words: int | None = None
    max_words: int | None = None
    has: tuple[str, ...] = ()
    min_keywords: int | None = None

    def holds(self, text_lower: str, words: int, features: Features) -> bool:
        if self.min_words is not None and words < self.min_words:
            return False
        if self.max_words is not None and words > self.max_words:
            return False
        if self.has and not any(feature_present(features, kind) for kind in self.has):
            return False
        if self.min_keywords is not None and len(features.keywords) < self.min_keywords:
            return False
        return self.pattern is None or self.pattern.search(text_lower) is not None


@dataclass(frozen=True, slots=True)
class ClassifierSpec:
    """The compiled classifier.yaml; ``raw`` is what config_version hashes."""

    quoted: re.Pattern[str]
    regex: re.Pattern[str]
    identifier: re.Pattern[str]
    named: re.Pattern[str]
    path: re.Pattern[str]
    word: re.Pattern[str]
    file_ext_words: frozenset[str]
    limits: Mapping[str, int]
    rules: tuple[Rule, ...]
    fallback: tuple[str, float]
    file: Path
    raw: Mapping[str, Any]
    ignore: re.Pattern[str] | None = None  # embedded instructions: removed before features and rules

    def rule_names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.rules)


def default_file() -> Path:
    """The rules a config folder without a classifier.yaml gets: the rules as they were while they
    lived in code, so an older config folder classifies as it always did (the shipped config's own
    rules are the repository's classifier.yaml, packaged with the rest of the default config)."""
    return Path(str(resources.files("engine").joinpath("classifier_v0.yaml")))


FEATURE_PATTERNS = ("quoted", "regex", "identifier", "named", "path", "word")
#: features whose text is a capture group (quoted: the first non-empty group)
GROUPED_FEATURES = ("quoted", "regex", "named")


def _compile(pattern: str, file: Path, path: list[Any]) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise SchemaError(
            f"not a valid regex: {exc}", file=str(file), path="/".join(map(str, path)), line=line_of(file, path)
        ) from None


def load_classifier(config_root: Path) -> ClassifierSpec:
    """``config_root/classifier.yaml`` (or the engine's default), validated and compiled.

    Raises:
        SchemaError: the file does not match its schema, a regex does not compile, or two rules
            share a name.
    """
    file = config_root / FILE_NAME
    if not file.is_file():
        file = default_file()
    raw = load_yaml(file, "classifier")
    f = raw["features"]
    rules: list[Rule] = []
    seen: set[str] = set()
    for i, r in enumerate(raw["rules"]):
        if r["name"] in seen:
            where: list[Any] = ["rules", i, "name"]
            raise SchemaError(
                f"rule name {r['name']!r} used twice", file=str(file), path=f"rules/{i}/name", line=line_of(file, where)
            )
        seen.add(r["name"])
        rules.append(
            Rule(
                name=r["name"],
                klass=r["class"],
                confidence=float(r["confidence"]),
                pattern=_compile(r["pattern"], file, ["rules", i, "pattern"]) if "pattern" in r else None,
                min_words=r.get("min_words"),
                max_words=r.get("max_words"),
                has=tuple(r.get("has", ())),
                min_keywords=r.get("min_keywords"),
            )
        )
    features = {k: _compile(f[k], file, ["features", k]) for k in FEATURE_PATTERNS}
    for k in GROUPED_FEATURES:  # their text is capture group 1: a pattern without one failed every question it met
        if features[k].groups < 1:
            where = ["features", k]
            raise SchemaError(
                "needs a capture group: the text it finds is group 1",
                file=str(file),
                path=f"features/{k}",
                line=line_of(file, where),
            )
    return ClassifierSpec(
        **features,
        file_ext_words=frozenset(raw.get("file_ext_words", ())),
        limits=dict(raw["limits"]),
        rules=tuple(rules),
        fallback=(raw["fallback"]["class"], float(raw["fallback"]["confidence"])),
        file=file,
        raw=raw,
        ignore=_compile(raw["ignore"], file, ["ignore"]) if "ignore" in raw else None,
    )


def _uniq(xs: list[str], n: int) -> tuple[str, ...]:
    return tuple(dict.fromkeys(x for x in xs if x))[:n]


def extract_features(question: str, spec: ClassifierSpec) -> Features:
    """What the question names: literals, a regex, identifiers, keywords and paths (in order, capped)."""
    literals = [g for m in spec.quoted.finditer(question) if (g := next((g for g in m.groups() if g), None))]
    regex_m = spec.regex.search(question)
    regex = regex_m.group(1) if regex_m else None
    unquoted = spec.quoted.sub(" ", question)
    idents = [m.group(0).strip(".") for m in spec.identifier.finditer(unquoted)]
    idents += [
        m.group(1).strip(".")
        for m in spec.named.finditer(unquoted)
        if m.group(1).lower() not in STOP_WORDS and len(m.group(1)) > 1
    ]
    paths = [m.group(0) for m in spec.path.finditer(question)]
    idents = [i for i in idents if i not in paths and i.split(".")[-1] not in spec.file_ext_words]
    keywords = []
    for w in spec.word.findall(unquoted):
        lw = w.lower().strip("'-")
        if len(lw) >= 3 and lw not in STOP_WORDS:
            keywords.append(lw)
    limits = spec.limits
    return Features(
        literals=_uniq(literals, limits["literals"]),
        regex=regex,
        identifiers=_uniq(idents, limits["identifiers"]),
        keywords=_uniq(keywords, limits["keywords"]),
        paths=_uniq(paths, limits["paths"]),
    )


def routed_text(question: str, spec: ClassifierSpec) -> tuple[str, int]:
    """The question as the rules and features read it, and how many characters they do not: the
    text ``ignore`` matches (instructions embedded in a question — a role-tagged block, chat
    markup — are data for the experts, never a say in where the question goes). When it matches
    everything, the question itself."""
    if spec.ignore is None:
        return question, 0
    parts: list[str] = []
    at = ignored = 0
    for m in spec.ignore.finditer(question):
        parts.append(question[at : m.start()])
        ignored += m.end() - m.start()
        at = m.end()
    if not ignored:
        return question, 0
    parts.append(question[at:])
    routed = " ".join(p.strip() for p in parts if p.strip())
    return (routed, ignored) if routed else (question, 0)


def classify(question: str, spec: ClassifierSpec, abstain_below: float) -> Classification:
    """The first rule that holds (else the fallback); below ``abstain_below`` the classifier abstains."""
    question, ignored = routed_text(question, spec)
    routed = question if ignored else None
    features = extract_features(question, spec)
    words = len(spec.word.findall(question))
    text = question.lower()
    klass, confidence = spec.fallback
    rule = "fallback"
    for r in spec.rules:
        if r.holds(text, words, features):
            klass, confidence, rule = r.klass, r.confidence, r.name
            break
    return Classification(klass, confidence, rule, confidence < abstain_below, features, ignored, routed)
