"""Two small real git repos for the symbol, typed and docs experts, and a way to ask one expert.

``shop`` and ``billing`` both define a class ``Order`` (an ambiguous name across projects);
``shop`` has subclasses two levels deep, a real caller of ``Order.total`` and a decoy
``FakeOrder.total`` that only static analysis can tell apart; ``billing`` adds TypeScript, Go
and Java definitions and docs in Markdown and reST.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

from engine.classifier import classify
from engine.experts import ExpertEnv, adapter_class
from engine.index.build import IndexReport
from engine.indexing import index_workspace
from engine.spec import load_config
from engine.types import Evidence, Query, Scope
from engine.workspace import Workspace

from .conftest import make_repo

SHOP = {
    "shop/__init__.py": "",
    "shop/models.py": (
        "class Base:\n"
        '    """Common model behaviour."""\n\n'
        "    def save(self):\n"
        "        return True\n\n\n"
        "class Order(Base):\n"
        '    """A customer\'s order in the shop."""\n\n'
        "    def total(self):\n"
        "        return 42\n\n\n"
        "class Customer:\n"
        "    pass\n"
    ),
    "shop/special.py": (
        "from shop.models import Order\n\n\n"
        "class RushOrder(Order):\n"
        "    pass\n\n\n"
        "class ExpressOrder(RushOrder):\n"
        "    pass\n"
    ),
    "shop/services.py": (
        "from shop.models import Order\n\n\n"
        "class FakeOrder:\n"
        "    def total(self):\n"
        "        return 0\n\n\n"
        "def checkout():\n"
        "    order = Order()\n"
        "    return order.total()\n\n\n"
        "def preview():\n"
        "    fake = FakeOrder()\n"
        "    return fake.total()\n"
    ),
    "docs/guide.md": (
        "# Shop guide\n\nThe shop sells things.\n\n"
        "## Install\n\nUse the package manager.\n\n"
        "### From source\n\nClone the repository, then run `make build` and `make install` from source.\n\n"
        "## Refunds\n\nRefunds are issued by the billing service within five days.\n"
    ),
}
BILLING = {
    "billing/__init__.py": "",
    "billing/models.py": (
        "class Order:\n"
        '    """Billing\'s own order, unrelated to the shop\'s."""\n\n'
        "    def total(self):\n"
        "        return 7\n\n\n"
        "class Refund(Order):\n"
        "    pass\n"
    ),
    "web/invoice.ts": (
        "export interface Payable {\n  amount(): number;\n}\n\n"
        "export class Invoice extends Document implements Payable {\n"
        "  amount(): number { return 1; }\n}\n"
    ),
    "svc/server.go": (
        "package svc\n\ntype Server struct {\n\tPort int\n}\n\nfunc (s *Server) Start() error {\n\treturn nil\n}\n"
    ),
    "java/Ledger.java": "public class Ledger {\n  public void post(Order o) { o.total(); }\n}\n",
    "README.rst": (
        "Billing\n=======\n\nBilling issues invoices.\n\n"
        "Configuration\n-------------\n\nSet the currency in billing.toml before the first run.\n"
    ),
}


def make_workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "symws"
    make_repo(ws / "shop", SHOP)
    make_repo(ws / "billing", BILLING)
    return ws


def index(ws: Path, config_dir: Path, *names: str) -> dict[str, IndexReport]:
    reports = index_workspace(Workspace.open([ws]), load_config(config_dir), only=list(names), progress=False)
    return {r.name: r for r in reports}


def ask_expert(
    config_dir: Path,
    ws: Path,
    name: str,
    question: str,
    *,
    limit: int = 30,
    scope: Scope | None = None,
    klass: str | None = None,
) -> tuple[dict[str, Any], list[Evidence]]:
    """Plan and run one expert directly, as the fan-out would; returns (plan, items)."""
    cfg = load_config(config_dir)
    workspace = Workspace.open([ws])
    c = classify(question, cfg.classifier, cfg.priors.abstain_below)
    scope = scope or Scope()
    query = Query(
        question=question,
        klass=klass or c.klass,
        features=c.features,
        scope=scope,
        projects=workspace.scoped_projects(scope),
        limit=limit,
    )
    expert = adapter_class(cfg.experts[name].adapter)(cfg.experts[name], ExpertEnv(workspace))
    plan = expert.plan(query)

    async def go() -> list[Evidence]:
        return await expert.search(query, plan)

    return plan, anyio.run(go)


def where(items: list[Evidence]) -> list[tuple[str, str, str | None]]:
    return [(e.project, e.path, e.symbol) for e in items]
