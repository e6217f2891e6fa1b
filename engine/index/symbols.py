"""Symbol tags (tree-sitter definitions, references, bases) in one small sqlite3 file.

Why sqlite (stdlib) and not JSON lines or an in-memory table: the questions are point look-ups
by name ("where is X", "who calls X", "what subclasses X"), which an indexed column answers in
well under a millisecond without loading the whole index, and incremental updates are plain
``DELETE ... WHERE file`` + ``INSERT`` in one transaction. WAL mode lets ``engine run`` read
while ``engine index`` writes. Nothing is pickled.

Tables::

    files(fid, key UNIQUE, project, path, lang)
    tags(fid, name, lname, qname, kind, role, start, end, enclosing, bases, snippet)  -- lname indexed
    bases(fid, tag, base, lbase)       -- lbase = last component of the base, lowercased, indexed

Names are stored as written; look-ups go through ``lname`` (lowercase) so exact and
case-insensitive matching share one index and the caller ranks the two.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..syntax import CODE_LANGUAGES, language_for
from .build import UnitProgress
from .chunking import file_outline
from .files import SourceFile
from .manifest import Manifest
from .sqlite import SqliteReader, connect_writer

INDEX_FORMAT = "symbols-sqlite-v1"
DB_NAME = "symbols.sqlite3"
BASE_SPLIT = re.compile(r"\.|::")
_SEP = "\x1f"  # joins bases in one column (never appears in an identifier)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS files(fid INTEGER PRIMARY KEY, key TEXT UNIQUE NOT NULL, project TEXT NOT NULL,
                                 path TEXT NOT NULL, lang TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tags(id INTEGER PRIMARY KEY, fid INTEGER NOT NULL, name TEXT NOT NULL,
                                lname TEXT NOT NULL, qname TEXT NOT NULL,
                                kind TEXT NOT NULL, role TEXT NOT NULL, start INTEGER NOT NULL, end INTEGER NOT NULL,
                                enclosing TEXT, bases TEXT NOT NULL, snippet TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS tags_lname ON tags(lname, role);
CREATE INDEX IF NOT EXISTS tags_fid ON tags(fid);
CREATE TABLE IF NOT EXISTS bases(fid INTEGER NOT NULL, tag INTEGER NOT NULL, base TEXT NOT NULL, lbase TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS bases_lbase ON bases(lbase);
CREATE INDEX IF NOT EXISTS bases_fid ON bases(fid);
"""


@dataclass(frozen=True, slots=True)
class SymbolRow:
    """One stored tag with its file; ``snippet`` is the definition's first lines or the reference's line."""

    project: str
    path: str
    name: str
    qualified_name: str
    kind: str
    role: str
    start_line: int
    end_line: int
    enclosing: str | None
    bases: tuple[str, ...]
    snippet: str


def last_component(name: str) -> str:
    """``a.b.C`` / ``a::b::C`` → ``C``."""
    return BASE_SPLIT.split(name)[-1]


def taggable(path: str, languages: Iterable[str] | None = None) -> bool:
    """Can a grammar tag this file (and is its language among ``languages``, when given)?"""
    lang = language_for(path)
    return lang in CODE_LANGUAGES and (languages is None or lang in languages)


class SymbolIndexer:
    """The Indexer protocol (:mod:`engine.index.build`) over a symbols sqlite file.

    ``languages`` limits what is parsed and ``references=False`` keeps definitions only. Both
    change ``indexer_id``, so a config change rebuilds the index instead of mixing two shapes.
    """

    def __init__(
        self,
        directory: Path,
        *,
        languages: Iterable[str] | None = None,
        references: bool = True,
        snippet_lines: int = 8,
        snippet_chars: int = 800,
    ) -> None:
        self.dir = directory
        self.languages = frozenset(languages) if languages is not None else None
        self.references = references
        self.snippet_lines, self.snippet_chars = snippet_lines, snippet_chars
        langs = ",".join(sorted(self.languages)) if self.languages is not None else "all"
        self.indexer_id = f"{INDEX_FORMAT}:{langs}{'' if references else ':no-refs'}"
        self.manifest_path = directory / "manifest.json"
        self._conn: sqlite3.Connection | None = None
        self._next_id = 1

    def open(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self._conn = conn = connect_writer(self.dir / DB_NAME)
        if Manifest.load(self.manifest_path).indexer_id != self.indexer_id:
            # no manifest, or another shape: the content is unknown, start clean (same file, so
            # readers holding a connection simply see the new tables)
            conn.executescript(
                "DROP TABLE IF EXISTS files; DROP TABLE IF EXISTS tags; "
                "DROP TABLE IF EXISTS bases; DROP TABLE IF EXISTS names;"
            )
        conn.executescript(_SCHEMA)
        self._next_id = (conn.execute("SELECT max(id) FROM tags").fetchone()[0] or 0) + 1

    def _drop(self, keys: Sequence[str]) -> None:
        assert self._conn is not None
        for key in keys:
            row = self._conn.execute("SELECT fid FROM files WHERE key=?", (key,)).fetchone()
            if row is None:
                continue
            for table in ("tags", "bases", "files"):
                self._conn.execute(f"DELETE FROM {table} WHERE fid=?", row)  # noqa: S608 - fixed names

    def add(self, files: list[tuple[SourceFile, bytes]], progress: UnitProgress | None = None) -> int:
        """Parse and store each file's tags; a file already stored is replaced (idempotent per key).

        Tag ids are assigned here so a whole file goes in with two ``executemany`` calls.
        """
        assert self._conn is not None
        conn, n = self._conn, 0
        self._drop([f.key for f, _ in files])
        for f, data in files:
            lang = language_for(f.path)
            if lang is None or not taggable(f.path, self.languages):
                continue
            found = [t for t in file_outline(f.path, data)[0] if self.references or t.role == "definition"]
            lines = data.decode("utf-8", "replace").split("\n")
            fid = conn.execute(
                "INSERT INTO files(key, project, path, lang) VALUES (?,?,?,?)", (f.key, f.project, f.path, lang)
            ).lastrowid
            rows: list[tuple[Any, ...]] = []
            bases: list[tuple[Any, ...]] = []
            for i, t in enumerate(found, start=self._next_id):
                if t.role == "definition":
                    snippet = "\n".join(
                        lines[t.start_line - 1 : min(t.end_line, t.start_line - 1 + self.snippet_lines)]
                    )
                else:
                    snippet = lines[t.start_line - 1].strip() if t.start_line <= len(lines) else ""
                rows.append(
                    (
                        i,
                        fid,
                        t.name,
                        t.name.lower(),
                        t.qualified_name,
                        t.kind,
                        t.role,
                        t.start_line,
                        t.end_line,
                        t.enclosing,
                        _SEP.join(t.bases),
                        snippet[: self.snippet_chars],
                    )
                )
                bases.extend((fid, i, b, last_component(b).lower()) for b in t.bases)
            self._next_id += len(found)
            conn.executemany("INSERT INTO tags VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", rows)
            conn.executemany("INSERT INTO bases VALUES (?,?,?,?)", bases)
            n += len(found)
            if progress:
                progress(len(found))
        return n

    def remove(self, keys: list[str]) -> None:
        self._drop(keys)

    def commit(self) -> None:
        assert self._conn is not None
        self._conn.commit()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = None


_ROW_SQL = (
    "SELECT f.project, f.path, t.name, t.qname, t.kind, t.role, t.start, t.end, t.enclosing, t.bases, "
    "t.snippet FROM tags t JOIN files f ON f.fid = t.fid"
)


def _row(r: tuple) -> SymbolRow:  # type: ignore[type-arg]
    return SymbolRow(
        r[0], r[1], r[2], r[3], r[4], r[5], int(r[6]), int(r[7]), r[8], tuple(b for b in r[9].split(_SEP) if b), r[10]
    )


class SymbolStore(SqliteReader):
    """Read side: look-ups by name, by base and by mentioned identifier. One connection per thread."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory / DB_NAME)

    def by_name(
        self, names: Iterable[str], role: str, projects: Sequence[str] | None = None, cap: int = 5000
    ) -> list[SymbolRow]:
        """Tags of ``role`` whose name equals one of ``names`` ignoring case (the caller ranks)."""
        lnames = sorted({n.lower() for n in names})
        if not lnames or projects == []:
            return []
        extra, args = self._projects_sql(projects)
        sql = (
            f"{_ROW_SQL} WHERE t.lname IN ({','.join('?' * len(lnames))}) AND t.role=?{extra} "
            "ORDER BY f.project, f.path, t.start LIMIT ?"
        )
        return [_row(r) for r in self._db().execute(sql, [*lnames, role, *args, cap])]

    def subclasses(
        self, names: Iterable[str], projects: Sequence[str] | None = None, cap: int = 5000
    ) -> list[SymbolRow]:
        """Definitions listing a base whose last component equals one of ``names`` ignoring case."""
        lnames = sorted({last_component(n).lower() for n in names})
        if not lnames or projects == []:
            return []
        extra, args = self._projects_sql(projects)
        sql = (
            f"{_ROW_SQL} WHERE t.id IN (SELECT tag FROM bases WHERE lbase IN "
            f"({','.join('?' * len(lnames))})){extra} ORDER BY f.project, f.path, t.start LIMIT ?"
        )
        return [_row(r) for r in self._db().execute(sql, [*lnames, *args, cap])]
