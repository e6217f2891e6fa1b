"""A small BEIR suite written for this project: a git repo of a toy shop at two tags, two snapshots.

``build_suite(dst)`` makes the repo with git (v1, then v2 which changes discounts and adds
refunds), exports every file of each tag as a corpus doc (``toyshop@v1:<path>``, with
``metadata.snapshot`` and ``metadata.path``), and writes 30 questions with a gold ``class``,
``gold_experts`` and graded qrels (2 = the file to edit, 1 = a file that helps). Eval end to end
over it takes seconds, so CI runs the whole harness on every change.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..conftest import git, make_repo

V1 = {
    "README.md": "# Toyshop\n\nA tiny web shop: carts, discounts, payments and shipping.\n",
    "docs/deploy.md": "# Deploying\n\nHow do I deploy the shop? Build the image and run `make deploy` with "
    "the production settings file.\n\n## Rollback\n\nRun `make rollback` to return to the "
    "previous release.\n",
    "toyshop/__init__.py": "",
    "toyshop/cart.py": (
        "from .discount import apply_discount\n\n\n"
        'class ShoppingCart:\n    """Items a customer intends to buy, with quantities."""\n\n'
        "    def __init__(self):\n        self.items = {}\n\n"
        "    def add_item(self, sku, quantity=1):\n        self.items[sku] = self.items.get(sku, 0) + quantity\n\n"
        "    def remove_item(self, sku):\n        self.items.pop(sku, None)\n\n"
        "    def total(self, prices, code=None):\n"
        "        subtotal = sum(prices[s] * q for s, q in self.items.items())\n"
        "        return apply_discount(subtotal, code)\n"
    ),
    "toyshop/discount.py": (
        "import datetime\n\nCOUPONS = {'SPRING10': (10, datetime.date(2030, 5, 31))}\n\n\n"
        'def coupon_expired(code, today=None):\n    """A coupon past its expiry date no longer applies."""\n'
        "    today = today or datetime.date.today()\n    return COUPONS[code][1] < today\n\n\n"
        'def apply_discount(amount, code):\n    """Percentage off the subtotal for a valid coupon code."""\n'
        "    if not code or code not in COUPONS or coupon_expired(code):\n        return amount\n"
        "    percent = COUPONS[code][0]\n    return round(amount * (100 - percent) / 100, 2)\n"
    ),
    "toyshop/inventory.py": (
        "RESTOCK_THRESHOLD = 5\n\n\nclass Inventory:\n"
        '    """Stock levels per SKU; reservations hold stock for open carts."""\n\n'
        "    def __init__(self):\n        self.stock = {}\n\n"
        "    def reserve_stock(self, sku, quantity):\n        if self.stock.get(sku, 0) < quantity:\n"
        "            raise OutOfStock(sku)\n        self.stock[sku] -= quantity\n\n"
        "    def needs_restock(self, sku):\n        return self.stock.get(sku, 0) < RESTOCK_THRESHOLD\n\n\n"
        "class OutOfStock(Exception):\n    pass\n"
    ),
    "toyshop/payment.py": (
        'import time\n\n\nclass PaymentDeclined(Exception):\n    """The card issuer refused the charge."""\n\n\n'
        "def charge_card(gateway, card, amount, attempts=3):\n"
        '    """Charge a card, retrying when the payment gateway times out."""\n'
        "    for attempt in range(attempts):\n        try:\n            return gateway.charge(card, amount)\n"
        "        except TimeoutError:\n            time.sleep(2 ** attempt)\n"
        "    raise PaymentDeclined('gateway timed out')\n"
    ),
    "toyshop/shipping.py": (
        "FREE_SHIPPING_THRESHOLD = 50\nZONE_RATES = {'domestic': 4.0, 'europe': 9.5, 'world': 19.0}\n\n\n"
        "def shipping_cost(weight_kg, zone, subtotal):\n"
        '    """Cost of shipping a parcel by weight and destination zone."""\n'
        "    if subtotal >= FREE_SHIPPING_THRESHOLD:\n        return 0.0\n"
        "    return ZONE_RATES[zone] + 1.5 * weight_kg\n"
    ),
    "toyshop/tax.py": (
        "VAT_RATES = {'DE': 0.19, 'FR': 0.20, 'NL': 0.21}\n\n\n"
        'def add_vat(amount, country):\n    """Value added tax for the buyer\'s country."""\n'
        "    return round(amount * (1 + VAT_RATES.get(country, 0.0)), 2)\n"
    ),
    "toyshop/users.py": (
        "import hashlib\nimport os\n\nMAX_LOGIN_ATTEMPTS = 5\n\n\n"
        'def hash_password(password, salt=None):\n    """Salted PBKDF2 hash; never store plain passwords."""\n'
        "    salt = salt or os.urandom(16)\n"
        "    return salt, hashlib.pbkdf2_hmac('sha256', password.encode(), salt, 200_000)\n\n\n"
        'def login_allowed(failed_attempts):\n    """Lock the account after too many failed logins."""\n'
        "    return failed_attempts < MAX_LOGIN_ATTEMPTS\n"
    ),
    "toyshop/mailer.py": (
        "TEMPLATE = 'Thank you for your order {order_id}. It ships within two days.'\n\n\n"
        "def send_order_confirmation(smtp, email, order_id):\n"
        '    """Email the customer a confirmation after checkout."""\n'
        "    smtp.send(email, TEMPLATE.format(order_id=order_id))\n"
    ),
    "toyshop/catalog.py": (
        "def tokenize_name(name):\n    return [w.lower() for w in name.split()]\n\n\n"
        'def search_products(products, query):\n    """Products whose name shares a word with the query."""\n'
        "    wanted = set(tokenize_name(query))\n"
        "    return [p for p in products if wanted & set(tokenize_name(p['name']))]\n"
    ),
    "tests/test_cart.py": (
        "from toyshop.cart import ShoppingCart\n\n\ndef test_add_item():\n    cart = ShoppingCart()\n"
        "    cart.add_item('sku-1', 2)\n    assert cart.items == {'sku-1': 2}\n"
    ),
}
V2 = {
    "toyshop/discount.py": V1["toyshop/discount.py"]
    + (
        "\n\nSTACKABLE = {'VIP5'}\n\n\ndef stack_discounts(amount, codes):\n"
        '    """Apply several coupons in turn; only stackable codes combine."""\n'
        "    for code in codes:\n        if code in STACKABLE:\n            amount = apply_discount(amount, code)\n"
        "    return amount\n"
    ),
    "toyshop/refunds.py": (
        "from .payment import PaymentDeclined\n\nREFUND_WINDOW_DAYS = 30\n\n\n"
        "def refund_order(gateway, order, days_since_delivery):\n"
        '    """Return the money to the card when the order is within the refund window."""\n'
        "    if days_since_delivery > REFUND_WINDOW_DAYS:\n        raise PaymentDeclined('refund window closed')\n"
        "    return gateway.refund(order.charge_id, order.amount)\n"
    ),
}

# (snapshot tag, question, class, gold experts, {path: grade})
QUESTIONS: list[tuple[str, str, str, list[str], dict[str, int]]] = [
    (
        "v1",
        "where is the percentage off a coupon computed for the cart subtotal",
        "conceptual",
        ["bm25"],
        {"toyshop/discount.py": 2, "toyshop/cart.py": 1},
    ),
    (
        "v1",
        "retry charging the credit card when the payment gateway times out",
        "conceptual",
        ["bm25"],
        {"toyshop/payment.py": 2},
    ),
    (
        "v1",
        "cost of shipping a parcel by weight and destination zone",
        "conceptual",
        ["bm25"],
        {"toyshop/shipping.py": 2},
    ),
    ("v1", "value added tax for the buyer country", "conceptual", ["bm25"], {"toyshop/tax.py": 2}),
    ("v1", "lock the account after too many failed logins", "conceptual", ["bm25"], {"toyshop/users.py": 2}),
    ("v1", "email the customer a confirmation after checkout", "conceptual", ["bm25"], {"toyshop/mailer.py": 2}),
    (
        "v1",
        "products whose name shares a word with the search query",
        "conceptual",
        ["bm25"],
        {"toyshop/catalog.py": 2},
    ),
    ("v1", "stock levels held for open carts reservations", "conceptual", ["bm25"], {"toyshop/inventory.py": 2}),
    ("v1", "salted password hashing never store plain passwords", "conceptual", ["bm25"], {"toyshop/users.py": 2}),
    ("v1", "coupon past its expiry date no longer applies", "conceptual", ["bm25"], {"toyshop/discount.py": 2}),
    ("v1", '"gateway timed out"', "identifier", ["ripgrep", "bm25"], {"toyshop/payment.py": 2}),
    ("v1", '"FREE_SHIPPING_THRESHOLD"', "identifier", ["ripgrep", "bm25"], {"toyshop/shipping.py": 2}),
    ("v1", '"SPRING10"', "identifier", ["ripgrep", "bm25"], {"toyshop/discount.py": 2}),
    ("v1", '"make rollback"', "identifier", ["ripgrep", "bm25"], {"docs/deploy.md": 2}),
    ("v1", "where is ShoppingCart defined", "typed-symbol", ["ripgrep", "bm25"], {"toyshop/cart.py": 2}),
    ("v1", "where is reserve_stock defined", "typed-symbol", ["ripgrep", "bm25"], {"toyshop/inventory.py": 2}),
    ("v1", "definition of PaymentDeclined", "typed-symbol", ["ripgrep", "bm25"], {"toyshop/payment.py": 2}),
    (
        "v1",
        "who calls apply_discount",
        "cross-repo-impact",
        ["ripgrep", "bm25"],
        {"toyshop/cart.py": 2, "toyshop/discount.py": 1},
    ),
    ("v1", "how do I deploy the shop to production", "docs", ["bm25"], {"docs/deploy.md": 2}),
    (
        "v2",
        "combine several coupons so only stackable codes apply together",
        "conceptual",
        ["bm25"],
        {"toyshop/discount.py": 2},
    ),
    ("v2", "return the money to the card within the refund window", "conceptual", ["bm25"], {"toyshop/refunds.py": 2}),
    ("v2", "percentage off the subtotal for a valid coupon", "conceptual", ["bm25"], {"toyshop/discount.py": 2}),
    ("v2", "shipping is free above a subtotal threshold", "conceptual", ["bm25"], {"toyshop/shipping.py": 2}),
    ("v2", "send an order confirmation message by email", "conceptual", ["bm25"], {"toyshop/mailer.py": 2}),
    ("v2", '"refund window closed"', "identifier", ["ripgrep", "bm25"], {"toyshop/refunds.py": 2}),
    ("v2", '"VIP5"', "identifier", ["ripgrep", "bm25"], {"toyshop/discount.py": 2}),
    ("v2", "where is stack_discounts defined", "typed-symbol", ["ripgrep", "bm25"], {"toyshop/discount.py": 2}),
    ("v2", "where is refund_order defined", "typed-symbol", ["ripgrep", "bm25"], {"toyshop/refunds.py": 2}),
    (
        "v2",
        "who calls PaymentDeclined",
        "cross-repo-impact",
        ["ripgrep", "bm25"],
        {"toyshop/payment.py": 2, "toyshop/refunds.py": 2},
    ),
    ("v2", "how do I roll back a bad release", "docs", ["bm25"], {"docs/deploy.md": 2}),
]


def build_suite(dst: Path) -> Path:
    """Create the repo under ``dst/repo`` and the BEIR suite under ``dst/suite``; returns the suite."""
    repo = make_repo(dst / "repo", V1, "toyshop v1")
    git(repo, "tag", "v1")
    for rel, text in V2.items():
        (repo / rel).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "stackable coupons and refunds")
    git(repo, "tag", "v2")
    suite = dst / "suite"
    (suite / "qrels").mkdir(parents=True)
    with open(suite / "corpus.jsonl", "w") as fh:
        for tag in ("v1", "v2"):
            for path in git(repo, "ls-tree", "-r", "--name-only", tag).split():
                text = git(repo, "show", f"{tag}:{path}")
                fh.write(
                    json.dumps(
                        {
                            "_id": f"toyshop@{tag}:{path}",
                            "title": path,
                            "text": text,
                            "metadata": {"snapshot": f"toyshop@{tag}", "path": path},
                        }
                    )
                    + "\n"
                )
    with open(suite / "queries.jsonl", "w") as qf, open(suite / "qrels" / "test.tsv", "w") as rf:
        rf.write("query-id\tcorpus-id\tscore\n")
        for n, (tag, text, klass, gold, rel) in enumerate(QUESTIONS, start=1):
            qid = f"q{n:02d}"
            qf.write(
                json.dumps(
                    {
                        "_id": qid,
                        "text": text,
                        "class": klass,
                        "gold_experts": gold,
                        "metadata": {"snapshot": f"toyshop@{tag}"},
                    }
                )
                + "\n"
            )
            for path, grade in rel.items():
                rf.write(f"{qid}\ttoyshop@{tag}:{path}\t{grade}\n")
    return suite
