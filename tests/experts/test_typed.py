"""The typed (jedi) expert on real git repos: resolved definitions, references, subclasses, tiers."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..helpers import ask
from ..symbol_repos import ask_expert, index, make_workspace, where


@pytest.fixture
def typedws(tmp_path: Path, config_dir: Path) -> Path:
    ws = make_workspace(tmp_path)
    index(ws, config_dir, "typed", "symbols", "bm25")
    return ws


def test_definitions_resolve_full_names_in_every_project(typedws: Path, config_dir: Path) -> None:
    plan, items = ask_expert(config_dir, typedws, "typed", "where is Order defined")
    assert plan["analysis"] == "jedi"
    assert where(items) == [
        ("billing", "billing/models.py", "billing.models.Order"),
        ("shop", "shop/models.py", "shop.models.Order"),
    ]
    assert (items[1].start_line, items[1].end_line) == (8, 12)
    assert items[1].meta == {
        "kind": "class",
        "role": "definition",
        "full_name": "shop.models.Order",
        "analysis": "jedi",
    }
    # only Python: the Go method is not the typed expert's to answer
    _, items = ask_expert(config_dir, typedws, "typed", "where is Server.Start defined")
    assert items == []


def test_references_are_resolved_not_name_matched(typedws: Path, config_dir: Path) -> None:
    _, items = ask_expert(config_dir, typedws, "typed", "who calls Order.total")
    refs = [e for e in items if e.meta["role"] == "reference"]
    # order.total() resolves to shop.models.Order.total; fake.total() (FakeOrder) does not
    assert [(e.path, e.start_line, e.symbol) for e in refs] == [("shop/services.py", 11, "shop.services.checkout")]
    assert refs[0].meta["target"] == "shop.models.Order.total"
    _, items = ask_expert(config_dir, typedws, "typed", "who references Order")
    got = {(e.project, e.path, e.start_line, e.meta["target"]) for e in items if e.meta["role"] == "reference"}
    assert got >= {
        ("shop", "shop/services.py", 10, "shop.models.Order"),
        ("shop", "shop/special.py", 4, "shop.models.Order"),
        ("billing", "billing/models.py", 8, "billing.models.Order"),
    }


def test_subclasses_confirmed_by_resolving_the_base(typedws: Path, config_dir: Path) -> None:
    _, items = ask_expert(config_dir, typedws, "typed", "what subclasses RushOrder")
    assert where(items) == [("shop", "shop/special.py", "shop.special.ExpressOrder")]
    _, items = ask_expert(config_dir, typedws, "typed", "what subclasses Order")
    assert where(items) == [
        ("billing", "billing/models.py", "billing.models.Refund"),
        ("shop", "shop/special.py", "shop.special.RushOrder"),
        ("shop", "shop/special.py", "shop.special.ExpressOrder"),
    ]


def _without_early_exit(config_dir: Path) -> None:
    """The typed-symbol pipeline ends its fan-out when symbols and ripgrep agree (typed then never
    answers); the tier rules below need the typed expert's own evidence."""
    import yaml

    f = config_dir / "pipelines" / "typed-symbol.yaml"
    spec = yaml.safe_load(f.read_text())
    for node in spec["nodes"]:
        (node.get("settings") or {}).pop("early_exit", None)
    f.write_text(yaml.safe_dump(spec))


def test_typed_plus_structural_is_hybrid_confirmed_and_names_both(typedws: Path, config_dir: Path) -> None:
    _without_early_exit(config_dir)
    r = ask(config_dir, typedws, "where is Order defined")
    assert r.error is None
    per = r.response["receipt"]["per_expert"]
    assert per["typed"]["status"] == "ok" and per["symbols"]["status"] == "ok"
    assert per["typed"]["precision_class"] == "typed" and per["symbols"]["precision_class"] == "structural"
    for project, path, line in (("shop", "shop/models.py", 8), ("billing", "billing/models.py", 1)):
        it = next(
            it
            for it in r.response["items"]
            if (it["project"], it["path"]) == (project, path)
            and it["range"]["start_line"] <= line <= it["range"]["end_line"]
        )
        experts = {s["expert"] for s in it["sources"]}
        assert {"typed", "symbols"} <= experts
        assert it["tier"] == "hybrid-confirmed"  # one typed source only: never typed-graph-confirmed
        assert "typed (#" in it["nuance"] and "symbols (#" in it["nuance"]


def test_two_typed_sources_agreeing_are_typed_graph_confirmed(typedws: Path, config_dir: Path) -> None:
    """fusion's rule on a second typed expert entry (another jedi-backed index of the same code)."""
    import yaml

    _without_early_exit(config_dir)
    experts = yaml.safe_load((config_dir / "experts.yaml").read_text())
    experts["experts"]["typed2"] = dict(experts["experts"]["typed"])
    (config_dir / "experts.yaml").write_text(yaml.safe_dump(experts))
    priors = yaml.safe_load((config_dir / "priors.yaml").read_text())
    priors["classes"]["typed-symbol"]["typed2"] = 0.9
    (config_dir / "priors.yaml").write_text(yaml.safe_dump(priors))
    index(typedws, config_dir, "typed2")
    r = ask(config_dir, typedws, "where is Order defined", scope={"project": "shop"})
    top = next(it for it in r.response["items"] if it["path"] == "shop/models.py")
    assert top["tier"] == "typed-graph-confirmed"
    assert "typed, typed2" in top["nuance"]


def test_typed_index_keeps_python_only_and_follows_edits(typedws: Path, config_dir: Path) -> None:
    report = index(typedws, config_dir, "typed")["typed"]
    assert (report.added, report.removed) == (0, 0)
    services = typedws / "shop" / "shop" / "services.py"
    services.write_text(services.read_text() + "\n\ndef reorder():\n    return Order().total()\n")
    index(typedws, config_dir, "typed")
    _, items = ask_expert(config_dir, typedws, "typed", "who calls Order.total")
    refs = {(e.start_line, e.symbol) for e in items if e.meta["role"] == "reference"}
    assert refs == {(11, "shop.services.checkout"), (20, "shop.services.reorder")}


def test_references_cross_projects_through_imports(typedws: Path, config_dir: Path) -> None:
    """billing imports shop's Order: jedi's sys path holds every project, so the call resolves into shop."""
    bridge = typedws / "billing" / "billing" / "bridge.py"
    bridge.write_text("from shop.models import Order\n\n\ndef bill(order: Order):\n    return order.total()\n")
    index(typedws, config_dir, "typed")
    _, items = ask_expert(config_dir, typedws, "typed", "who calls shop.models.Order.total")
    refs = {(e.project, e.path, e.start_line, e.symbol) for e in items if e.meta["role"] == "reference"}
    assert refs == {
        ("shop", "shop/services.py", 11, "shop.services.checkout"),
        ("billing", "billing/bridge.py", 5, "billing.bridge.bill"),
    }
    assert {e.meta["target"] for e in items if e.meta["role"] == "reference"} == {"shop.models.Order.total"}
    _, items = ask_expert(config_dir, typedws, "typed", "who imports shop.models.Order")
    imports = [(e.project, e.path, e.start_line) for e in items if e.meta.get("kind") == "import"]
    assert ("billing", "billing/bridge.py", 1) in imports


def test_query_time_is_a_lookup_without_jedi(typedws: Path, config_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once indexed, answering never runs jedi: the analysis happened during `engine index`."""
    import engine.index.pyfacts as pyfacts

    def no_jedi() -> None:
        raise AssertionError("jedi called at query time")

    monkeypatch.setattr(pyfacts, "_jedi", no_jedi)
    for question in ("where is Order defined", "who calls Order.total", "what subclasses Order"):
        _, items = ask_expert(config_dir, typedws, "typed", question)
        assert items, question


def test_names_defined_outside_the_workspace_resolve_by_full_name(typedws: Path, config_dir: Path) -> None:
    util = typedws / "shop" / "shop" / "paths.py"
    util.write_text(
        "import os.path\n\n\nclass ShopError(Exception):\n    pass\n\n\n"
        "def where(a):\n    return os.path.join(a, 'x')\n"
    )
    index(typedws, config_dir, "typed")
    _, items = ask_expert(config_dir, typedws, "typed", "who calls os.path.join")
    assert [(e.path, e.start_line, e.symbol, e.meta["target"]) for e in items] == [
        ("shop/paths.py", 9, "shop.paths.where", "os.path.join")
    ]
    _, items = ask_expert(config_dir, typedws, "typed", "what subclasses Exception")
    assert where(items) == [("shop", "shop/paths.py", "shop.paths.ShopError")]
    assert items[0].meta["base"] == "builtins.Exception"


def test_a_changed_definition_re_resolves_the_files_that_used_it(typedws: Path, config_dir: Path) -> None:
    """Renaming Order.total re-analyses services.py (unchanged itself); a body edit re-analyses nothing."""
    from engine.index.typed import TypedIndexer
    from engine.workspace import Workspace

    models = typedws / "shop" / "shop" / "models.py"
    models.write_text(
        models.read_text().replace("def total(self):\n        return 42", "def amount(self):\n        return 42")
    )
    index(typedws, config_dir, "typed")
    _, items = ask_expert(config_dir, typedws, "typed", "who calls Order.total")
    # services.py still says ``order.total()``, which now resolves to nothing in shop
    assert not [e for e in items if e.meta["role"] == "reference" and e.meta["target"] == "shop.models.Order.total"]
    models.write_text(
        models.read_text().replace("def amount(self):\n        return 42", "def total(self):\n        return 42")
    )
    index(typedws, config_dir, "typed")
    _, items = ask_expert(config_dir, typedws, "typed", "who calls Order.total")
    assert ("shop/services.py", 11) in {(e.path, e.start_line) for e in items if e.meta["role"] == "reference"}

    # a new module resolves imports that were unresolved until now, in files that did not change
    (typedws / "shop" / "shop" / "later.py").write_text(
        "from shop.soon import Soon\n\n\ndef make():\n    return Soon()\n"
    )
    index(typedws, config_dir, "typed")
    (typedws / "shop" / "shop" / "soon.py").write_text("class Soon:\n    pass\n")
    index(typedws, config_dir, "typed")
    _, items = ask_expert(config_dir, typedws, "typed", "who references Soon")
    assert ("shop/later.py", 5) in {(e.path, e.start_line) for e in items if e.meta["role"] == "reference"}

    ws = Workspace.open([typedws])
    indexer = TypedIndexer(ws.data_dir / "index" / "typed", ws.projects)
    indexer.open()
    try:
        from engine.index.files import SourceFile

        body = models.read_text().replace("return 42", "return 43")
        f = SourceFile("shop", "shop/models.py", len(body), 0, "")
        indexer.add([(f, body.encode())])
        assert indexer.reanalysed == 0  # same interface: nobody else needs jedi again
        renamed = body.replace("class Customer", "class Client")
        indexer.add([(f, renamed.encode())])
        assert indexer.reanalysed == 0  # nothing referenced Customer
        gone = renamed.replace("def save(self)", "def store(self)")
        indexer.add([(f, gone.encode())])
        assert indexer.reanalysed == 0  # nor Base.save
        indexer.add([(f, gone.replace("class Order(Base)", "class Purchase(Base)").encode())])
        assert indexer.reanalysed == 2  # services.py and special.py used shop.models.Order
    finally:
        indexer.close()


def test_typed_is_indexed_after_the_fast_indexes(typedws: Path, config_dir: Path) -> None:
    services = typedws / "shop" / "shop" / "services.py"
    services.write_text(services.read_text() + "\n")
    reports = index(typedws, config_dir, "typed", "symbols", "bm25")
    assert list(reports) == ["bm25", "symbols", "typed"]


def test_locals_are_skipped_but_names_a_function_imports_are_followed(typedws: Path, config_dir: Path) -> None:
    (typedws / "shop" / "shop" / "late.py").write_text(
        "def make(total=None):\n    from shop.models import Order\n    total = Order()\n    return total.total()\n"
    )
    index(typedws, config_dir, "typed")
    _, items = ask_expert(config_dir, typedws, "typed", "who references shop.models.Order")
    late = {(e.start_line, e.meta["kind"]) for e in items if e.path == "shop/late.py"}
    assert late == {(2, "import"), (3, "reference")}
    _, items = ask_expert(config_dir, typedws, "typed", "who calls shop.models.Order.total")
    assert ("shop/late.py", 4, "shop.late.make") in {(e.path, e.start_line, e.symbol) for e in items}


def test_a_jedi_crash_costs_one_file_not_the_index_run(
    typedws: Path, config_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.index.files import SourceFile
    from engine.index.pyfacts import JediAnalyser
    from engine.index.typed import TypedIndexer, stats
    from engine.workspace import Workspace

    real = JediAnalyser.analyse

    def flaky(self: JediAnalyser, project: str, path: str, code: str) -> object:
        if path == "shop/services.py":
            raise RecursionError("jedi gave up")
        return real(self, project, path, code)

    monkeypatch.setattr(JediAnalyser, "analyse", flaky)
    ws = Workspace.open([typedws])
    directory = ws.data_dir / "index" / "typed"
    before = stats(directory)
    indexer = TypedIndexer(directory, ws.projects)
    indexer.open()
    try:
        files = []
        for path in ("shop/services.py", "shop/special.py"):
            data = (typedws / "shop" / path).read_bytes()
            files.append((SourceFile("shop", path, len(data), 0, ""), data))
        indexer.add(files)
        indexer.commit()
        assert indexer.failed == 1
    finally:
        indexer.close()
    after = stats(directory)
    assert after["files"] == before["files"]  # services.py is still listed (as incomplete), special.py re-done
    assert after["refs"] < before["refs"]  # services.py's references are gone until jedi manages it
    import sqlite3

    conn = sqlite3.connect(directory / "typed.sqlite3")
    complete = dict(conn.execute("SELECT path, complete FROM files WHERE project='shop'").fetchall())
    conn.close()
    assert (complete["shop/services.py"], complete["shop/special.py"]) == (0, 1)


def test_every_files_first_use_ranks_before_any_files_second(typedws: Path, config_dir: Path) -> None:
    (typedws / "shop" / "shop" / "many.py").write_text(
        "from shop.models import Order\n\n\ndef a():\n    return Order()\n\n\ndef b():\n    return Order()\n"
    )
    index(typedws, config_dir, "typed")
    _, items = ask_expert(config_dir, typedws, "typed", "who references shop.models.Order")
    refs = [(e.path, e.start_line, e.score) for e in items if e.meta["role"] == "reference"]
    assert refs[:4] == [
        ("shop/many.py", 5, 1.0),
        ("shop/services.py", 10, 1.0),
        ("shop/special.py", 4, 1.0),
        ("shop/many.py", 9, 0.95),
    ]
    imports = {(p, s) for p, line, s in refs if line == 1}
    assert imports == {(p, 0.9) for p in ("shop/many.py", "shop/services.py", "shop/special.py")}
