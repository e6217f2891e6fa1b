"""Definitions and references from tree-sitter ``tags.scm`` queries, with qualified names.

The grammar's own tags.scm names each match ``@definition.<kind>`` or ``@reference.<kind>``
with a ``@name`` capture.  On top of it this module:

- nests definitions by syntax-node containment to build qualified names
  (``Outer.Inner.method``); Go methods are qualified by their receiver type (``Server.Start``)
  and Rust ``impl`` blocks act as a scope named after the implementing type;
- refines a few kinds so they mean the same across languages: a function directly inside a
  class-like definition is a ``method``; a "method" directly inside a Rust ``mod`` is a
  ``function``; Go ``type`` specs become ``class`` (struct) or ``interface``;
- collects ``bases`` from the ``@base`` captures of the per-language extra queries;
  a Rust ``impl Trait for X`` adds ``Trait`` to the bases of the ``impl`` block and of ``X``
  when ``X`` is defined in the same file;
- drops a reference whose name node is also a definition's name node (Go's tags.scm tags every
  ``type_identifier`` as a reference, including the one that names the type).

All of this is syntactic: names are not resolved, so a reference ``foo`` may mean any ``foo``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tree_sitter import Node, QueryCursor, Tree

from .languages import parser_for, query_for

__all__ = ["CLASS_KINDS", "MAX_PARSE_BYTES", "Tag", "analyze", "is_binary", "node_lines"]

#: Files above this size are not parsed (minified bundles, generated tables); see ``chunks``.
MAX_PARSE_BYTES = 2_000_000

#: Definition kinds that own methods / base types.
CLASS_KINDS = frozenset({"class", "interface", "implementation", "enum", "struct", "trait"})

# Wrappers whose range is the definition's real extent (decorators, ``export``...).
_OUTER_ALWAYS = frozenset({"decorated_definition", "export_statement", "ambient_declaration"})
_OUTER_IF_ONLY_CHILD = frozenset({"lexical_declaration", "variable_declaration", "expression_statement"})
_QUALIFIER_PARENTS = frozenset(
    {
        "attribute",
        "member_expression",
        "selector_expression",
        "field_expression",
        "scoped_identifier",
        "scoped_type_identifier",
        "nested_type_identifier",
        "qualified_type",
    }
)
_BASE_OK = re.compile(r"^[A-Za-z_$][\w$]*(?:(?:\.|::)[A-Za-z_$][\w$]*)*$")
_WS = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class Tag:
    """One definition or reference found in a source file.

    Attributes:
        name: The bare identifier (``method``).
        qualified_name: For definitions, the names of the enclosing definitions joined with
            ``.`` (``Outer.Inner.method``); for references, the callee as written when it is a
            short dotted path (``self.helper``, ``os.path.join``), else ``name``.
        kind: ``class``, ``function``, ``method``, ``interface``, ``module``, ``constant``,
            ``type``, ``enum``, ``implementation``, ``macro``, ``section`` for definitions;
            ``call``, ``class``, ``type``, ``implementation`` for references.
        role: ``"definition"`` or ``"reference"``.
        start_line: 1-based first line (a definition's whole node, decorators included;
            a reference's name).
        end_line: 1-based last line, inclusive.
        enclosing: Qualified name of the innermost enclosing definition, or ``None``.
        bases: Class-like definitions only: superclasses, implemented interfaces, embedded
            types, ``impl`` traits, as written (type arguments removed).
    """

    name: str
    qualified_name: str
    kind: str
    role: str
    start_line: int
    end_line: int
    enclosing: str | None = None
    bases: tuple[str, ...] = ()

    def __reduce__(self) -> tuple[type[Tag], tuple[str, str, str, str, int, int, str | None, tuple[str, ...]]]:
        # as Chunk.__reduce__: the parse worker's replies unpickle by the constructor, not fields()
        n = self
        return Tag, (n.name, n.qualified_name, n.kind, n.role, n.start_line, n.end_line, n.enclosing, n.bases)


@dataclass(slots=True, eq=False)
class Definition:
    """A definition with its syntax nodes, used to build tags and chunks (internal)."""

    node: Node
    span: Node
    name: str
    kind: str
    pattern: int
    qualified: str = ""
    parent: Definition | None = None
    children: list[Definition] = field(default_factory=list)
    bases: list[str] = field(default_factory=list)
    receiver: str | None = None
    name_line: int = 0  # 1-based line of the name: the signature line, after decorators


@dataclass(slots=True)
class Analysis:
    """Result of parsing one file: the tree, nested definitions and the flat tag list."""

    tree: Tree
    definitions: list[Definition]
    tags: list[Tag]


def is_binary(source: bytes) -> bool:
    """Heuristic: a NUL byte in the first 8 KiB means binary."""
    return b"\x00" in source[:8192]


def node_lines(node: Node) -> tuple[int, int]:
    """1-based inclusive line range of ``node`` (a trailing newline does not add a line)."""
    start = node.start_point.row
    end = node.end_point.row
    if end > start and node.end_point.column == 0:
        end -= 1
    return start + 1, end + 1


def _text(node: Node) -> str:
    raw = node.text or b""
    return raw.decode("utf-8", errors="replace")


def _clean_type(text: str) -> str:
    """``&mut a::Foo<T>`` -> ``a::Foo``; ``Generic[T]`` -> ``Generic``; ``mix(B)`` -> ``mix``."""
    text = _WS.sub(" ", text).strip()
    for stop in ("<", "[", "("):
        cut = text.find(stop)
        if cut > 0:
            text = text[:cut]
    text = text.lstrip("&*~ ")
    for prefix in ("mut ", "dyn ", "const "):
        if text.startswith(prefix):
            text = text[len(prefix) :]
    return text.strip()


def _outer(node: Node) -> Node:
    """Climb to wrappers that belong to the definition (decorators, ``export``, ``const``)."""
    while True:
        parent = node.parent
        if parent is None:
            return node
        if parent.type in _OUTER_ALWAYS or (parent.type in _OUTER_IF_ONLY_CHILD and parent.named_child_count == 1):
            node = parent
            continue
        return node


def _go_receiver(node: Node) -> str | None:
    receiver = node.child_by_field_name("receiver")
    if receiver is None:
        return None
    for param in receiver.named_children:
        type_node = param.child_by_field_name("type")
        if type_node is not None:
            name = _clean_type(_text(type_node))
            return name or None
    return None


def _reference_qualified(name_node: Node, name: str) -> str:
    parent = name_node.parent
    text = None
    if parent is not None:
        if parent.type in _QUALIFIER_PARENTS and parent.end_byte == name_node.end_byte:
            text = _text(parent)
        elif parent.type == "method_invocation":  # Java: obj.m(...)
            obj = parent.child_by_field_name("object")
            if obj is not None:
                text = f"{_text(obj)}.{name}"
    if text is None or len(text) > 120:
        return name
    text = _WS.sub("", text)
    return text if _BASE_OK.match(text) else name


def _refine_kind(lang: str, d: Definition) -> str:
    kind = d.kind
    if lang == "go" and kind == "type" and d.node.type == "type_spec":
        type_node = d.node.child_by_field_name("type")
        if type_node is not None:
            if type_node.type == "struct_type":
                return "class"
            if type_node.type == "interface_type":
                return "interface"
        return kind
    parent_kind = d.parent.kind if d.parent is not None else None
    if kind == "function" and parent_kind in CLASS_KINDS:
        return "method"
    if kind == "method" and parent_kind == "module":
        return "function"
    return kind


def analyze(lang: str, source: bytes) -> Analysis | None:
    """Parse ``source`` as ``lang`` and return definitions and tags, or ``None`` if unsupported.

    Raises nothing for unsupported languages; callers guard against unexpected grammar errors.
    """
    parser = parser_for(lang)
    query = query_for(lang)
    if parser is None or query is None:
        return None
    tree = parser.parse(source)
    root = tree.root_node

    defs_by_name: dict[tuple[int, int], Definition] = {}
    refs: list[tuple[Node, str]] = []  # (name node, kind)
    base_nodes: list[Node] = []
    for pattern, caps in QueryCursor(query).matches(root):
        based = caps.get("base")
        if based:
            base_nodes.extend(based)
            continue
        names = caps.get("name")
        if not names:
            continue
        for key, nodes in caps.items():
            role, _, kind = key.partition(".")
            if role == "definition" and kind:
                name_node = names[0]
                span = (name_node.start_byte, name_node.end_byte)
                known = defs_by_name.get(span)
                if known is None or pattern < known.pattern:
                    name = _text(name_node)
                    if kind == "implementation":
                        name = _clean_type(name)
                    defs_by_name[span] = Definition(
                        node=nodes[0],
                        span=_outer(nodes[0]),
                        name=name,
                        kind=kind,
                        pattern=pattern,
                        name_line=name_node.start_point.row + 1,
                    )
                break
            if role == "reference" and kind:
                refs.append((names[0], kind))
                break

    definitions = sorted(defs_by_name.values(), key=lambda d: (d.node.start_byte, -d.node.end_byte))
    by_node_id = {d.node.id: d for d in definitions}
    # One sweep over definitions and references in source order nests them.
    events: list[tuple[int, int, int, int]] = []  # start, order, -end, index
    for i, d in enumerate(definitions):
        events.append((d.node.start_byte, 0, -d.node.end_byte, i))
    ref_items: list[tuple[Node, str]] = []
    for name_node, kind in refs:
        if (name_node.start_byte, name_node.end_byte) in defs_by_name:
            continue
        events.append((name_node.start_byte, 1, -name_node.end_byte, len(ref_items)))
        ref_items.append((name_node, kind))
    events.sort()

    out: list[tuple[Definition | None, Tag | None]] = []
    stack: list[Definition] = []
    for start, order, neg_end, index in events:
        end = -neg_end
        while stack and not (stack[-1].node.start_byte <= start and end <= stack[-1].node.end_byte):
            stack.pop()
        parent = stack[-1] if stack else None
        if order == 0:
            d = definitions[index]
            d.parent = parent
            if parent is not None:
                parent.children.append(d)
            d.kind = _refine_kind(lang, d)
            receiver = _go_receiver(d.node) if lang == "go" and d.node.type == "method_declaration" else None
            if receiver:
                d.receiver = receiver
                d.qualified = f"{receiver}.{d.name}"
            else:
                d.qualified = f"{parent.qualified}.{d.name}" if parent is not None else d.name
            stack.append(d)
            out.append((d, None))
        else:
            name_node, kind = ref_items[index]
            name = _text(name_node)
            qualified = _reference_qualified(name_node, name)
            if "." in name or "::" in name:  # e.g. ``new a.B()`` captures the whole path
                qualified = _WS.sub("", name)
                name = re.split(r"\.|::", qualified)[-1]
            line = name_node.start_point.row + 1
            out.append(
                (
                    None,
                    Tag(
                        name=name,
                        qualified_name=qualified,
                        kind=kind,
                        role="reference",
                        start_line=line,
                        end_line=node_lines(name_node)[1],
                        enclosing=parent.qualified if parent is not None else None,
                    ),
                )
            )

    _attach_bases(base_nodes, by_node_id, definitions)

    tags: list[Tag] = []
    for found, ref in out:
        if found is None:
            assert ref is not None  # each entry holds a definition or a reference
            tags.append(ref)
            continue
        d = found
        start_line, end_line = node_lines(d.span)
        enclosing = d.receiver or (d.parent.qualified if d.parent is not None else None)
        tags.append(
            Tag(
                name=d.name,
                qualified_name=d.qualified,
                kind=d.kind,
                role="definition",
                start_line=start_line,
                end_line=end_line,
                enclosing=enclosing,
                bases=tuple(d.bases),
            )
        )
    return Analysis(tree=tree, definitions=definitions, tags=tags)


def _attach_bases(base_nodes: list[Node], by_node_id: dict[int, Definition], definitions: list[Definition]) -> None:
    for base in base_nodes:
        owner = base.parent
        while owner is not None and owner.id not in by_node_id:
            owner = owner.parent
        if owner is None:
            continue
        name = _clean_type(_text(base))
        d = by_node_id[owner.id]
        if _BASE_OK.match(name) and name not in d.bases:
            d.bases.append(name)
    # Rust: ``impl Trait for X`` also makes ``Trait`` a base of ``X`` defined in this file.
    impls = [d for d in definitions if d.kind == "implementation" and d.bases]
    if impls:
        types = {d.qualified: d for d in definitions if d.kind in ("class", "enum", "struct")}
        for impl in impls:
            target = types.get(impl.qualified)
            if target is not None:
                for name in impl.bases:
                    if name not in target.bases:
                        target.bases.append(name)
