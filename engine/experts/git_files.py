"""The git expert's file side: a file named in the question resolved against the repository's files,
and the diff hunk a commit made to it.

A question names files the way people do: ``sessions.py``, ``requests/sessions.py``. Git's own
pathspecs match from the repository root, so a bare name finds nothing when the file lives in
``src/requests/``. :func:`resolve` matches each name against the files committed at HEAD (the only
files with history); every match is kept and labelled (``exact``, ``basename``, ``suffix``).
A name that matches no file at HEAD (deleted, renamed) is searched in history by the glob
``**/<name>`` (``history-glob``). Paths reach git as ``:(literal)`` or ``:(glob)`` pathspecs, so
no character of the question is read as pathspec magic.

:func:`hunks_by_file` splits ``git show`` output into per-file diff text; :func:`hunk_for`
keeps one file's hunks, bounded, and the new-side line range of the first.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from ..workspace import is_excluded

MAX_MATCHES = 20  # per name and project: more than this is not a file the question named
MAX_HUNK_CHARS = 2_000  # one file's diff in one commit; the snippet cap cuts further
_GLOB_META = re.compile(r"([*?\[\]\\])")
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@", re.M)


@dataclass(frozen=True, slots=True)
class Resolved:
    """One named file in one project: a path at HEAD, or a history glob when HEAD has none."""

    name: str
    project: str
    match: str  # exact | basename | suffix | history-glob
    path: str | None = None
    under: str | None = None  # the scope path a history glob stays in

    @property
    def pathspec(self) -> str:
        if self.path is not None:
            return f":(literal){self.path}"
        prefix = _GLOB_META.sub(r"\\\1", self.under.rstrip("/")) + "/" if self.under else ""
        return f":(glob){prefix}**/" + _GLOB_META.sub(r"\\\1", clean_name(self.name))

    def covers(self, path: str) -> bool:
        """Is ``path`` (from a commit's file list) the file this names?"""
        if self.path is not None:
            return path == self.path
        return path_matches(clean_name(self.name), path) and _in_scope(path, self.under)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "project": self.project, "match": self.match}
        out["path" if self.path is not None else "pathspec"] = self.path if self.path is not None else self.pathspec
        return out


def clean_name(name: str) -> str:
    n = name.replace("\\", "/").strip()
    while n.startswith("./"):
        n = n[2:]
    return n.strip("/")


def path_matches(name: str, path: str) -> bool:
    """``name`` is the whole path or its tail at a folder boundary (``sessions.py``, ``requests/sessions.py``)."""
    return path == name or path.endswith("/" + name)


def resolve(
    project: str, names: Sequence[str], files: Iterable[str], scope_path: str | None = None
) -> tuple[list[Resolved], int]:
    """Every file of ``files`` each name matches (excluded files never), and how many were cut at
    :data:`MAX_MATCHES`. A name with no match gets one ``history-glob`` entry."""
    listing = [f for f in files if not is_excluded(f) and _in_scope(f, scope_path)]
    out: list[Resolved] = []
    dropped = 0
    for raw in names:
        name = clean_name(raw)
        if not name:
            continue
        hits = sorted(f for f in listing if path_matches(name, f))
        dropped += max(0, len(hits) - MAX_MATCHES)
        for f in hits[:MAX_MATCHES]:
            label = "exact" if f == name else "basename" if "/" not in name else "suffix"
            out.append(Resolved(raw, project, label, f))
        if not hits and not is_excluded(name):
            out.append(Resolved(raw, project, "history-glob", under=scope_path))
    return out, dropped


def _in_scope(path: str, scope_path: str | None) -> bool:
    return not scope_path or path == scope_path or path.startswith(scope_path.rstrip("/") + "/")


def name_words(names: Iterable[str]) -> set[str]:
    """The words a file name contributes to the question (``src``, ``requests``, ``sessions``): searching
    commit messages for them would only find commits that mention the file, not those that changed it."""
    words: set[str] = set()
    for n in names:
        p = PurePosixPath(clean_name(n))
        words.update(part.lower() for part in p.parent.parts)
        words.update(w.lower() for w in re.split(r"[^A-Za-z0-9]+", p.stem) if w)
    return words


def hunks_by_file(show_output: bytes) -> dict[str, dict[str, str]]:
    """``git show --format=%x1e%H ... -- paths`` → sha → path → that file's diff text."""
    out: dict[str, dict[str, str]] = {}
    for record in show_output.decode("utf-8", "replace").split("\x1e"):
        if not record.strip():
            continue
        sha, _, diff = record.partition("\n")
        files: dict[str, str] = {}
        for section in re.split(r"^(?=diff --git )", diff, flags=re.M):
            path = _section_path(section)
            if path is not None:
                files[path] = section
        out[sha.strip()] = files
    return out


def _section_path(section: str) -> str | None:
    old = None
    for line in section.splitlines()[:8]:
        if line.startswith("+++ b/"):
            return line[6:]
        if line.startswith("--- a/"):
            old = line[6:]  # a deleted file has "+++ /dev/null"
    return old


def hunk_for(sections: Mapping[str, str], path: str) -> tuple[str, int, int] | None:
    """The hunks of ``path`` (from the first ``@@``), cut at :data:`MAX_HUNK_CHARS`, with the new-side
    line range of the first hunk; None when the commit has no text diff for it (binary, merge, mode)."""
    section = sections.get(path)
    if section is None:
        return None
    m = _HUNK.search(section)
    if m is None:
        return None
    text = section[m.start() :].rstrip("\n")
    if len(text) > MAX_HUNK_CHARS:
        text = text[: text.rfind("\n", 0, MAX_HUNK_CHARS) if "\n" in text[:MAX_HUNK_CHARS] else MAX_HUNK_CHARS]
        text += "\n…"
    start = int(m.group(1))
    length = int(m.group(2)) if m.group(2) is not None else 1
    start = max(1, start)
    return text, start, max(start, start + length - 1)
