"""Split a file into search chunks: one per function / method, class headers, module code,
document sections, or plain line windows.

Every chunk's text starts with a one-line context header, ``# <path> :: <symbol>`` (``# <path>``
when there is no symbol), so that keyword and embedding search see where it comes from; the
chunk's ``start_line``/``end_line`` refer to the source lines after that header.

Code (via :mod:`.tags`):

- a function or method is one chunk, including its decorators and the comments right above
  it; functions nested inside it stay in it;
- a class-like definition (class, interface, enum, ``impl``, Rust ``mod``, TS namespace)
  gives a *header* chunk: its own lines (signature, docstring, attributes) plus the first
  line of each member, without the members' bodies; each member then gets its own chunk,
  recursively.  The header's range runs from the class's first line to its last own line;
- module-level code between definitions forms ``module`` chunks, one per contiguous run;
- anything longer than ``max_lines`` is split into overlapping windows that keep the kind
  and symbol of what they split.

Docs: one ``section`` chunk per heading (see :mod:`.docs`).  Other text: ``window`` chunks.
Binary input (a NUL byte) gives no chunks; anything that fails to parse falls back to windows.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tree_sitter import Node

from .docs import sections_for, split_lines
from .languages import language_for
from .tags import CLASS_KINDS, MAX_PARSE_BYTES, Analysis, Definition, analyze, is_binary, node_lines

__all__ = ["Chunk", "chunks", "chunks_from_analysis"]

WINDOW_LINES = 60
WINDOW_OVERLAP = 10
#: Hard cap on one chunk's text; longer text (minified code) is cut.
MAX_CHUNK_CHARS = 16_000

_LEADING = frozenset(
    {"comment", "line_comment", "block_comment", "attribute_item", "decorator", "annotation", "marker_annotation"}
)
_CONTAINER_KINDS = CLASS_KINDS | {"module"}
_CLOSERS = frozenset({"", "}", "};", "})", ")", "]", "end", "*/"})

Lines = list[tuple[int, str]]  # (1-based line number, text)


@dataclass(frozen=True, slots=True)
class Chunk:
    """A contiguous (or, for class headers, outline) piece of a file to index.

    Attributes:
        start_line: 1-based first source line covered.
        end_line: 1-based last source line covered, inclusive.
        symbol: Qualified name (``Class.method``), heading path (``Install > From source``)
            or ``None`` for module code and plain windows.
        kind: ``function``, ``method``, ``class``, ``module``, ``section`` or ``window``.
        text: ``# path :: symbol`` header line, then the source text.
    """

    start_line: int
    end_line: int
    symbol: str | None
    kind: str
    text: str

    def __reduce__(self) -> tuple[type[Chunk], tuple[int, int, str | None, str, str]]:
        # pickled by the parse worker by the thousand: a frozen dataclass's default unpickling
        # calls dataclasses.fields() per object (8% of `engine index` on a 1,000-file repo)
        return Chunk, (self.start_line, self.end_line, self.symbol, self.kind, self.text)


def _make(path: str, symbol: str | None, kind: str, lines: Lines) -> Chunk:
    header = f"# {path} :: {symbol}" if symbol else f"# {path}"
    body = "\n".join(text for _, text in lines)
    text = f"{header}\n{body}"
    if len(text) > MAX_CHUNK_CHARS:
        text = text[:MAX_CHUNK_CHARS]
    return Chunk(lines[0][0], lines[-1][0], symbol, kind, text)


def _split(path: str, symbol: str | None, kind: str, lines: Lines, size: int, overlap: int) -> list[Chunk]:
    """One chunk if ``lines`` fit in ``size``, else overlapping windows of ``size`` lines."""
    lines = _trim(lines)
    if not lines:
        return []
    if len(lines) <= size:
        return [_make(path, symbol, kind, lines)]
    size = max(size, 1)
    step = max(size - overlap, 1)
    out: list[Chunk] = []
    for start in range(0, len(lines), step):
        out.append(_make(path, symbol, kind, lines[start : start + size]))
        if start + size >= len(lines):
            break
    return out


def _trim(lines: Lines) -> Lines:
    start, end = 0, len(lines)
    while start < end and not lines[start][1].strip():
        start += 1
    while end > start and not lines[end - 1][1].strip():
        end -= 1
    return lines[start:end]


def windows(path: str, text: str, *, size: int = WINDOW_LINES, overlap: int = WINDOW_OVERLAP) -> list[Chunk]:
    """Plain overlapping line windows (kind ``window``) over ``text``."""
    numbered = list(enumerate(split_lines(text), start=1))
    return _split(path, None, "window", numbered, size, min(overlap, max(size - 1, 0)))


def _chunk_span(d: Definition) -> tuple[int, int]:
    """Line range of a definition plus the comments/attributes/decorators right above it."""
    start, end = node_lines(d.span)
    node: Node | None = d.span.prev_named_sibling
    while node is not None and node.type in _LEADING and node.end_point.row + 1 >= start - 1:
        start = node.start_point.row + 1
        node = node.prev_named_sibling
    return start, end


def _separate(d: Definition) -> bool:
    start, end = node_lines(d.span)
    return end > start or any(c.kind != "constant" for c in d.children)


def _code_chunks(path: str, lines: list[str], analysis: Analysis, max_lines: int) -> list[Chunk]:
    overlap = min(WINDOW_OVERLAP, max_lines // 6)
    roots = [d for d in analysis.definitions if d.parent is None and d.kind != "constant"]
    out: list[Chunk] = []
    covered = bytearray(len(lines) + 2)

    def numbered(start: int, end: int) -> Lines:
        return [(n, lines[n - 1]) for n in range(start, min(end, len(lines)) + 1)]

    def emit(d: Definition) -> None:
        start, end = _chunk_span(d)
        # One-line members (interface method signatures, one-liners) stay in the header.
        members = [c for c in d.children if c.kind != "constant" and _separate(c)]
        if d.kind in _CONTAINER_KINDS and members:
            spans = [(_chunk_span(c), c) for c in members]
            owned = bytearray(end - start + 1)  # 1 = a member's line
            for (cs, ce), _ in spans:
                for n in range(max(cs, start), min(ce, end) + 1):
                    owned[n - start] = 1
            firsts = {c.name_line for _, c in spans}
            header: Lines = []
            last_own = start
            for n in range(start, min(end, len(lines)) + 1):
                if not owned[n - start]:
                    if not lines[n - 1].strip() and (not header or not header[-1][1].strip()):
                        continue  # collapse blank runs left by elided members
                    header.append((n, lines[n - 1]))
                    if lines[n - 1].strip() not in _CLOSERS:
                        last_own = n
                elif n in firsts:
                    header.append((n, lines[n - 1]))
            header = [item for item in header if item[0] <= last_own or item[0] in firsts]
            kind = "module" if d.kind == "module" else "class"
            parts = _split(path, d.qualified, kind, header, max_lines, overlap)
            if parts and len(parts) == 1:
                parts = [Chunk(start, last_own, parts[0].symbol, kind, parts[0].text)]
            out.extend(parts)
            for c in members:
                emit(c)
        else:
            if d.kind in ("function", "method", "macro"):
                kind = "method" if d.kind == "method" else "function"
            else:
                kind = "module" if d.kind == "module" else "class"
            out.extend(_split(path, d.qualified, kind, numbered(start, end), max_lines, overlap))

    for d in roots:
        start, end = _chunk_span(d)
        for n in range(start, min(end, len(lines)) + 1):
            covered[n] = 1
        emit(d)

    run: Lines = []
    for n in range(1, len(lines) + 1):
        if covered[n]:
            if run:
                out.extend(_module_run(path, run, max_lines, overlap))
                run = []
        else:
            run.append((n, lines[n - 1]))
    out.extend(_module_run(path, run, max_lines, overlap))
    out.sort(key=lambda c: (c.start_line, -c.end_line))
    return out


def _module_run(path: str, run: Lines, max_lines: int, overlap: int) -> Iterable[Chunk]:
    if not any(any(ch.isalnum() for ch in text) for _, text in run):
        return []
    return _split(path, None, "module", run, max_lines, overlap)


def chunks_from_analysis(path: str, text: str, analysis: Analysis, *, max_lines: int = 120) -> list[Chunk]:
    """Chunks of a code file already parsed by :func:`engine.syntax.tags.analyze`."""
    return _code_chunks(path, split_lines(text), analysis, max(max_lines, 1))


def _doc_chunks(path: str, lang: str, text: str, max_lines: int) -> list[Chunk]:
    lines = split_lines(text)
    sections = sections_for(lang, text)
    overlap = min(WINDOW_OVERLAP, max_lines // 6)
    out: list[Chunk] = []
    first = sections[0].start_line if sections else len(lines) + 1
    preamble = [(n, lines[n - 1]) for n in range(1, first)]
    out.extend(_split(path, None, "section", preamble, max_lines, overlap))
    for s in sections:
        body = [(n, lines[n - 1]) for n in range(s.start_line, min(s.end_line, len(lines)) + 1)]
        out.extend(_split(path, s.symbol, "section", body, max_lines, overlap))
    return out


def chunks(path: str, source: bytes, *, max_lines: int = 120) -> list[Chunk]:
    """Split ``source`` (the bytes of ``path``) into chunks for indexing.

    Never raises: binary input yields ``[]``; undecodable, unparsable or oversized input
    falls back to line windows.

    Args:
        path: File path, used for the language and in each chunk's context header.
        source: The file's bytes.
        max_lines: Longest chunk in lines; longer definitions/sections become windows.
    """
    try:
        if is_binary(source):
            return []
        text = source.decode("utf-8", errors="replace")
    except Exception:  # noqa: BLE001 - a bad input must never break indexing
        return []
    size = max(int(max_lines), 1)
    try:
        lang = language_for(path)
        if lang in ("markdown", "rst"):
            return _doc_chunks(path, lang, text, size)
        if lang is not None and len(source) <= MAX_PARSE_BYTES:
            analysis = analyze(lang, source)
            if analysis is not None:
                return _code_chunks(path, split_lines(text), analysis, size)
    except Exception:  # noqa: BLE001 - fall back to windows below
        pass
    try:
        return windows(path, text, size=min(WINDOW_LINES, size))
    except Exception:  # noqa: BLE001
        return []
