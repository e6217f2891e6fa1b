"""Section outlines of Markdown and reStructuredText files, in plain Python.

A *section* runs from its heading to the line before the next heading of any level (so a
parent section's chunk does not repeat its subsections); ``full_end`` extends it over its
subsections, which is the range a ``section`` tag reports.

Markdown: ATX (``## Title``) and setext (``Title`` over ``===`` / ``---``) headings; fenced
code blocks and YAML front matter are skipped.  reStructuredText: a title underlined, or over-
and underlined, with one repeated punctuation character; heading levels follow the order in
which adornment styles first appear, as docutils does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Section", "markdown_sections", "rst_sections", "sections_for", "split_lines"]

PATH_SEPARATOR = " > "


@dataclass(frozen=True, slots=True)
class Section:
    """One heading and the lines it owns (1-based, inclusive)."""

    title: str
    path: tuple[str, ...]
    level: int
    start_line: int
    end_line: int
    full_end: int

    @property
    def symbol(self) -> str:
        """Heading path such as ``Install > From source``."""
        return PATH_SEPARATOR.join(self.path)


def split_lines(text: str) -> list[str]:
    """Split on ``\\n`` only, as tree-sitter counts rows (``str.splitlines`` also splits on
    form feeds and other separators, which would shift line numbers); drops a trailing ``\\r``.
    """
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
_ATX_CLOSE = re.compile(r"(?:^|[ \t]+)#+$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_NOT_SETEXT_TEXT = re.compile(r"^(?: {4}|\t| {0,3}(?:[-+*>]|\d+[.)])(?:\s|$)| {0,3}#)")
_RST_ADORN = re.compile(r"^([!-/:-@\[-`{-~])\1+[ \t]*$")


def _finish(heads: list[tuple[int, int, str]], line_count: int) -> list[Section]:
    """Turn ``(line, level, title)`` headings into sections with paths and ranges."""
    sections: list[Section] = []
    stack: list[tuple[int, str]] = []
    for i, (line, level, title) in enumerate(heads):
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, title))
        end = heads[i + 1][0] - 1 if i + 1 < len(heads) else line_count
        full_end = line_count
        for later_line, later_level, _ in heads[i + 1 :]:
            if later_level <= level:
                full_end = later_line - 1
                break
        path = tuple(t for _, t in stack)
        sections.append(Section(title, path, level, line, max(end, line), max(full_end, line)))
    return sections


def markdown_sections(text: str) -> list[Section]:
    """Headings of a Markdown document, in order, with heading paths."""
    lines = split_lines(text)
    heads: list[tuple[int, int, str]] = []
    fence: str | None = None
    start = 0
    if lines and lines[0].strip() == "---":  # YAML front matter
        for j in range(1, len(lines)):
            if lines[j].strip() in ("---", "..."):
                start = j + 1
                break
    prev_is_text = False
    for i in range(start, len(lines)):
        line = lines[i]
        fence_match = _FENCE.match(line)
        if fence is not None:
            if (
                fence_match
                and fence_match.group(1)[0] == fence[0]
                and len(fence_match.group(1)) >= len(fence)
                and not line.strip().lstrip(fence[0])
            ):
                fence = None
            prev_is_text = False
            continue
        if fence_match:
            fence = fence_match.group(1)
            prev_is_text = False
            continue
        atx = _ATX.match(line)
        if atx:
            title = _ATX_CLOSE.sub("", atx.group(2) or "").strip()
            heads.append((i + 1, len(atx.group(1)), title))
            prev_is_text = False
            continue
        setext = _SETEXT.match(line)
        if setext and prev_is_text:
            level = 1 if setext.group(1)[0] == "=" else 2
            heads.append((i, level, lines[i - 1].strip()))
            prev_is_text = False
            continue
        prev_is_text = bool(line.strip()) and not _NOT_SETEXT_TEXT.match(line) and "|" not in line
    return _finish(heads, len(lines))


def rst_sections(text: str) -> list[Section]:
    """Section titles of a reStructuredText document, in order, with heading paths."""
    lines = split_lines(text)
    heads: list[tuple[int, int, str]] = []
    styles: list[tuple[str, bool]] = []
    i = 0
    n = len(lines)
    while i < n:
        line = lines[i]
        over = _RST_ADORN.match(line)
        # Over- and underlined title: adornment, title, same adornment.
        if over and i + 2 < n and lines[i + 1].strip() and not _RST_ADORN.match(lines[i + 1]):
            under = _RST_ADORN.match(lines[i + 2])
            if under and under.group(1) == over.group(1):
                title = lines[i + 1].strip()
                style = (over.group(1), True)
                if style not in styles:
                    styles.append(style)
                heads.append((i + 1, styles.index(style) + 1, title))
                i += 3
                continue
        # Underlined title: unindented text after a blank line (or at the top), then adornment.
        if line.strip() and not line[0].isspace() and not over and (i == 0 or not lines[i - 1].strip()) and i + 1 < n:
            under = _RST_ADORN.match(lines[i + 1])
            title = line.rstrip()
            width = len(lines[i + 1].rstrip())
            if under and (width >= len(title) or width >= 4):
                style = (under.group(1), False)
                if style not in styles:
                    styles.append(style)
                heads.append((i + 1, styles.index(style) + 1, title.strip()))
                i += 2
                continue
        i += 1
    return _finish(heads, n)


def sections_for(lang: str, text: str) -> list[Section]:
    """Sections of ``text`` for ``lang`` (``markdown`` or ``rst``); ``[]`` for anything else."""
    if lang == "markdown":
        return markdown_sections(text)
    if lang == "rst":
        return rst_sections(text)
    return []
