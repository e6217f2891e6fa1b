"""What jedi's static analysis knows about one Python file, computed once at index time.

For every file the typed index stores (:mod:`engine.index.typed`):

* **definitions** — classes and functions at any depth, and statements (constants, class
  attributes) at module or class level, each with jedi's full name (``pkg.mod.Cls.method``),
  type and definition range;
* **references** — every other name that jedi's ``goto`` (imports followed) resolves to
  something that is not a parameter or a local of the same file, with the full name it resolves
  to, the file it lands in when that file is in the workspace, and the enclosing definition
  (the caller); names inside ``import`` statements are references of kind ``import``;
* **bases** — for each class, the full name each base expression resolves to;
* **unresolved** — names jedi could not resolve (a definition added later may change that:
  the indexer re-analyses those files then).

Why a shared ``InferenceState``: a plain ``jedi.Script`` per file starts jedi's inference from
scratch, re-inferring every imported module for every file (7.3 ms per resolved name on
django); one state per project shares what was inferred (2.7 ms, and ~0.07 ms once warm). That
uses jedi internals (``InferenceState``, the attributes ``Script.__init__`` sets), pinned by
``jedi>=0.19,<0.21`` in pyproject.toml and exercised by tests/experts/test_typed.py. The state
is recycled every ``recycle_files`` files (its caches grow ~1 MB per file) and parso's parser
cache is kept from evicting modules the live state still points to.

The sys path puts the workspace's project roots (and their ``src/`` / ``lib/``) before the
interpreter's own, so ``import marshmallow`` inside ``webargs`` lands in the workspace's
marshmallow, not in a copy installed beside the engine: references cross projects.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SNIPPET_LINES = 8
SNIPPET_CHARS = 800
LINE_CHARS = 200
_IMPORTS = frozenset({"import_from", "import_name"})
_SCOPES = frozenset({"funcdef", "classdef", "lambdef", "file_input"})
_COMPREHENSIONS = frozenset({"sync_comp_for", "comp_for"})


@dataclass(frozen=True, slots=True)
class Definition:
    name: str
    full_name: str
    qname: str  # the full name without its module: ``Cls.method``
    type: str  # class | function | statement
    line: int  # the name's line
    start: int
    end: int
    snippet: str


@dataclass(frozen=True, slots=True)
class Reference:
    line: int
    name: str
    target: str  # full name of what the name resolves to
    target_key: str | None  # ``project:path`` when the target is in the workspace
    kind: str  # import | reference
    enclosing: str | None  # full name of the innermost definition around the name
    text: str  # the line, stripped


@dataclass(frozen=True, slots=True)
class Base:
    class_full: str
    base_full: str
    written: str


@dataclass
class FileFacts:
    module: str
    definitions: list[Definition] = field(default_factory=list)
    references: list[Reference] = field(default_factory=list)
    bases: list[Base] = field(default_factory=list)
    unresolved: set[str] = field(default_factory=set)
    complete: bool = True  # False when the file's time budget ran out before every name was resolved

    def interface(self) -> dict[str, str]:
        """full name → type of what other files can resolve to (what invalidation compares)."""
        return {d.full_name: d.type for d in self.definitions}


def _jedi() -> Any:
    import jedi  # imported on first use: `engine index` without the typed expert never pays for it

    return jedi


def _stdlib_dir(entry: str) -> bool:
    """The interpreter's own library folders, not its site-packages: the engine's dependencies are
    not the workspace's (resolving into them was wrong, and loading numpy's stubs cost seconds)."""
    path = Path(entry)
    return bool(entry) and path.is_dir() and path.name not in ("site-packages", "dist-packages")


def _source_dirs(root: Path) -> list[str]:
    return [str(root)] + [str(root / d) for d in ("src", "lib") if (root / d).is_dir()]


class JediAnalyser:
    """Analyses files project by project with one shared, periodically recycled inference state."""

    def __init__(
        self,
        roots: Mapping[str, Path],
        *,
        recycle_files: int = 300,
        keep_parses: int = 1000,
        file_seconds: float = 30.0,
    ) -> None:
        self.roots = {name: Path(root).resolve() for name, root in roots.items()}
        self.recycle_files, self.keep_parses, self.file_seconds = recycle_files, keep_parses, file_seconds
        self._state: Any = None
        self._state_project: str | None = None
        self._files = 0

    # -- the inference state ------------------------------------------------------------------

    def _new_state(self, project: str) -> Any:
        jedi = _jedi()
        from jedi.inference import InferenceState

        env = jedi.InterpreterEnvironment()
        own = self.roots[project]
        others = [d for n, r in sorted(self.roots.items()) if n != project for d in _source_dirs(r)]
        workspace = _source_dirs(own) + others
        sys_path = workspace + [p for p in env.get_sys_path() if _stdlib_dir(p) and p not in workspace]
        jproject = jedi.Project(own, sys_path=sys_path, smart_sys_path=True)
        return InferenceState(jproject, environment=env, script_path=own)

    def _state_for(self, project: str) -> Any:
        if self._state is None or self._state_project != project or self._files >= self.recycle_files:
            self.reset()
            self._state, self._state_project = self._new_state(project), project
        self._files += 1
        return self._state

    def reset(self, keep_parses: int | None = None) -> None:
        """Drop the inference state, and parso's in-memory parses but the ``keep_parses`` most
        recently used (no state points at them any more; loading a parse back from parso's disk
        cache costs ~75 ms a module, so the hot ones — stdlib, the project's core — stay)."""
        self._state, self._state_project, self._files = None, None, 0
        import parso.cache

        keep = self.keep_parses if keep_parses is None else keep_parses
        for grammar, items in parso.cache.parser_cache.items():
            recent = sorted(items.items(), key=lambda kv: kv[1].last_used, reverse=True)[:keep]
            parso.cache.parser_cache[grammar] = dict(recent)

    def key_of(self, module_path: Any) -> str | None:
        """``project:path`` of a file jedi landed in, when it is inside a workspace project."""
        if module_path is None:
            return None
        path = Path(module_path)
        for name, root in self.roots.items():
            if path.is_relative_to(root):
                return f"{name}:{path.relative_to(root).as_posix()}"
        return None

    # -- one file -----------------------------------------------------------------------------

    def analyse(self, project: str, path: str, code: str) -> FileFacts:
        with _keep_parses():
            return self._analyse(project, path, code)

    def _analyse(self, project: str, path: str, code: str) -> FileFacts:
        state = self._state_for(project)
        script = _script(state, self.roots[project] / path, code)
        lines = code.split("\n")
        names = script.get_names(all_scopes=True, definitions=True, references=True)
        module = names[0].module_name if names else ""
        facts = FileFacts(module)
        scopes: dict[tuple[int, int], str] = {}  # (line, col) of a def/class name → its full name
        base_of: dict[tuple[int, int], tuple[str, str]] = {}  # a base's last name → (class, written)
        # CPU seconds, not wall: on a loaded machine a wall budget would cut files short at random
        deadline = time.thread_time() + self.file_seconds
        local = _Locals()
        for n in names:
            leaf = n._name.tree_name
            if leaf is None:
                continue
            in_import = _ancestor(leaf, _IMPORTS) is not None
            if n.is_definition() and not in_import:
                d = _definition(n, leaf, module, lines)
                if d is not None:
                    facts.definitions.append(d)
                    if d.type in ("class", "function"):
                        scopes[leaf.start_pos] = d.full_name
                    if d.type == "class":
                        base_of.update({pos: (d.full_name, w) for pos, w in _base_names(leaf.parent)})
                continue
            if _is_alias_or_keyword(leaf) or (not in_import and not _is_attribute(leaf) and local.names(leaf)):
                continue  # a local resolves to its own assignment: nothing to index, and no goto to pay
            if time.thread_time() > deadline:
                facts.complete = False
                break
            self._resolve(n, leaf, facts, scopes, base_of, lines, "import" if in_import else "reference")
        return facts

    def _resolve(
        self,
        n: Any,
        leaf: Any,
        facts: FileFacts,
        scopes: dict[tuple[int, int], str],
        base_of: dict[tuple[int, int], tuple[str, str]],
        lines: list[str],
        kind: str,
    ) -> None:
        try:
            found = n.goto(follow_imports=True)
        except Exception:  # noqa: BLE001 - jedi gives up on some dynamic code: the name stays unresolved
            found = []
        own_path = n.module_path
        enclosing = _enclosing(leaf, scopes)
        resolved = False
        for g in found:
            if g.type == "param" or not g.full_name:
                resolved = True  # a parameter or an anonymous value: resolved, nothing to index
                continue
            resolved = True
            local = g.module_path == own_path and g.type != "module" and (g.line, g.column) not in scopes
            if local and not _is_module_level(g):
                continue  # a local of this file
            facts.references.append(
                Reference(
                    n.line,
                    leaf.value,
                    g.full_name,
                    self.key_of(g.module_path),
                    kind,
                    enclosing,
                    lines[n.line - 1].strip()[:LINE_CHARS],
                )
            )
            if leaf.start_pos in base_of:
                cls, written = base_of[leaf.start_pos]
                facts.bases.append(Base(cls, g.full_name, written))
        if not resolved:
            facts.unresolved.add(leaf.value)


def _script(state: Any, path: Path, code: str) -> Any:
    """A ``jedi.Script`` on ``code`` that shares ``state`` (see the module docstring)."""
    jedi = _jedi()
    from parso.utils import split_lines

    script = jedi.Script.__new__(jedi.Script)
    script._orig_path = path
    script.path = path.absolute()
    script._inference_state = state
    state.script_path = script.path  # the project's sys path adds the script's parent folders
    script._module_node, code = state.parse_and_get_code(
        code=code,
        path=script.path,
        use_latest_grammar=path.suffix == ".pyi",
        cache=False,
        diff_cache=True,  # jedi looks the script itself up in parso's cache (as Script does)
        cache_path=jedi.settings.cache_directory,
    )
    script._code_lines = split_lines(code, keepends=True)
    script._code = code
    return script


@contextlib.contextmanager
def _keep_parses() -> Iterator[None]:
    """parso drops cached parses unused for 10 minutes once 600 are cached, but a live inference
    state still points at them (KeyError deep in jedi): no eviction while a file is analysed;
    :meth:`JediAnalyser.reset` frees them all at once instead."""
    import parso.cache

    saved = parso.cache._CACHED_SIZE_TRIGGER
    parso.cache._CACHED_SIZE_TRIGGER = 1 << 30
    try:
        yield
    finally:
        parso.cache._CACHED_SIZE_TRIGGER = saved


def _ancestor(node: Any, types: frozenset[str]) -> Any:
    node = node.parent
    while node is not None:
        if node.type in types:
            return node
        node = node.parent
    return None


def _scope(leaf: Any) -> Any:
    return _ancestor(leaf, _SCOPES)


def _is_module_level(name: Any) -> bool:
    tree = name._name.tree_name
    return tree is not None and _scope(tree).type in ("file_input", "classdef")


def _definition(n: Any, leaf: Any, module: str, lines: list[str]) -> Definition | None:
    kind = n.type
    parent = leaf.parent
    if kind in ("class", "function"):
        if parent.type not in ("classdef", "funcdef") or parent.name is not leaf:
            return None
    elif kind == "statement":
        # constants and class attributes only: not locals, ``self.x``, loop or comprehension names
        if parent.type == "trailer" or _scope(leaf).type not in ("file_input", "classdef"):
            return None
        if _ancestor(leaf, _COMPREHENSIONS) is not None:
            return None
    else:
        return None
    full = n.full_name
    if not full:
        return None
    start = (n.get_definition_start_position() or (n.line, 0))[0]
    end = (n.get_definition_end_position() or (n.line, 0))[0]
    qname = full[len(module) + 1 :] if module and full.startswith(module + ".") else full
    snippet = "\n".join(lines[start - 1 : min(end, start - 1 + SNIPPET_LINES)])[:SNIPPET_CHARS]
    return Definition(leaf.value, full, qname, kind, n.line, start, end, snippet)


def _base_names(classdef: Any) -> Iterator[tuple[tuple[int, int], str]]:
    """(position of the last name, written text) of each base expression of a class."""
    args = classdef.get_super_arglist()
    if args is None:
        return
    for arg in args.children if args.type == "arglist" else [args]:
        if arg.type == "operator" or (arg.type == "argument" and any(c.type == "operator" for c in arg.children)):
            continue  # a comma, ``metaclass=…`` or ``*bases``
        last = arg.get_last_leaf()
        if last.type == "name":
            yield last.start_pos, arg.get_code(include_prefix=False)


class _Locals:
    """The names local to each function around a name (parameters, assignments, nested defs,
    minus ``global`` / ``nonlocal`` ones and names bound by ``import``, which jedi follows)."""

    def __init__(self) -> None:
        self._cache: dict[int, frozenset[str]] = {}

    def names(self, leaf: Any) -> bool:
        """Is ``leaf`` (a plain name, not an attribute) a local of a function body it is in?"""
        child, node = leaf, leaf.parent
        while node is not None:
            # a default value or an annotation of the parameters belongs to the scope outside
            if node.type in ("funcdef", "lambdef") and child is node.children[-1]:
                key = id(node)
                if key not in self._cache:
                    self._cache[key] = _local_names(node)
                if leaf.value in self._cache[key]:
                    return True
            child, node = node, node.parent
        return False


def _local_names(scope: Any) -> frozenset[str]:
    names = {p.name.value for p in scope.get_params()}
    declared: set[str] = set()
    stack = [scope.children[-1]]
    while stack:
        node = stack.pop()
        if node.type == "name":
            if node.is_definition() and node.parent.type != "trailer" and _ancestor(node, _IMPORTS) is None:
                names.add(node.value)
        elif node.type in ("funcdef", "classdef"):
            names.add(node.name.value)  # its body is its own scope
        elif node.type in ("global_stmt", "nonlocal_stmt"):
            declared.update(c.value for c in node.children if c.type == "name")
        elif node.type != "lambdef" and hasattr(node, "children"):
            stack.extend(node.children)
    return frozenset(names - declared)


def _is_attribute(leaf: Any) -> bool:
    prev = leaf.get_previous_leaf()
    return prev is not None and prev.type == "operator" and prev.value == "."


def _is_alias_or_keyword(leaf: Any) -> bool:
    """``D`` in ``import C as D`` (a definition of the alias) or ``k`` in ``f(k=1)``."""
    parent = leaf.parent
    if parent.type in ("import_as_name", "dotted_as_name"):
        return parent.children[-1] is leaf and len(parent.children) == 3
    if parent.type == "argument":
        nxt = leaf.get_next_sibling()
        return nxt is not None and nxt.type == "operator" and nxt.value == "="
    return False


def _enclosing(leaf: Any, scopes: dict[tuple[int, int], str]) -> str | None:
    node = leaf.parent
    while node is not None:
        if node.type in ("funcdef", "classdef"):
            full = scopes.get(node.name.start_pos)
            if full is not None:
                return full
        node = node.parent
    return None
