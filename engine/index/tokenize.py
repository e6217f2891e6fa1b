"""A code-aware tokenizer shared by the keyword experts (documents and queries alike).

``getUserName`` → ``getusername get user name``; ``parse_http_header`` → ``parse_http_header
parse http header``; ``os.path.join`` → ``os.path.join os path join``; path segments split the
same way. Originals are kept so an exact identifier still scores higher than its parts.
"""

from __future__ import annotations

import functools
import re

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*|\d+")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")

STOP_WORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "done",
        "for",
        "from",
        "had",
        "has",
        "have",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "me",
        "my",
        "no",
        "not",
        "of",
        "on",
        "or",
        "our",
        "please",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "to",
        "too",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yes",
        "via",
        "get",
        "got",
        "use",
        "used",
        "using",
        "want",
        "need",
        "like",
        "also",
        "just",
        "any",
        "all",
        "each",
        "every",
        "more",
        "most",
        "other",
        "same",
        "only",
        "own",
        "very",
        "does",
        "don't",
        "isn't",
        "it's",
        "i'm",
        "defined",
        "define",
        "defines",
        "definition",
        "declared",
        "declaration",
        "located",
        "location",
        "find",
        "show",
        "look",
        "code",
    ]
)


def split_identifier(token: str) -> list[str]:
    """Parts of one identifier (camel, snake, dotted), lowercased; the whole is not included."""
    parts: list[str] = []
    for piece in re.split(r"[._$]+", token):
        parts.extend(p.lower() for p in _CAMEL.findall(piece))
    return parts


@functools.lru_cache(maxsize=1 << 17)
def _forms(tok: str, stop_words: bool, min_len: int) -> tuple[str, ...]:
    """What one raw token contributes. Cached: identifiers repeat all over a code base, and
    splitting each occurrence again was most of the BM25 index build time (5x slower)."""
    whole = tok.lower().strip("._")
    parts = split_identifier(tok)
    out = [whole] if len(whole) >= min_len and not (stop_words and whole in STOP_WORDS) else []
    if len(parts) > 1:
        out.extend(p for p in parts if len(p) >= min_len and not (stop_words and p in STOP_WORDS))
    return tuple(out)


def code_tokens(text: str, *, stop_words: bool = False, min_len: int = 2) -> list[str]:
    """Tokens of ``text``: each identifier lowercased whole, then its parts if it has several."""
    out: list[str] = []
    for tok in _WORD.findall(text):
        out.extend(_forms(tok, stop_words, min_len))
    return out


def code_tokens_by_line(text: str, seen: dict[str, tuple[str, ...]]) -> list[str]:
    """``code_tokens(text)``, computed line by line through ``seen``, a dict the caller keeps for
    one file: a file's chunks overlap (a class and each of its methods), so most lines come back
    and are not tokenized again. Exact: no token spans a line break."""
    out: list[str] = []
    for line in text.split("\n"):
        toks = seen.get(line)
        if toks is None:
            toks = seen[line] = tuple(code_tokens(line))
        out.extend(toks)
    return out
