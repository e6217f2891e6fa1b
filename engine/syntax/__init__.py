"""Syntax layer: language detection, symbol tags and search chunks from real tree-sitter grammars.

Public API::

    language_for(path) -> str | None         # python, javascript, typescript, tsx, go, rust,
                                             # java, markdown, rst
    tags(path, source) -> list[Tag]          # definitions + references, qualified names, bases
    chunks(path, source, *, max_lines=120) -> list[Chunk]
    outline(path, source, *, max_lines=120) -> tuple[list[Tag], list[Chunk]]   # one parse

Code tags come from each grammar's own ``queries/tags.scm`` (read from the installed grammar
package) plus a few small per-language queries (``languages.py``).  Everything here is
*syntactic*: names are not resolved, so nothing from this layer may be labelled "typed".

Modules: ``languages`` (detection, cached grammars/queries/parsers), ``tags`` (Tag and the
definition tree), ``chunks`` (Chunk and splitting), ``docs`` (Markdown/reST sections).
"""

from __future__ import annotations

from .chunks import Chunk, chunks_from_analysis
from .chunks import chunks as _chunks
from .docs import PATH_SEPARATOR, Section, sections_for
from .languages import CODE_LANGUAGES, DOC_LANGUAGES, language_for
from .tags import MAX_PARSE_BYTES, Tag, analyze, is_binary

__all__ = [
    "CODE_LANGUAGES",
    "DOC_LANGUAGES",
    "Chunk",
    "Section",
    "Tag",
    "chunks",
    "language_for",
    "outline",
    "tags",
]


def _section_tags(sections: list[Section]) -> list[Tag]:
    out: list[Tag] = []
    for s in sections:
        parent = PATH_SEPARATOR.join(s.path[:-1]) or None
        out.append(Tag(s.title, s.symbol, "section", "definition", s.start_line, s.full_end, parent))
    return out


def tags(path: str, source: bytes) -> list[Tag]:
    """Definitions and references in ``source``, in source order.

    Code languages use tree-sitter; Markdown / reST give one ``section`` definition per heading
    (qualified name = heading path, range = the section with its subsections).  Unknown,
    binary, oversized (> ``MAX_PARSE_BYTES``) or unparsable input gives ``[]``; never raises.
    """
    return outline(path, source, with_chunks=False)[0]


def chunks(path: str, source: bytes, *, max_lines: int = 120) -> list[Chunk]:
    """Search chunks of ``source``; see :mod:`engine.syntax.chunks`. Never raises."""
    return _chunks(path, source, max_lines=max_lines)


def outline(
    path: str, source: bytes, *, max_lines: int = 120, with_chunks: bool = True
) -> tuple[list[Tag], list[Chunk]]:
    """Tags and chunks of one file from a single parse (what an indexer wants). Never raises."""
    try:
        if is_binary(source):
            return [], []
        lang = language_for(path)
        if lang in DOC_LANGUAGES:
            text = source.decode("utf-8", errors="replace")
            found = _section_tags(sections_for(lang, text))
            return found, (_chunks(path, source, max_lines=max_lines) if with_chunks else [])
        if lang is None or len(source) > MAX_PARSE_BYTES:
            return [], (_chunks(path, source, max_lines=max_lines) if with_chunks else [])
        analysis = analyze(lang, source)
        if analysis is None:
            return [], (_chunks(path, source, max_lines=max_lines) if with_chunks else [])
        if not with_chunks:
            return analysis.tags, []
        text = source.decode("utf-8", errors="replace")
        return analysis.tags, chunks_from_analysis(path, text, analysis, max_lines=max_lines)
    except Exception:  # noqa: BLE001 - a bad file must never break indexing
        return [], (_chunks(path, source, max_lines=max_lines) if with_chunks else [])
