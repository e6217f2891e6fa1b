"""Content scanning for the secrets policy: detect-secrets behind a prefilter built from its own regexes.

detect-secrets runs every plugin on every line through a dependency-injection layer (14–80
files/s here). :class:`Detector` first finds the few candidate lines in C with each plugin's own
regexes (and the keyword plugin's words), then gives only those detect-secrets' full per-line
analysis with their context: the same verdicts, measured, 30–40x faster
(docs/adr/0008-secrets-detector.md, ``benchmarks/secrets_detector.py``). The policy built on it
(names, caching, redaction) is :mod:`engine.secrets`.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import pairwise

#: detect-secrets plugins left out: on ordinary source they flag hashes, fixtures and example IPs,
#: and a flag withholds a whole file (measured in docs/adr/0008-secrets-detector.md)
NOISY_PLUGINS = frozenset({"Base64HighEntropyString", "HexHighEntropyString", "IPPublicDetector"})

#: findings of these rules name a *value assigned to a secret-sounding word* (``password = ...``,
#: ``http://user:pass@``), not a credential format: on real code nearly all are examples and test
#: fixtures (``SECRET_KEY = 'development key'`` in flask's config docstring withheld flask's whole
#: config module). They count only when the value looks generated (:func:`looks_generated`);
#: format detectors (AWS, private keys, GitHub, Slack, Stripe, JWT …) always count.
HEURISTIC_RULES = frozenset({"Secret Keyword", "Basic Auth Credentials"})
MIN_GENERATED_CHARS = 12
_PLACEHOLDER = re.compile(
    r"password|passwd|secret|example|sample|dummy|fake|placeholder|changeme|change_me|insecure|"
    r"your|xxx|test|todo|\*\*\*|[<>{}$%\s]",
    re.IGNORECASE,
)


#: a password inside a URL (``scheme://user:password@host``) is delimited by the URL itself: a
#: shorter one is still a credential (``postgres://admin:Xk93mdPq7z@db``)
MIN_URL_PASSWORD_CHARS = 8


def looks_generated(value: str, min_chars: int = MIN_GENERATED_CHARS) -> bool:
    """A value that could be a real credential: long, no placeholder word, no spaces, varied characters."""
    if len(value) < min_chars or _PLACEHOLDER.search(value):
        return False
    classes = sum(bool(re.search(rx, value)) for rx in (r"[a-z]", r"[A-Z]", r"[0-9]", r"[^A-Za-z0-9]"))
    return classes >= 3 and len(set(value)) >= 8


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DOTTED_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:[.:][A-Za-z_][A-Za-z0-9_]*)+")
_FILE_NAME = re.compile(r"\.[A-Za-z]{2,5}$")  # a path or file name (``model/tokenizer.json``), not a key


def _kind(c: str) -> int:
    return 0 if c.islower() else 1 if c.isupper() else 2 if c.isdigit() else 3


def looks_random(value: str) -> bool:
    """A generated value that is not a name: :func:`looks_generated`, not a dotted reference
    (``settings.OPENAI_API_KEY2``) or file name, at least two each of lower-case letters, upper-case
    letters and digits (``sqlalchemy-2.1.9`` is a version), and the character kind (lower, upper,
    digit, other) changing at least every fourth character — random keys switch all the time,
    identifiers only at word boundaries (``getUserAccessTokenFromCache2``: 6 in 28)."""
    if not looks_generated(value) or _DOTTED_NAME.fullmatch(value) or _FILE_NAME.search(value):
        return False
    kinds = [_kind(c) for c in value]
    if min(kinds.count(0), kinds.count(1), kinds.count(2)) < 2:  # two of each: lower, upper, digit
        return False
    switches = sum(1 for a, b in pairwise(kinds) if a != b)
    return switches * 4 >= len(value)


#: credentials detect-secrets does not know (docs/adr/0008-secrets-detector.md, third update):
#: vendor key formats, always a secret; and a secret-named assignment whose value looks random —
#: unquoted (``export AWS_SECRET_ACCESS_KEY=…``, ``.txt`` notes, ``ENV KEY value`` in a
#: Dockerfile) or as call arguments (``define('DB_PASSWORD', '…')``), which its keyword plugin
#: reads only in the quoted forms of a few file types. ``# pragma: allowlist secret`` on the line
#: is honoured as detect-secrets honours it.
_SECRET_WORD = r"(?:secret|passw(?:or)?d|token|api[_-]?key|access[_-]?key|private[_-]?key|auth[_-]?key|credentials?)"
_SECRET_NAME = rf"{_SECRET_WORD}[A-Za-z0-9_.-]*"  # from the word on: a scan for it, not for every name
_SECRET_VALUE = r"([A-Za-z0-9+/=_.~-]{12,})"
#: a password is chosen by a person, not generated: any run of non-space, non-quote, non-bracket
#: characters, judged by :func:`looks_like_password`
_PASSWORD_VALUE = r"([^\s\"'`,;()\[\]{}<>]{8,})"
_AWS_SECRET_NAME = r"aws[_-]?secret[_-]?(?:access[_-]?)?key"
_ALWAYS: Callable[[str], bool] = lambda _value: True  # noqa: E731 - a vendor format is a secret as it stands


def looks_like_password(value: str) -> bool:
    """A password-named value that is a password, not a reference: at least 8 characters of three
    kinds, no placeholder word, not a dotted name, a file name, a path or a passwd-style record
    (``P@ssw0rd2024!!`` is one)."""
    if "/" in value or "=" in value or "\\" in value or value.count(":") > 1:
        return False  # a path, a keyword argument, an escaped literal, a passwd-style record (`1:root:x:…`)
    if _NAME.fullmatch(value):  # no punctuation: a name (`FORBIDDEN_VALUE2`) unless it looks random
        return looks_random(value)
    return looks_generated(value, 8) and not _DOTTED_NAME.fullmatch(value) and not _FILE_NAME.search(value)


#: (rule, regex, what a match's value must look like): group 1 is the value, else the whole match
ENGINE_RULES: tuple[tuple[str, re.Pattern[str], Callable[[str], bool]], ...] = (
    ("OpenAI API Key", re.compile(r"\bsk-(?!ant-)(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{32,}"), _ALWAYS),
    ("Anthropic API Key", re.compile(r"\bsk-ant-[a-z]+[0-9]*-[A-Za-z0-9_-]{32,}"), _ALWAYS),
    ("Hugging Face Token", re.compile(r"\bhf_[A-Za-z0-9]{30,}"), _ALWAYS),
    # the name says what it is: any 40 characters of the AWS secret key alphabet, random-looking or not
    (
        "AWS Secret Key",
        re.compile(
            rf"(?i){_AWS_SECRET_NAME}[\"']?[ \t]*(?:=>|[:= \t])[ \t]*[\"']?([A-Za-z0-9/+]{{40}})(?![A-Za-z0-9/+])"
        ),
        _ALWAYS,
    ),
    (
        "Secret Assignment",
        re.compile(rf"(?i){_SECRET_NAME}[\"']?\s*(?:=>|[:=]|[\"']\s*,)\s*[\"']?{_SECRET_VALUE}"),
        looks_random,
    ),
    (
        "Secret Assignment",
        re.compile(
            rf"(?im)^[ \t]*(?:ENV|ARG|export|setenv|set)[ \t]+[A-Za-z0-9_.-]*{_SECRET_NAME}[ \t]+[\"']?{_SECRET_VALUE}"
        ),
        looks_random,
    ),
    (
        "Password Assignment",
        re.compile(
            rf"(?i)(?:passw(?:or)?d|pwd)[A-Za-z0-9_.-]*[\"']?\s*(?:=>|[:=]|[\"']\s*,)\s*[\"']?{_PASSWORD_VALUE}"
        ),
        looks_like_password,
    ),
)
_ALLOWLISTED = re.compile(r"pragma:\s*allowlist[ -]secret", re.IGNORECASE)
_ENGINE_WORDS = (
    "sk-",
    "hf_",
    "secret",
    "passw",
    "pwd",
    "token",
    "api_key",
    "api-key",
    "apikey",
    "access_key",
    "access-key",
    "accesskey",
    "private_key",
    "private-key",
    "privatekey",
    "auth_key",
    "auth-key",
    "authkey",
    "credential",
)


#: free text (a commit message, an external tool's snippet) is redacted, never withheld, so it
#: may be read more loosely: a random-looking token a few words after a secret word ("set the aws
#: secret to …", "new token: …")
FREE_TEXT_RULE: tuple[str, re.Pattern[str], Callable[[str], bool]] = (
    "Secret In Text",
    re.compile(rf"(?i){_SECRET_WORD}\S*(?:\s+\S+){{0,4}}?\s+[\"'`]?([A-Za-z0-9+/=_.~-]{{16,}})"),
    looks_random,
)


def engine_findings(text: str, *, free_text: bool = False) -> list[Finding]:
    """:data:`ENGINE_RULES` findings in ``text`` (assignments only with a random-looking value;
    ``free_text``: :data:`FREE_TEXT_RULE` too).
    The rules run on the lines that hold one of their words, found by ``str.find`` (a regex that
    starts with ``\\b`` or an alternation is scanned position by position: 1 s per rule for a
    70 MB repository, against ~0.1 s this way)."""
    lowered = text.lower()
    if len(lowered) != len(text):
        lowered = text.translate(_ASCII_LOWER)
    spans: set[tuple[int, int]] = set()
    for word in _ENGINE_WORDS:
        at = lowered.find(word)
        while at != -1:
            lo = lowered.rfind("\n", 0, at) + 1
            hi = lowered.find("\n", at)
            hi = len(lowered) if hi == -1 else hi
            spans.add((lo, hi))
            at = lowered.find(word, hi)
    out: list[Finding] = []
    for lo, hi in sorted(spans):
        line = text[lo:hi]
        if _ALLOWLISTED.search(line):
            continue
        for rule, rx, counts in (*ENGINE_RULES, FREE_TEXT_RULE) if free_text else ENGINE_RULES:
            for m in rx.finditer(line):
                value = m.group(1) if rx.groups else m.group(0)
                if not counts(value):
                    continue
                out.append(Finding(text.count("\n", 0, lo) + 1, f"content:{rule}", value))
    return out


@dataclass(frozen=True, slots=True)
class Finding:
    """One secret found in a text: where it is and which rule found it (never its value)."""

    line: int  # 1-based
    rule: str
    value: str  # the matched secret, kept only in memory for redaction; never reported

    def describe(self) -> str:
        return f"{self.rule} (line {self.line})"


_ASCII_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}


def _lower_pattern(pattern: str) -> str:
    """A case-insensitive regex as a lower-case one for ASCII-lowered text (escapes such as ``\\W`` kept)."""
    return re.sub(r"\\.|[A-Z]", lambda m: m.group(0) if m.group(0).startswith("\\") else m.group(0).lower(), pattern)


def _leading_group(pattern: str) -> str | None:
    """The balanced ``(...)`` group ``pattern`` starts with, or None."""
    depth, i = 0, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":  # a character class: parentheses inside are literal
            j = i + 1 + (pattern[i + 1 : i + 2] == "^")
            j += pattern[j : j + 1] == "]"
            while j < len(pattern) and pattern[j] != "]":
                j += 2 if pattern[j] == "\\" else 1
            i = j + 1
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return pattern[: i + 1]
        i += 1
    return None


def _weak_prefix_stripped(pattern: str) -> str:
    """Drop leading groups that are optional, zero-width or single characters (``(?:\\s|=|:|^)``).

    Any match of ``A·B`` contains a match of ``B`` on the same line, so the result is a superset
    prefilter; what it gains is a literal first token, which Python's regex engine scans for fast.
    """
    while pattern.startswith("(?:"):
        group = _leading_group(pattern)
        rest = pattern[len(group) :] if group else ""
        if not group or not rest or rest[0] in "?*+{":
            break
        body = group[3:-1]
        alternatives = body.split("|") if "(" not in body else []
        weak = (
            group.endswith("|)")
            or re.fullmatch(r"\(\?:(?:\(\?<[=!][^()]*\)\|?)+\)", group) is not None
            or (bool(alternatives) and all(len(a) <= 2 for a in alternatives))
        )
        if not weak:
            break
        pattern = rest
    return _class_run_stripped(pattern)


def _class_run_stripped(pattern: str) -> str:
    """Drop leading character-class runs (``[0-9a-z]{32}-us[0-9]{1,2}`` → ``-us[0-9]{1,2}``) while a
    literal follows. A class that cannot match a newline keeps the match on the same line, and any
    match of ``A·B`` contains one of ``B``: still a superset, but the search now starts at a
    literal. The Mailchimp, Telegram and Discord rules took 0.25–0.9 s each over sqlalchemy's
    69 MB, now under 0.05 s; the whole policy 7.6 → 4.6 s (``benchmarks/secrets_detector.py``,
    same verdicts)."""
    rest = pattern
    while m := re.match(r"(\[(?:\\.|[^\]\\])+\]|\\[dw])(\{\d+(?:,\d*)?\})?", rest):
        after = rest[m.end() :]
        if not after or after[0] in "?*+{|)" or re.fullmatch(m.group(1), "\n"):
            return pattern
        rest = after
    return rest if rest != pattern and _literal_first(rest) else pattern


def _literal_first(pattern: str) -> bool:
    """Does ``pattern`` start with a plain character or escaped punctuation (what re scans for fast)?"""
    c = pattern[0]
    if c == "\\":
        return len(pattern) > 1 and not pattern[1].isalnum()
    return c not in "[(.^$"


def line_numbers(text: str, offsets: Iterable[int]) -> list[int]:
    """The 1-based line of each offset (in ascending order of offset): newlines counted between
    successive offsets, not indexed for the whole text (a prefilter usually hits a few lines of a
    file; a line index of a 60 MB repository was 1M matches to build)."""
    out, line, at = [], 1, 0
    for pos in sorted(offsets):
        line += text.count("\n", at, pos)
        at = pos
        out.append(line)
    return out


class Detector:
    """detect-secrets, configured once per process, with a regex prefilter per plugin."""

    _lock = threading.Lock()
    _ready: Detector | None = None

    def __init__(self) -> None:
        from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
        from detect_secrets.plugins.keyword import DENYLIST
        from detect_secrets.settings import get_plugins, get_settings

        classes: list[type] = list(get_mapping_from_secret_type_to_class().values())
        names = sorted(c.__name__ for c in classes)
        get_settings().configure_plugins([{"name": n} for n in names if n not in NOISY_PLUGINS])
        get_plugins.cache_clear()
        self.plugins = list(get_plugins())
        # (pattern, runs on ASCII-lowered text?) — Python's IGNORECASE matching costs ~25x, so a
        # case-insensitive plugin regex is lowered once and run on text lowered once
        prefilters: list[tuple[re.Pattern[str], bool]] = []
        for plugin in self.plugins:
            denylist = getattr(plugin, "denylist", None)
            if denylist is None:  # the keyword plugin: a line must name a secret-sounding word
                prefilters.append((re.compile("|".join(DENYLIST)), True))
                continue
            for rx in denylist:
                source = _weak_prefix_stripped(rx.pattern)
                if rx.flags & re.IGNORECASE:
                    prefilters.append((re.compile(_lower_pattern(source), rx.flags & ~re.IGNORECASE), True))
                else:
                    prefilters.append((re.compile(source, rx.flags), False))
        self.prefilters = prefilters
        from detect_secrets.__version__ import VERSION

        self.fingerprint = f"detect-secrets {VERSION}: " + ",".join(sorted(type(p).__name__ for p in self.plugins))

    @classmethod
    def get(cls) -> Detector:
        with cls._lock:
            if cls._ready is None:
                cls._ready = cls()
            return cls._ready

    def findings(self, text: str, filename: str) -> Iterator[Finding]:
        """Secrets in ``text``, line by line (``filename`` picks the keyword plugin's file-type rules)."""
        from detect_secrets.core.scan import _is_filtered_out, _scan_line
        from detect_secrets.util.code_snippet import get_code_snippet

        # the same length, so match offsets stay valid: str.lower is 8x faster than an ASCII
        # translate table and keeps the length unless the text holds a character like "İ"
        lowered = text.lower()
        if len(lowered) != len(text):
            lowered = text.translate(_ASCII_LOWER)
        hits: set[int] = set()
        for rx, on_lowered in self.prefilters:
            for m in rx.finditer(lowered if on_lowered else text):
                hits.add(m.start())
        if not hits:
            return
        candidates = set(line_numbers(text, hits))
        lines = text.split("\n")
        for n in sorted(candidates):
            line = lines[n - 1].rstrip()
            snippet = get_code_snippet(lines=lines, line_number=n)
            if _is_filtered_out(required_filter_parameters=["line"], filename=filename, line=line, context=snippet):
                continue
            for plugin in self.plugins:
                for secret in _scan_line(plugin=plugin, filename=filename, line=line, line_number=n, context=snippet):
                    if not _is_filtered_out(
                        required_filter_parameters=["context"],
                        filename=filename,
                        secret=secret.secret_value,
                        plugin=plugin,
                        line=line,
                        context=snippet,
                    ):
                        value = secret.secret_value or ""
                        least = (
                            MIN_URL_PASSWORD_CHARS if secret.type == "Basic Auth Credentials" else MIN_GENERATED_CHARS
                        )
                        if secret.type in HEURISTIC_RULES and not looks_generated(value, least):
                            continue
                        yield Finding(n, f"content:{secret.type}", value)
