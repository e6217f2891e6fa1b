"""The typed index: jedi's definitions, resolved references and bases of every Python file, in sqlite.

``engine index`` runs jedi once per changed file (:mod:`engine.index.pyfacts`); the typed expert
then answers "where is X defined", "who calls X" and "what subclasses X" with indexed look-ups
(docs/adr/0013-typed-index.md). Tables::

    files(fid, key UNIQUE, project, path, module, complete)
    defs(fid, name, lname, full_name, qname, type, line, start, end, snippet)   -- lname, full_name indexed
    refs(fid, line, target, tlast, target_key, kind, enclosing, text)          -- target, tlast, target_key indexed
    bases(fid, class_full, base, blast, written)                               -- base, blast indexed
    unresolved(name, fid)                                                      -- names jedi could not resolve

``tlast`` / ``blast`` are the last component of the target / base, lowercased: the look-up for a
name defined outside the workspace (``os.path.join``, ``Exception``), which has no definition row.

**Incremental, and how far a change reaches.** A changed file's rows are replaced. Other files'
references name their target by *full name*, so they stay right when a definition only moves
or its body changes. When a file's interface changes — a definition's full name disappears or
changes type, or a new one appears — the files whose references resolved to a vanished name,
and the files with an unresolved name equal to a new definition's name (or the new module's),
are re-analysed in the same batch. One level: what those files' own changes would imply is
not followed, and a reference whose inferred *type* changed (``f().x`` after ``f``'s return
value changed) is refreshed only when its own file changes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path, PurePosixPath

from ..syntax import language_for
from ..types import Project
from .build import UnitProgress
from .files import SourceFile, read_indexable
from .manifest import Manifest
from .pyfacts import FileFacts, JediAnalyser
from .sqlite import SqliteReader, connect_writer, placeholders
from .symbols import last_component

INDEX_FORMAT = "typed-jedi-sqlite-v1"
DB_NAME = "typed.sqlite3"
_TABLES = ("files", "defs", "refs", "bases", "unresolved")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS files(fid INTEGER PRIMARY KEY, key TEXT UNIQUE NOT NULL, project TEXT NOT NULL,
                                 path TEXT NOT NULL, module TEXT NOT NULL, complete INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS defs(fid INTEGER NOT NULL, name TEXT NOT NULL, lname TEXT NOT NULL,
                                full_name TEXT NOT NULL, qname TEXT NOT NULL, type TEXT NOT NULL,
                                line INTEGER NOT NULL, start INTEGER NOT NULL, end INTEGER NOT NULL,
                                snippet TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS defs_lname ON defs(lname);
CREATE INDEX IF NOT EXISTS defs_full ON defs(full_name);
CREATE INDEX IF NOT EXISTS defs_fid ON defs(fid);
CREATE TABLE IF NOT EXISTS refs(fid INTEGER NOT NULL, line INTEGER NOT NULL, target TEXT NOT NULL,
                                tlast TEXT NOT NULL, target_key TEXT, kind TEXT NOT NULL, enclosing TEXT,
                                text TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS refs_target ON refs(target);
CREATE INDEX IF NOT EXISTS refs_tlast ON refs(tlast);
CREATE INDEX IF NOT EXISTS refs_fid ON refs(fid);
CREATE TABLE IF NOT EXISTS bases(fid INTEGER NOT NULL, class_full TEXT NOT NULL, base TEXT NOT NULL,
                                 blast TEXT NOT NULL, written TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS bases_base ON bases(base);
CREATE INDEX IF NOT EXISTS bases_blast ON bases(blast);
CREATE INDEX IF NOT EXISTS bases_fid ON bases(fid);
CREATE TABLE IF NOT EXISTS unresolved(name TEXT NOT NULL, fid INTEGER NOT NULL, PRIMARY KEY(name, fid)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS unresolved_fid ON unresolved(fid);
"""


def is_python(path: str) -> bool:
    return language_for(path) == "python"


class TypedIndexer:
    """The Indexer protocol (:mod:`engine.index.build`) over ``typed.sqlite3``; jedi does the work."""

    def __init__(
        self,
        directory: Path,
        projects: Sequence[Project],
        *,
        file_seconds: float = 30.0,
        recycle_files: int = 300,
    ) -> None:
        self.dir = directory
        self.roots = {p.name: p.root for p in projects}
        # a new jedi may resolve differently: its version is part of the index's identity
        self.indexer_id = f"{INDEX_FORMAT}:jedi-{version('jedi')}"
        self.manifest_path = directory / "manifest.json"
        self.analyser = JediAnalyser(self.roots, recycle_files=recycle_files, file_seconds=file_seconds)
        self.reanalysed = 0  # dependents re-analysed because a definition they used changed
        self.failed = 0  # files jedi crashed on twice (stored with no rows, ``complete`` = 0)
        self._conn: sqlite3.Connection | None = None

    def open(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self._conn = conn = connect_writer(self.dir / DB_NAME)
        if Manifest.load(self.manifest_path).indexer_id != self.indexer_id:
            conn.executescript("".join(f"DROP TABLE IF EXISTS {t};" for t in _TABLES))
            for old in self.dir.glob("symbols.sqlite3*"):  # the typed index's shape before ADR 0013
                old.unlink(missing_ok=True)
        conn.executescript(_SCHEMA)

    def _fid(self, key: str) -> int | None:
        assert self._conn is not None
        row = self._conn.execute("SELECT fid FROM files WHERE key=?", (key,)).fetchone()
        return None if row is None else int(row[0])

    def _interface(self, fid: int | None) -> dict[str, str]:
        assert self._conn is not None
        if fid is None:
            return {}
        return dict(self._conn.execute("SELECT full_name, type FROM defs WHERE fid=?", (fid,)).fetchall())

    def _drop(self, fid: int) -> None:
        assert self._conn is not None
        for table in _TABLES:
            self._conn.execute(f"DELETE FROM {table} WHERE fid=?", (fid,))  # noqa: S608 - fixed names

    def _store(self, f: SourceFile, facts: FileFacts) -> int:
        assert self._conn is not None
        conn = self._conn
        fid = conn.execute(
            "INSERT INTO files(key, project, path, module, complete) VALUES (?,?,?,?,?)",
            (f.key, f.project, f.path, facts.module, int(facts.complete)),
        ).lastrowid
        conn.executemany(
            "INSERT INTO defs VALUES (?,?,?,?,?,?,?,?,?,?)",
            [
                (fid, d.name, d.name.lower(), d.full_name, d.qname, d.type, d.line, d.start, d.end, d.snippet)
                for d in facts.definitions
            ],
        )
        conn.executemany(
            "INSERT INTO refs VALUES (?,?,?,?,?,?,?,?)",
            [
                (fid, r.line, r.target, last_component(r.target).lower(), r.target_key, r.kind, r.enclosing, r.text)
                for r in facts.references
            ],
        )
        conn.executemany(
            "INSERT INTO bases VALUES (?,?,?,?,?)",
            [(fid, b.class_full, b.base_full, last_component(b.base_full).lower(), b.written) for b in facts.bases],
        )
        conn.executemany("INSERT OR IGNORE INTO unresolved VALUES (?,?)", [(n, fid) for n in facts.unresolved])
        return len(facts.definitions) + len(facts.references)

    def _replace(self, f: SourceFile, data: bytes) -> tuple[int, dict[str, str], dict[str, str]]:
        """Re-analyse one file; returns (rows, interface before, interface after)."""
        fid = self._fid(f.key)
        before = self._interface(fid)
        facts = self._analyse(f, data.decode("utf-8", "replace"))
        if fid is not None:
            self._drop(fid)
        return self._store(f, facts), before, facts.interface()

    def _analyse(self, f: SourceFile, code: str) -> FileFacts:
        """jedi's facts for one file; a crash inside jedi costs that file, never the index run.

        jedi raises arbitrary errors on some dynamic code (and a poisoned inference state would
        fail every later file): the state is recycled and the file tried once more; a second
        failure stores the file as analysed but incomplete, with no rows."""
        for attempt in (1, 2):
            try:
                return self.analyser.analyse(f.project, f.path, code)
            except Exception:  # noqa: BLE001 - see above
                self.analyser.reset(keep_parses=0)
                if attempt == 2:
                    self.failed += 1
        return FileFacts(module="", complete=False)

    def add(self, files: list[tuple[SourceFile, bytes]], progress: UnitProgress | None = None) -> int:
        rows = 0
        changed: list[tuple[str, dict[str, str], dict[str, str]]] = []
        for f, data in files:
            if not is_python(f.path):
                continue
            n, before, after = self._replace(f, data)
            rows += n
            if progress:
                progress(n)
            if before != after:
                changed.append((f.key, before, after))
        done = {f.key for f, _ in files}
        return rows + self._reanalyse(self._dependents(changed) - done)

    def remove(self, keys: list[str]) -> None:
        changed: list[tuple[str, dict[str, str], dict[str, str]]] = []
        for key in keys:
            fid = self._fid(key)
            if fid is not None:
                changed.append((key, self._interface(fid), {}))
                self._drop(fid)
        self._reanalyse(self._dependents(changed) - set(keys))

    def _dependents(self, changed: Iterable[tuple[str, dict[str, str], dict[str, str]]]) -> set[str]:
        """Files whose references a change of interface can turn wrong (module docstring: one level)."""
        assert self._conn is not None
        vanished: set[str] = set()
        names: set[str] = set()
        for key, before, after in changed:
            vanished |= {full for full, kind in before.items() if after.get(full) != kind}
            names |= {last_component(full) for full, kind in after.items() if before.get(full) != kind}
            if not before:  # a new module: ``import pkg.new`` was unresolved until now
                names.add(PurePosixPath(key.partition(":")[2]).stem)
        out: set[str] = set()
        for table, column, values in (("refs", "target", vanished), ("unresolved", "name", names)):
            for chunk in _chunks(sorted(values)):
                sql = (
                    f"SELECT DISTINCT f.key FROM {table} t JOIN files f ON f.fid = t.fid "  # noqa: S608 - fixed names
                    f"WHERE t.{column} IN ({placeholders(len(chunk))})"
                )
                out |= {r[0] for r in self._conn.execute(sql, chunk)}
        return out

    def _reanalyse(self, keys: set[str]) -> int:
        rows = 0
        for key in sorted(keys):
            project, _, path = key.partition(":")
            root = self.roots.get(project)
            data = read_indexable(root, path) if root is not None else None
            if data is None:
                continue  # gone or unreadable: its own index run drops it
            f = SourceFile(project, path, len(data), 0, "")
            rows += self._replace(f, data)[0]
            self.reanalysed += 1
        return rows

    def commit(self) -> None:
        assert self._conn is not None
        self._conn.commit()

    def close(self) -> None:
        self.analyser.reset(keep_parses=0)
        if self._conn is not None:
            self._conn.close()
        self._conn = None


def _chunks(values: list[str], size: int = 500) -> Iterable[list[str]]:
    for i in range(0, len(values), size):
        yield values[i : i + size]


# -- read side ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DefRow:
    project: str
    path: str
    name: str
    full_name: str
    qname: str
    type: str
    line: int
    start: int
    end: int
    snippet: str


@dataclass(frozen=True, slots=True)
class RefRow:
    project: str
    path: str
    line: int
    target: str
    kind: str
    enclosing: str | None
    text: str


_DEF_SQL = (
    "SELECT f.project, f.path, d.name, d.full_name, d.qname, d.type, d.line, d.start, d.end, d.snippet "
    "FROM defs d JOIN files f ON f.fid = d.fid"
)
_REF_SQL = (
    "SELECT f.project, f.path, r.line, r.target, r.kind, r.enclosing, r.text FROM refs r JOIN files f ON f.fid = r.fid"
)
_ORDER = " ORDER BY f.project, f.path, {0} LIMIT ?"


class TypedStore(SqliteReader):
    """Look-ups by name, by resolved full name and by resolved base. One connection per thread."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory / DB_NAME)

    def _rows(self, sql: str, args: Sequence[object]) -> list[tuple[object, ...]]:
        return list(self._db().execute(sql, list(args)))

    def definitions(self, names: Iterable[str], projects: Sequence[str] | None, cap: int = 5000) -> list[DefRow]:
        """Definitions whose name equals one of ``names`` ignoring case (the caller ranks)."""
        lnames = sorted({last_component(n).lower() for n in names})
        if not lnames or projects == []:
            return []
        extra, args = self._projects_sql(projects)
        sql = f"{_DEF_SQL} WHERE d.lname IN ({placeholders(len(lnames))}){extra}{_ORDER.format('d.line')}"
        return [DefRow(*r) for r in self._rows(sql, [*lnames, *args, cap])]  # type: ignore[arg-type]

    def definitions_of(self, full_names: Sequence[str], projects: Sequence[str] | None) -> list[DefRow]:
        if not full_names or projects == []:
            return []
        extra, args = self._projects_sql(projects)
        sql = f"{_DEF_SQL} WHERE d.full_name IN ({placeholders(len(full_names))}){extra}{_ORDER.format('d.line')}"
        return [DefRow(*r) for r in self._rows(sql, [*full_names, *args, 5000])]  # type: ignore[arg-type]

    def references_to(self, targets: Sequence[str], projects: Sequence[str] | None, cap: int = 5000) -> list[RefRow]:
        """References that jedi resolved to one of the full names ``targets``."""
        if not targets or projects == []:
            return []
        extra, args = self._projects_sql(projects)
        sql = f"{_REF_SQL} WHERE r.target IN ({placeholders(len(targets))}){extra}{_ORDER.format('r.line')}"
        return [RefRow(*r) for r in self._rows(sql, [*targets, *args, cap])]  # type: ignore[arg-type]

    def references_ending(self, last: str, projects: Sequence[str] | None, cap: int = 5000) -> list[RefRow]:
        """References whose target's last component is ``last`` (ignoring case): names defined elsewhere."""
        if projects == []:
            return []
        extra, args = self._projects_sql(projects)
        sql = f"{_REF_SQL} WHERE r.tlast = ?{extra}{_ORDER.format('r.line')}"
        return [RefRow(*r) for r in self._rows(sql, [last.lower(), *args, cap])]  # type: ignore[arg-type]

    def subclasses(
        self, bases: Sequence[str], projects: Sequence[str] | None, *, by_last: bool = False
    ) -> list[tuple[DefRow, str]]:
        """(class definition, base full name) for classes with a base that resolved to one of ``bases``
        (or, with ``by_last``, whose last component is one of them, ignoring case)."""
        if not bases or projects == []:
            return []
        extra, args = self._projects_sql(projects)
        column, values = ("b.blast", [last_component(b).lower() for b in bases]) if by_last else ("b.base", list(bases))
        sql = (
            f"SELECT DISTINCT f.project, f.path, d.name, d.full_name, d.qname, d.type, d.line, d.start, d.end, "
            f"d.snippet, b.base FROM bases b JOIN files f ON f.fid = b.fid JOIN defs d ON d.fid = b.fid "
            f"AND d.full_name = b.class_full WHERE {column} IN ({placeholders(len(values))}){extra}"
            f"{_ORDER.format('d.line')}"
        )
        return [(DefRow(*r[:10]), str(r[10])) for r in self._rows(sql, [*values, *args, 5000])]  # type: ignore[arg-type]

    def bases_of(self, project: str, path: str, class_full: str) -> list[str]:
        sql = (
            "SELECT DISTINCT b.written FROM bases b JOIN files f ON f.fid = b.fid "
            "WHERE f.project=? AND f.path=? AND b.class_full=? ORDER BY b.rowid"
        )
        return [str(r[0]) for r in self._rows(sql, [project, path, class_full])]


def stats(directory: Path) -> Mapping[str, int]:
    """Row counts per table (benchmarks and docs)."""
    conn = sqlite3.connect(directory / DB_NAME)
    try:
        return {t: int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]) for t in _TABLES}  # noqa: S608
    finally:
        conn.close()
