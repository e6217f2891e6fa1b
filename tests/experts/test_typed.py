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
