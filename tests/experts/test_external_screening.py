"""External experts that misbehave (found by an exploratory run of command / HTTP / MCP experts):
a huge result list, non-finite scores, rows of a project out of scope, made-up paths, excluded
folders, secrets in a symbol or a URL, and secrets in an error text that goes into the receipt."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest

from engine.errors import ExpertOutputError
from engine.screen import screen
from engine.secrets import SecretsPolicy
from engine.types import Evidence
from engine.workspace import Workspace
from tests.edge_support import command_expert, config_with, run
from tests.experts.expert_contract import call
from tests.external_support import PYTHON, expert, query, ws  # noqa: F401 - ws is a fixture

pytestmark = pytest.mark.anyio

AKIA = "AKIA" + "IOSFODNN7ABCDEFG"


def jsonl_command(ws: Workspace, code: str) -> object:
    return expert(
        "command",
        {"argv": [PYTHON, "-c", code], "output": "jsonl", "result": {"fields": {"path": "file", "content": "text"}}},
        ws,
    )


async def test_a_huge_result_list_is_read_only_as_far_as_an_answer_needs(ws: Workspace) -> None:
    """200,000 rows held a request 9 s past a 1 s budget (every row placed and stat'ed, in one go)."""
    code = (
        "import json\nrow = json.dumps({'file': 'src/alpha.py', 'line': 1, 'text': 'x'})\n"
        "print('\\n'.join([row] * 200000))"
    )
    started = time.monotonic()
    got = await call(jsonl_command(ws, code), query(ws, "where is the payment gateway"))
    assert time.monotonic() - started < 8 and 0 < len(got) <= 10


async def test_a_score_that_is_not_finite_is_malformed_output(ws: Workspace) -> None:
    """NaN reached the answer and made its JSON invalid for strict parsers."""
    code = 'print(\'{"file": "src/alpha.py", "line": 1, "text": "x", "score": NaN}\')'
    cmd = expert(
        "command",
        {
            "argv": [PYTHON, "-c", code],
            "output": "jsonl",
            "result": {"fields": {"path": "file", "content": "text", "score": "score"}},
        },
        ws,
    )
    with pytest.raises(ExpertOutputError, match="finite"):
        await call(cmd, query(ws, "where is the payment gateway"))
    # an infinite line number is malformed output too (it was an internal OverflowError)
    code = 'print(\'{"file": "src/alpha.py", "line": Infinity, "text": "x"}\')'
    with pytest.raises(ExpertOutputError, match="not an integer"):
        await call(jsonl_command(ws, code), query(ws, "where is the payment gateway"))


async def test_a_row_of_a_project_out_of_scope_is_not_rehomed(ws: Workspace) -> None:
    """Asked about beta only, a row naming alpha's file was served as beta's."""
    code = "import json\nprint(json.dumps({'project': 'alpha', 'file': 'src/alpha.py', 'line': 1, 'text': 'x'}))"
    beta_only = dataclasses.replace(
        query(ws, "where is the payment gateway"), projects=tuple(p for p in ws.projects if p.name == "beta")
    )
    assert await call(jsonl_command(ws, code), beta_only) == []


def test_the_screen_drops_made_up_paths_excluded_folders_and_secret_symbols(ws: Workspace, tmp_path: Path) -> None:
    alpha = next(p for p in ws.projects if p.name == "alpha")
    (alpha.root / "node_modules" / "pkg").mkdir(parents=True, exist_ok=True)
    (alpha.root / "node_modules" / "pkg" / "x.js").write_text("module.exports = 1\n")

    def item(path: str, **kw: object) -> Evidence:
        return Evidence(
            project="alpha", path=path, kind="chunk", start_line=1, end_line=1, content="x", score=1.0, **kw
        )  # type: ignore[arg-type]

    items = [
        item("src/alpha.py"),
        item("src/no_such_file.py"),  # made up (or another project's, re-homed)
        item("node_modules/pkg/x.js"),  # a folder no index holds
        item("src/alpha.py", symbol=AKIA),  # clean content, a key as its symbol
    ]
    out = screen(items, ws.projects, SecretsPolicy(), adapter="command")
    assert [e.path for e in out.items] == ["src/alpha.py"] and out.items[0].symbol is None
    assert out.counts == {"outside-project": 1, "excluded": 1, "secret": 1}
    url = Evidence(project="", path="https://admin:hunter2passw0rd@docs.example.com/p", kind="doc",
                   start_line=1, end_line=1, content="docs", score=1.0)  # fmt: skip
    (shown,) = screen([url], ws.projects, SecretsPolicy(), adapter="mcp").items
    assert shown.path == "https://[REDACTED]@docs.example.com/p"


def test_an_external_error_text_is_redacted_before_the_receipt(ws: Workspace, tmp_path: Path) -> None:
    """An HTTP 500 body or a command's stderr went into the signed, stored receipt whole."""
    key = "wJalrXUtnFEMI" + "K7MDENGbPxRfiCYzzzzzzzzzzz"
    code = (  # the key is put together at run time: the argv in the receipt holds only its halves
        f"import sys\nkey = {key[:13]!r} + {key[13:]!r}\n"
        "sys.stderr.write('boom: aws_secret_access_key = ' + key + '\\n')\nsys.exit(3)"
    )
    cfg = config_with(tmp_path / "cfg", {"failing": command_expert(code)})
    receipt = run(cfg, ws, {"question": 'find "PaymentGateway"', "intent": "identifier"}).response["receipt"]
    failing = receipt["per_expert"]["failing"]
    assert failing["status"] == "internal" and "[REDACTED]" in failing["error"]
    assert key not in json.dumps(receipt)
