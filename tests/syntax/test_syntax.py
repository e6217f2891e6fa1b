"""Syntax layer against the real tree-sitter grammars: tags, qualified names, bases, chunks."""

from __future__ import annotations

import textwrap

import pytest
from tree_sitter import Query

from engine.syntax import CODE_LANGUAGES, Chunk, Tag, chunks, language_for, outline, tags
from engine.syntax.languages import grammar, query_parts


def src(text: str) -> bytes:
    return textwrap.dedent(text).lstrip("\n").encode()


def defs(found: list[Tag]) -> dict[str, Tag]:
    """First definition per qualified name (a Rust struct comes before its ``impl`` blocks)."""
    out: dict[str, Tag] = {}
    for t in found:
        if t.role == "definition":
            out.setdefault(t.qualified_name, t)
    return out


def refs(found: list[Tag]) -> set[tuple[str, str | None]]:
    return {(t.name, t.enclosing) for t in found if t.role == "reference" and t.kind == "call"}


# --- languages ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "lang"),
    [
        ("a/b.py", "python"),
        ("x.pyi", "python"),
        ("web/app.js", "javascript"),
        ("web/app.jsx", "javascript"),
        ("web/app.mjs", "javascript"),
        ("web/app.ts", "typescript"),
        ("web/view.tsx", "tsx"),
        ("cmd/main.go", "go"),
        ("src/lib.rs", "rust"),
        ("src/Main.java", "java"),
        ("README.md", "markdown"),
        ("docs/index.rst", "rst"),
        ("Makefile", None),
        ("notes.txt", None),
    ],
)
def test_language_for(path: str, lang: str | None) -> None:
    assert language_for(path) == lang


@pytest.mark.parametrize("lang", CODE_LANGUAGES)
def test_every_tags_query_compiles_whole(lang: str) -> None:
    # query_for() silently drops broken patterns; here nothing may need dropping.
    Query(grammar(lang), "\n".join(query_parts(lang)))


# --- tags per language -----------------------------------------------------------------------

PYTHON = src(
    '''
    import os

    LIMIT = 10


    class Base:
        pass


    class Outer(Base, mixins.Logged, Generic[T], metaclass=Meta):
        """Outer doc."""

        class Inner:
            def method(self):
                return helper(1)

        @property
        def size(self):
            return os.path.getsize(self.path)


    def helper(x):
        return Outer.Inner().method()
    '''
)


def test_python_definitions_references_bases() -> None:
    found = tags("pkg/mod.py", PYTHON)
    d = defs(found)
    assert d["LIMIT"].kind == "constant"
    assert (d["Outer"].kind, d["Outer"].start_line, d["Outer"].end_line) == ("class", 10, 19)
    assert d["Outer"].bases == ("Base", "mixins.Logged", "Generic")  # not metaclass=
    assert d["Outer.Inner"].enclosing == "Outer"
    method = d["Outer.Inner.method"]
    assert (method.kind, method.start_line, method.end_line, method.enclosing) == (
        "method",
        14,
        15,
        "Outer.Inner",
    )
    size = d["Outer.size"]
    assert (size.kind, size.start_line, size.end_line) == ("method", 17, 19)  # decorator included
    assert d["helper"].kind == "function" and d["helper"].enclosing is None
    calls = refs(found)
    assert ("helper", "Outer.Inner.method") in calls
    assert ("getsize", "Outer.size") in calls
    assert ("method", "helper") in calls
    getsize = next(t for t in found if t.name == "getsize")
    assert getsize.qualified_name == "os.path.getsize" and getsize.start_line == 19


JAVA = src(
    """
    package demo;

    public class Service extends BaseService<String> implements Runnable, java.io.Closeable {
        private final int x = 1;

        public Service() {
            super();
        }

        @Override
        public void run() {
            helper.process(x);
        }

        interface Listener extends EventListener {
            void onEvent();
        }
    }
    """
)


def test_java_extends_implements_and_methods() -> None:
    found = tags("demo/Service.java", JAVA)
    d = defs(found)
    assert d["Service"].bases == ("BaseService", "Runnable", "java.io.Closeable")
    assert (d["Service"].start_line, d["Service"].end_line) == (3, 18)
    assert d["Service.run"].kind == "method"
    assert (d["Service.run"].start_line, d["Service.run"].end_line) == (10, 13)
    assert d["Service.Service"].kind == "method"  # constructor
    assert d["Service.Listener"].kind == "interface"
    assert d["Service.Listener"].bases == ("EventListener",)
    assert d["Service.Listener.onEvent"].enclosing == "Service.Listener"
    assert ("process", "Service.run") in refs(found)


TYPESCRIPT = src(
    """
    import { Base } from "./base";

    export interface Shape extends Named, Sized<number> {
      area(): number;
    }

    export class Circle extends Base<number> implements Shape, geo.Round {
      constructor(private r: number) { super(); }

      area(): number {
        return Math.PI * square(this.r);
      }
    }

    export function square(x: number): number {
      return x * x;
    }

    type Point = { x: number; y: number };
    """
)


def test_typescript_extends_implements() -> None:
    found = tags("src/shapes.ts", TYPESCRIPT)
    d = defs(found)
    assert d["Shape"].kind == "interface" and d["Shape"].bases == ("Named", "Sized")
    assert d["Shape.area"].kind == "method"
    assert d["Circle"].kind == "class"
    assert d["Circle"].bases == ("Base", "Shape", "geo.Round")
    assert (d["Circle"].start_line, d["Circle"].end_line) == (7, 13)
    assert (d["Circle.area"].start_line, d["Circle.area"].end_line) == (10, 12)
    assert d["square"].kind == "function" and (d["square"].start_line, d["square"].end_line) == (15, 17)
    assert d["Point"].kind == "type"
    assert ("square", "Circle.area") in refs(found)
    # The same snippet parses as TSX.
    assert "Circle.area" in defs(tags("src/shapes.tsx", TYPESCRIPT))


JAVASCRIPT = src(
    """
    class Widget extends ui.Component {
      render() {
        return this.draw(format(1));
      }
    }

    const format = (n) => String(n);

    function main() {
      new Widget().render();
    }
    """
)


def test_javascript_classes_functions_calls() -> None:
    found = tags("web/widget.js", JAVASCRIPT)
    d = defs(found)
    assert d["Widget"].bases == ("ui.Component",)
    assert (d["Widget.render"].kind, d["Widget.render"].start_line, d["Widget.render"].end_line) == (
        "method",
        2,
        4,
    )
    assert d["format"].kind == "function" and d["format"].start_line == 7
    assert d["main"].kind == "function"
    calls = refs(found)
    assert {("draw", "Widget.render"), ("format", "Widget.render"), ("render", "main")} <= calls
    assert any(t.kind == "class" and t.name == "Widget" and t.role == "reference" for t in found)


GO = src(
    """
    package store

    type Reader interface {
    \tio.Reader
    \tRead(key string) ([]byte, error)
    }

    type Store struct {
    \tBase
    \t*sync.Mutex
    \tpath string
    }

    func (s *Store) Read(key string) ([]byte, error) {
    \treturn load(s.path, key)
    }

    func load(path, key string) ([]byte, error) {
    \treturn nil, nil
    }
    """
)


def test_go_embedding_interfaces_receivers() -> None:
    found = tags("store/store.go", GO)
    d = defs(found)
    assert d["Reader"].kind == "interface" and d["Reader"].bases == ("io.Reader",)
    assert d["Reader.Read"].kind == "method"
    assert d["Store"].kind == "class" and d["Store"].bases == ("Base", "sync.Mutex")
    read = d["Store.Read"]  # qualified by its receiver type
    assert (read.kind, read.enclosing, read.start_line, read.end_line) == ("method", "Store", 14, 16)
    assert d["load"].kind == "function"
    assert ("load", "Store.Read") in refs(found)
    # The type's own name is not also reported as a type reference.
    assert not any(t.role == "reference" and t.name == "Store" and t.start_line == 8 for t in found)


RUST = src(
    """
    use std::fmt;

    pub trait Shape: fmt::Debug {
        fn area(&self) -> f64;
    }

    pub struct Square<T> {
        side: T,
    }

    impl<T> fmt::Display for Square<T> {
        fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
            let text = self.describe(); // calls inside macro arguments are token trees
            write!(f, "{}", text)
        }
    }

    impl<T> Square<T> {
        pub fn describe(&self) -> String {
            helper()
        }
    }

    mod util {
        pub fn helper() -> String { String::new() }
    }
    """
)


def test_rust_impl_trait_for_type() -> None:
    found = tags("src/shape.rs", RUST)
    d = defs(found)
    assert d["Shape"].kind == "interface" and d["Shape"].bases == ("fmt::Debug",)
    assert d["Shape.area"].kind == "method"
    assert d["Square"].kind == "class"
    assert d["Square"].bases == ("fmt::Display",)  # from `impl fmt::Display for Square<T>`
    impls = [t for t in found if t.kind == "implementation" and t.role == "definition"]
    assert [(t.name, t.bases, t.start_line, t.end_line) for t in impls] == [
        ("Square", ("fmt::Display",), 11, 16),
        ("Square", (), 18, 22),
    ]
    assert d["Square.fmt"].enclosing == "Square" and d["Square.fmt"].kind == "method"
    assert d["Square.describe"].start_line == 19
    assert d["util.helper"].kind == "function"  # inside `mod`, not a method
    calls = refs(found)
    assert {("describe", "Square.fmt"), ("write", "Square.fmt"), ("helper", "Square.describe")} <= calls


# --- chunks ----------------------------------------------------------------------------------

CHUNKED = src(
    '''
    """Module doc."""
    import os

    DEFAULT = 3


    class Cache(dict):
        """A cache."""

        ttl = 60

        # Look a key up.
        def get(self, key):
            value = super().get(key)
            return value

        def put(self, key, value):
            self[key] = value


    def build():
        return Cache()


    if __name__ == "__main__":
        build()
    '''
)


def by_symbol(found: list[Chunk]) -> dict[str | None, Chunk]:
    return {c.symbol: c for c in found}


def test_python_chunks_are_method_level() -> None:
    found = chunks("pkg/cache.py", CHUNKED)
    assert [(c.kind, c.symbol, c.start_line, c.end_line) for c in found] == [
        ("module", None, 1, 4),
        ("class", "Cache", 7, 10),
        ("method", "Cache.get", 12, 15),
        ("method", "Cache.put", 17, 18),
        ("function", "build", 21, 22),
        ("module", None, 25, 26),
    ]
    c = by_symbol(found)
    assert c["Cache.get"].text.startswith("# pkg/cache.py :: Cache.get\n")
    assert "# Look a key up." in c["Cache.get"].text  # leading comment travels with the method
    header = c["Cache"].text
    assert '"""A cache."""' in header and "ttl = 60" in header and "def put(self, key, value):" in header
    assert "return value" not in header  # method bodies are not duplicated
    assert found[0].text.startswith("# pkg/cache.py\n")
    # Every definition line is covered by some chunk.
    for t in tags("pkg/cache.py", CHUNKED):
        if t.role == "definition" and t.kind != "constant":
            assert any(ch.start_line <= t.start_line <= ch.end_line for ch in found), t


def test_oversize_definition_is_split_into_windows() -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(50))
    found = chunks("big.py", f"def big():\n{body}".encode(), max_lines=20)
    assert len(found) >= 3
    assert all(c.symbol == "big" and c.kind == "function" for c in found)
    assert found[0].start_line == 1 and found[-1].end_line == 51
    assert all(c.end_line - c.start_line + 1 <= 20 for c in found)


def test_other_languages_chunk_per_method() -> None:
    assert {"Service.run", "Service"} <= set(by_symbol(chunks("S.java", JAVA)))
    assert {"Circle.area", "square"} <= set(by_symbol(chunks("s.ts", TYPESCRIPT)))
    assert {"Store.Read", "load"} <= set(by_symbol(chunks("s.go", GO)))
    assert {"Square.fmt", "Square.describe"} <= set(by_symbol(chunks("s.rs", RUST)))


# --- docs ------------------------------------------------------------------------------------

MARKDOWN = src(
    """
    # Project

    Intro.

    ```sh
    # not a heading
    ```

    ## Install

    Use pip.

    ### From source

    Clone it.

    Usage
    -----

    Run it.
    """
)


def test_markdown_sections_with_heading_paths() -> None:
    found = chunks("README.md", MARKDOWN)
    assert [(c.symbol, c.start_line, c.end_line) for c in found] == [
        ("Project", 1, 7),
        ("Project > Install", 9, 11),
        ("Project > Install > From source", 13, 15),
        ("Project > Usage", 17, 20),
    ]
    assert all(c.kind == "section" for c in found)
    assert found[2].text.startswith("# README.md :: Project > Install > From source\n### From source")
    section_tags = defs(tags("README.md", MARKDOWN))
    assert (section_tags["Project > Install"].end_line, section_tags["Project > Install"].enclosing) == (
        16,
        "Project",
    )


RST = src(
    """
    ========
     Manual
    ========

    Intro.

    Install
    =======

    From source
    -----------

    Clone it.

    ----------

    Still from source.

    Usage
    =====
    """
)


def test_rst_sections_with_heading_paths() -> None:
    found = chunks("docs/manual.rst", RST)
    assert [(c.symbol, c.kind, c.start_line, c.end_line) for c in found] == [
        ("Manual", "section", 1, 5),
        ("Manual > Install", "section", 7, 8),
        ("Manual > Install > From source", "section", 10, 17),  # transition is not a title
        ("Manual > Usage", "section", 19, 20),
    ]


# --- robustness ------------------------------------------------------------------------------


def test_unknown_text_is_windowed_with_overlap() -> None:
    text = "".join(f"line {i}\n" for i in range(1, 131)).encode()
    found = chunks("notes.txt", text)
    assert [(c.kind, c.start_line, c.end_line) for c in found] == [
        ("window", 1, 60),
        ("window", 51, 110),
        ("window", 101, 130),
    ]
    assert tags("notes.txt", text) == []


@pytest.mark.parametrize("path", ["a.py", "a.ts", "a.go", "a.rs", "a.java", "a.js", "a.md", "a.rst", "a"])
@pytest.mark.parametrize(
    "data",
    [b"", b"\n\n", b"\xff\xfe\xfd garbage (((\n{{{\n", b"class (:\n  def\n" * 30, b"}" * 5000],
)
def test_bad_input_never_raises(path: str, data: bytes) -> None:
    found_tags, found_chunks = outline(path, data)
    assert isinstance(found_tags, list)
    for c in found_chunks:
        assert 1 <= c.start_line <= c.end_line


def test_binary_gives_nothing() -> None:
    assert chunks("a.py", b"\x00\x01\x02def f(): pass") == []
    assert tags("a.py", b"\x00def f(): pass") == []
