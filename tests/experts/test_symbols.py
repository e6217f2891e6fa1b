"""The structural symbols expert on real git repos with the real tree-sitter grammars."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.errors import ExpertUnconfigured
from engine.index.symbols import SymbolStore
from engine.types import Scope

from ..conftest import git
from ..helpers import ask
from ..symbol_repos import ask_expert, index, make_workspace, where


@pytest.fixture
def symws(tmp_path: Path, config_dir: Path) -> Path:
    ws = make_workspace(tmp_path)
    index(ws, config_dir, "symbols")
    return ws


def test_ambiguous_name_comes_back_from_every_project(symws: Path, config_dir: Path) -> None:
    plan, items = ask_expert(config_dir, symws, "symbols", "where is Order defined")
    assert plan["mode"] == "definitions" and plan["names"] == ["Order"]
    assert where(items)[:2] == [("billing", "billing/models.py", "Order"), ("shop", "shop/models.py", "Order")]
    shop = items[1]
    assert shop.kind == "symbol" and (shop.start_line, shop.end_line) == (8, 12)
    assert shop.content.startswith("class Order(Base):") and shop.meta["bases"] == ["Base"]
    assert shop.meta["kind"] == "class" and shop.meta["role"] == "definition"


def test_exact_qualified_name_ranks_before_a_bare_name_match(symws: Path, config_dir: Path) -> None:
    _, items = ask_expert(config_dir, symws, "symbols", "where is FakeOrder.total defined")
    assert where(items)[0] == ("shop", "shop/services.py", "FakeOrder.total")
    assert items[0].score == 1.0 and all(e.score < 1.0 for e in items[1:])
    # the other `total` methods share only the last name with the qualified hit: namesakes, left out
    assert all(e.score >= 0.7 for e in items) and not any(w[2] == "Order.total" for w in where(items))
    _, items = ask_expert(config_dir, symws, "symbols", "where is Basket.total defined")  # no qualified hit
    assert {"Order.total", "FakeOrder.total"} <= {w[2] for w in where(items)}
    _, items = ask_expert(config_dir, symws, "symbols", "where is Server.Start defined")  # Go receiver method
    assert where(items) == [("billing", "svc/server.go", "Server.Start")]
    _, items = ask_expert(
        config_dir, symws, "symbols", "where is the ledger class declared", klass="typed-symbol"
    )  # a plain word: case-insensitive whole-name match only
    assert where(items) == [("billing", "java/Ledger.java", "Ledger")]


def test_subclasses_two_levels_and_across_languages(symws: Path, config_dir: Path) -> None:
    plan, items = ask_expert(config_dir, symws, "symbols", "what subclasses Order")
    assert plan["mode"] == "subclasses"
    assert where(items) == [
        ("billing", "billing/models.py", "Refund"),
        ("shop", "shop/special.py", "RushOrder"),
        ("shop", "shop/special.py", "ExpressOrder"),
    ]
    assert items[-1].score < items[0].score  # a subclass of a subclass ranks after direct ones
    _, items = ask_expert(config_dir, symws, "symbols", "what implements Payable")
    assert where(items) == [("billing", "web/invoice.ts", "Invoice")]
    assert items[0].meta["bases"] == ["Document", "Payable"]


def test_references_name_the_caller(symws: Path, config_dir: Path) -> None:
    plan, items = ask_expert(config_dir, symws, "symbols", "who calls Order.total")
    assert plan["mode"] == "references"
    refs = [e for e in items if e.meta["role"] == "reference"]
    # structural analysis cannot tell order.total() from fake.total(): both come back
    assert {(e.path, e.start_line, e.symbol) for e in refs} >= {
        ("shop/services.py", 11, "checkout"),
        ("shop/services.py", 16, "preview"),
    }
    checkout = next(e for e in refs if e.symbol == "checkout")
    assert checkout.content == "return order.total()" and checkout.meta["target"] == "order.total"
    _, items = ask_expert(config_dir, symws, "symbols", "who references Order")
    got = {(e.path, e.symbol, e.meta["role"]) for e in items}
    assert ("shop/services.py", "checkout", "reference") in got
    assert ("shop/special.py", "RushOrder", "definition") in got  # inheriting is using


def test_scope_and_unconfigured(symws: Path, config_dir: Path) -> None:
    _, items = ask_expert(config_dir, symws, "symbols", "where is Order defined", scope=Scope(project="shop"))
    assert where(items) == [("shop", "shop/models.py", "Order")]
    _, items = ask_expert(config_dir, symws, "symbols", "where is Order defined", scope=Scope(language="go"))
    assert items == []
    with pytest.raises(ExpertUnconfigured):
        ask_expert(config_dir, symws, "symbols", "where is the", klass="typed-symbol")


def test_incremental_update_edit_and_delete(symws: Path, config_dir: Path) -> None:
    shop = symws / "shop"
    models = shop / "shop" / "models.py"
    models.write_text(models.read_text().replace("class Customer:", "class Client:"))
    _, items = ask_expert(config_dir, symws, "symbols", "where is Customer defined", klass="typed-symbol")
    assert items and items[0].flags == ("file-changed-since-indexed",)  # stale until re-indexed
    git(shop, "rm", "-q", "shop/special.py")
    reports = index(symws, config_dir, "symbols")
    r = reports["symbols"]
    assert (r.added, r.removed) == (1, 1) and r.unchanged >= 5
    _, items = ask_expert(config_dir, symws, "symbols", "where is Customer defined", klass="typed-symbol")
    assert items == []
    _, items = ask_expert(config_dir, symws, "symbols", "where is Client defined", klass="typed-symbol")
    assert where(items) == [("shop", "shop/models.py", "Client")] and items[0].flags == ()
    _, items = ask_expert(config_dir, symws, "symbols", "what subclasses Order")
    assert where(items) == [("billing", "billing/models.py", "Refund")]  # special.py is gone
    again = index(symws, config_dir, "symbols")["symbols"]
    assert (again.added, again.removed) == (0, 0)


def test_lookup_latency_is_milliseconds(symws: Path, config_dir: Path) -> None:
    store = SymbolStore(symws / ".engine" / "index" / "symbols")
    assert store.exists()
    store.by_name(["Order"], "definition")
    started = time.perf_counter()
    for _ in range(50):
        store.by_name(["Order", "total"], "definition")
        store.subclasses(["Order"])
    assert (time.perf_counter() - started) / 50 < 0.01


def test_router_routes_definition_questions_to_symbols(symws: Path, config_dir: Path) -> None:
    r = ask(config_dir, symws, "where is Order defined")
    assert r.error is None
    receipt = r.response["receipt"]
    assert receipt["per_expert"]["symbols"]["status"] == "ok"
    assert receipt["per_expert"]["symbols"]["freshness"]["files_indexed"] >= 7
    symbols = [it for it in r.response["items"] if any(s["expert"] == "symbols" for s in it["sources"])]
    got = {(it["project"], it["path"]) for it in symbols}
    assert got >= {("shop", "shop/models.py"), ("billing", "billing/models.py")}
    assert all(it["tier"] != "typed-graph-confirmed" for it in symbols)


def test_engine_index_cli_builds_the_symbols_index(tmp_path: Path, config_dir: Path) -> None:
    ws = make_workspace(tmp_path)
    argv = [
        sys.executable,
        "-m",
        "engine.cli",
        "index",
        "--workspace",
        str(ws),
        "--config-dir",
        str(config_dir),
        "--only",
        "symbols",
        "--only",
        "docs",
    ]
    res = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    assert (ws / ".engine" / "index" / "symbols" / "symbols.sqlite3").is_file()


def test_namesakes_go_only_behind_a_qualified_hit() -> None:
    from engine.experts.symbols import without_namesakes

    scored = [(1.0, "exact"), (0.7, "suffix"), (0.6, "no-such-qualifier"), (0.3, "last-name")]
    # a class qualifier: a module-level alias of the same name is not the method asked for
    assert [r for _, r in without_namesakes(scored, ["Parser.use_args"])] == ["exact", "suffix"]
    # a module qualifier: packages re-export, the implementation elsewhere is an answer
    assert [r for _, r in without_namesakes(scored, ["attrs.define"])] == ["exact", "suffix", "no-such-qualifier"]
    # nothing matches the qualified name, or the name is bare: everything stays
    assert without_namesakes(scored[1:], ["Parser.use_args"]) == scored[1:]
    assert without_namesakes(scored, ["use_args"]) == scored
