"""One output contract for every verb (issue 12 item 5): a verb offers exactly the ``--format``
values it honours — every one of them changes the output as promised, anything else is a usage
error (exit 2) — and ``receipts list`` shows time, class, status, question and result count
under a header."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import pytest
import typer.main
from typer.testing import CliRunner

from engine.cli import app
from tests.helpers import ask

LONG = "where is the retry policy that decides how often a failed upload request is retried with backoff"


def _format_options() -> dict[str, tuple[str, ...]]:
    """Every command's ``--format`` choices (typer builds them from a ``Literal`` annotation)."""
    out: dict[str, tuple[str, ...]] = {}

    def walk(cmd: Any, path: str) -> None:
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, f"{path} {name}".strip())
        for p in getattr(cmd, "params", ()):
            if "--format" in p.opts:
                annotation = p.type_descriptor.annotation
                assert get_origin(annotation) is Literal, f"{path}: --format must list what it honours"
                out[path] = tuple(get_args(annotation))

    walk(typer.main.get_command(app), "")
    return out


def test_every_format_option_is_a_closed_choice() -> None:
    formats = _format_options()
    assert formats["run"] == ("json", "markdown", "toon")
    for table_verb in ("index", "receipts list", "store stats", "doctor", "tune", "daemon status", "daemon stop"):
        assert formats[table_verb] == ("text", "json", "markdown", "toon"), table_verb
    assert set(formats) >= {"diff", "eval run", "eval compare", "bench"}


def _invoke(*args: str) -> str:
    res = CliRunner().invoke(app, list(args))
    assert res.exit_code in (0, 1), (args, res.output, res.exception)
    return res.stdout


def _check(out: str, fmt: str, columns: tuple[str, ...]) -> None:
    lines = out.strip().splitlines()
    if fmt == "json":
        assert isinstance(json.loads(out), list)
    elif fmt == "markdown":
        assert lines[0] == "| " + " | ".join(columns) + " |" and lines[1].startswith("|---|")
    elif fmt == "toon":
        assert lines[0].startswith("#toon rows[") and lines[0].endswith("{" + ",".join(columns) + "}")
    else:
        assert lines[0].split() == [c.upper() for c in columns]


@pytest.mark.parametrize("fmt", ["text", "json", "markdown", "toon"])
def test_table_verbs_honour_every_format(indexed: Path, config_dir: Path, fmt: str) -> None:
    from engine.cli import INDEX_COLUMNS
    from engine.cli_daemon import COLUMNS as DAEMON_COLUMNS
    from engine.cli_store import RECEIPT_COLUMNS, STATS_COLUMNS

    ask(config_dir, indexed, "RetryPolicy")
    w = ["-w", str(indexed)]
    _check(_invoke("index", *w, "--config-dir", str(config_dir), "--only", "bm25", "-f", fmt), fmt, INDEX_COLUMNS)
    _check(_invoke("receipts", "list", *w, "-f", fmt), fmt, RECEIPT_COLUMNS)
    _check(_invoke("store", "stats", *w, "-f", fmt), fmt, STATS_COLUMNS)
    _check(_invoke("daemon", "status", *w, "-f", fmt), fmt, DAEMON_COLUMNS)
    if fmt != "text":  # doctor's text is its own checklist
        _check(_invoke("doctor", *w, "--config-dir", str(config_dir), "-f", fmt), fmt, ("status", "check", "detail"))


@pytest.mark.parametrize(
    "args",
    [["index"], ["receipts", "list"], ["store", "stats"], ["doctor"], ["daemon", "status"], ["diff", "a", "b"]],
)
def test_a_format_a_verb_does_not_honour_is_a_usage_error(tmp_path: Path, args: list[str]) -> None:
    for fmt in ("yaml", "table"):
        res = CliRunner().invoke(
            app, [*args, "-w", str(tmp_path), "-f", fmt] if args[0] != "diff" else [*args, "-f", fmt]
        )
        assert res.exit_code == 2 and "Invalid value for '--format'" in res.output, res.output


def test_receipts_list_shows_time_class_status_question_and_count(indexed: Path, config_dir: Path) -> None:
    ask(config_dir, indexed, LONG)
    ask(config_dir, indexed, "RetryPolicy", intent="identifier")
    text = _invoke("receipts", "list", "-w", str(indexed))
    header, *rows = text.strip().splitlines()
    assert header.split() == ["TIME", "CLASS", "STATUS", "QUESTION", "RESULTS", "PIPELINE", "RECEIPT_ID"]
    assert len(rows) == 2
    assert "RetryPolicy" in rows[0] and "identifier" in rows[0] and " ok " in rows[0]
    assert LONG[:40] in rows[1] and LONG not in rows[1] and "…" in rows[1]
    listed = json.loads(_invoke("receipts", "list", "-w", str(indexed), "-f", "json"))
    assert [r["question"] for r in listed] == ["RetryPolicy", LONG]  # json keeps the whole question
    assert all(isinstance(r["result_count"], int) and r["class"] for r in listed)
    for row, data in zip(rows, listed, strict=True):
        assert data["created_at"][:19] in row and f" {data['result_count']} " in row


def test_markdown_and_toon_never_pass_terminal_control_sequences_through() -> None:
    """Found by an exploratory run: a file holding ESC sequences (clear screen, an OSC window
    title — or an OSC 52 clipboard write) reached the terminal raw in markdown and toon output."""
    from engine.render import render

    evil = "x = 1\x1b[2J\x1b]0;pwned\x07\r\ny = 2\x9b31m\n"
    item = {
        "id": "i1",
        "rank": 1,
        "path": "a.py",
        "project": "p",
        "range": {"start_line": 1, "end_line": 2},
        "kind": "chunk",
        "content": evil,
        "score": 1.0,
        "subscores": {},
        "flags": [],
        "sources": [],
        "tier": "single-source",
        "nuance": "n",
    }
    receipt = {
        "receipt_id": "r",
        "status": "ok",
        "classifier": {"class": "conceptual"},
        "config_version": "v" * 12,
        "cache": {"hit": False},
        "budget": {"spent": {"latency_ms": 1.0}},
        "per_expert": {},
    }
    response = {"items": [item], "receipt": receipt}
    for fmt in ("markdown", "toon"):
        out = render(response, fmt)
        assert not any(c in out for c in "\x1b\x07\r\x9b"), fmt
        assert "\\x1b[2J" in out and "y = 2" in out
    assert json.loads(render(response, "json"))["items"][0]["content"] == evil  # JSON escapes it itself
