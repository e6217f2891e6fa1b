"""Language detection and cached tree-sitter grammars, parsers and queries.

Each grammar's own ``queries/tags.scm`` is read from its installed package (never copied) and
concatenated with a small per-language *extra* query defined here.  The extras add what
tags.scm lacks: base types (``@base``) and a few definitions (enums, type aliases, Rust
``impl`` blocks, interface method signatures...).  TypeScript reuses JavaScript's tags.scm
first, as the tree-sitter tags configuration for TypeScript does (its own file only adds the
type-level patterns).

Building a ``Language`` or a ``Query`` costs milliseconds, so both are cached per process;
``Parser`` objects are not thread-safe and are cached per thread.
"""

from __future__ import annotations

import functools
import importlib
import importlib.resources
import logging
import os
import threading
from dataclasses import dataclass

from tree_sitter import Language, Parser, Query, QueryError

_log = logging.getLogger(__name__)

__all__ = [
    "CODE_LANGUAGES",
    "DOC_LANGUAGES",
    "GrammarSpec",
    "grammar",
    "language_for",
    "parser_for",
    "query_for",
    "query_parts",
]

_EXTENSIONS: dict[str, str] = {
    ".py": "python",
    ".pyi": "python",
    ".pyw": "python",
    ".js": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".jsx": "javascript",
    ".ts": "typescript",
    ".mts": "typescript",
    ".cts": "typescript",
    ".tsx": "tsx",
    ".go": "go",
    ".rs": "rust",
    ".java": "java",
    ".md": "markdown",
    ".markdown": "markdown",
    ".mdown": "markdown",
    ".mkd": "markdown",
    ".mdx": "markdown",
    ".rst": "rst",
    ".rest": "rst",
}

CODE_LANGUAGES: tuple[str, ...] = ("python", "javascript", "typescript", "tsx", "go", "rust", "java")
DOC_LANGUAGES: tuple[str, ...] = ("markdown", "rst")


def language_for(path: str) -> str | None:
    """Return the language name for ``path`` from its extension, or ``None`` if unknown.

    Code: python, javascript, typescript, tsx, go, rust, java. Docs: markdown, rst.
    """
    ext = os.path.splitext(path)[1].lower()
    return _EXTENSIONS.get(ext)


# --------------------------------------------------------------------------------------------
# Extra queries.  Captures: ``@name`` + ``@definition.<kind>`` like tags.scm, and ``@base`` for
# a base type; the class that owns a base is found by walking up from the base node.
# --------------------------------------------------------------------------------------------

_PYTHON_EXTRA = r"""
(class_definition superclasses: (argument_list [(identifier) (attribute)] @base))
(class_definition superclasses: (argument_list (subscript value: (_) @base)))
"""

_JAVASCRIPT_EXTRA = r"""
(class_heritage [(identifier) (member_expression)] @base)
"""

_TYPESCRIPT_EXTRA = r"""
(type_alias_declaration name: (type_identifier) @name) @definition.type
(enum_declaration name: (identifier) @name) @definition.enum
(internal_module name: (identifier) @name) @definition.module
(extends_clause value: (_) @base)
(implements_clause (_) @base)
(extends_type_clause type: (_) @base)
"""

_GO_EXTRA = r"""
(method_elem name: (field_identifier) @name) @definition.method
(source_file (const_declaration (const_spec name: (identifier) @name) @definition.constant))
(field_declaration_list (field_declaration !name type: (_) @base))
(interface_type (type_elem (_) @base))
"""

_RUST_EXTRA = r"""
(impl_item type: (_) @name) @definition.implementation
(function_signature_item name: (identifier) @name) @definition.method
(const_item name: (identifier) @name) @definition.constant
(static_item name: (identifier) @name) @definition.constant
(impl_item trait: (_) @base)
(trait_item bounds: (trait_bounds [(type_identifier) (scoped_type_identifier) (generic_type)] @base))
"""

_JAVA_EXTRA = r"""
(enum_declaration name: (identifier) @name) @definition.enum
(record_declaration name: (identifier) @name) @definition.class
(annotation_type_declaration name: (identifier) @name) @definition.interface
(constructor_declaration name: (identifier) @name) @definition.method
(superclass (_) @base)
(super_interfaces (type_list (_) @base))
(extends_interfaces (type_list (_) @base))
"""


@dataclass(frozen=True, slots=True)
class GrammarSpec:
    """Where one language's grammar and tags queries come from."""

    module: str
    function: str
    tags_modules: tuple[str, ...]
    extra: str


_GRAMMARS: dict[str, GrammarSpec] = {
    "python": GrammarSpec("tree_sitter_python", "language", ("tree_sitter_python",), _PYTHON_EXTRA),
    "javascript": GrammarSpec("tree_sitter_javascript", "language", ("tree_sitter_javascript",), _JAVASCRIPT_EXTRA),
    "typescript": GrammarSpec(
        "tree_sitter_typescript",
        "language_typescript",
        ("tree_sitter_javascript", "tree_sitter_typescript"),
        _TYPESCRIPT_EXTRA,
    ),
    "tsx": GrammarSpec(
        "tree_sitter_typescript",
        "language_tsx",
        ("tree_sitter_javascript", "tree_sitter_typescript"),
        _TYPESCRIPT_EXTRA,
    ),
    "go": GrammarSpec("tree_sitter_go", "language", ("tree_sitter_go",), _GO_EXTRA),
    "rust": GrammarSpec("tree_sitter_rust", "language", ("tree_sitter_rust",), _RUST_EXTRA),
    "java": GrammarSpec("tree_sitter_java", "language", ("tree_sitter_java",), _JAVA_EXTRA),
}


def _read_tags_scm(module: str) -> str:
    return (importlib.resources.files(module) / "queries" / "tags.scm").read_text(encoding="utf-8")


@functools.cache
def grammar(lang: str) -> Language | None:
    """The cached ``Language`` for ``lang``, or ``None`` if its grammar is not installed."""
    spec = _GRAMMARS.get(lang)
    if spec is None:
        return None
    try:
        module = importlib.import_module(spec.module)
        return Language(getattr(module, spec.function)())
    except (ImportError, AttributeError, ValueError):
        return None


def query_parts(lang: str) -> list[str]:
    """The pieces of ``lang``'s tags query: each tags.scm file, then one-line extra patterns."""
    spec = _GRAMMARS.get(lang)
    if spec is None:
        return []
    parts: list[str] = []
    for module in spec.tags_modules:
        try:
            parts.append(_read_tags_scm(module))
        except (OSError, ModuleNotFoundError) as exc:
            _log.warning("no tags.scm for %s in %s: %s", lang, module, exc)
    parts.extend(line for line in spec.extra.splitlines() if line.strip())
    return parts


@functools.cache
def query_for(lang: str) -> Query | None:
    """The cached tags.scm + extras ``Query`` for ``lang``, or ``None`` if unavailable.

    If the combined source does not compile against the installed grammar (a grammar upgrade
    renamed a node), the parts that still compile are kept and the rest is logged and dropped,
    so one stale pattern cannot turn a whole language into plain windows.
    """
    language = grammar(lang)
    if language is None:
        return None
    parts = query_parts(lang)
    try:
        return Query(language, "\n".join(parts))
    except QueryError as exc:
        _log.warning("tags query for %s does not compile (%s); dropping broken patterns", lang, exc)
    kept: list[str] = []
    for part in parts:
        try:
            Query(language, part)
        except QueryError as exc:
            _log.warning("dropping %s pattern %r: %s", lang, part[:80], exc)
            continue
        kept.append(part)
    try:
        return Query(language, "\n".join(kept)) if kept else None
    except QueryError:
        return None


_local = threading.local()


def parser_for(lang: str) -> Parser | None:
    """A per-thread cached ``Parser`` for ``lang``, or ``None`` if the grammar is missing."""
    cache: dict[str, Parser] | None = getattr(_local, "parsers", None)
    if cache is None:
        cache = _local.parsers = {}
    parser = cache.get(lang)
    if parser is None:
        language = grammar(lang)
        if language is None:
            return None
        parser = cache[lang] = Parser(language)
    return parser
