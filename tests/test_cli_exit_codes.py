"""Every exit of the ``engine`` command is 0, 1 or 2, with a classified JSON error on stderr
(engine/cli.py, docs/failures.md) — never a bare traceback for a user's mistake."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ENGINE = [sys.executable, "-m", "engine.cli"]


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ENGINE, *args], capture_output=True, text=True, cwd=cwd, timeout=120)


@pytest.mark.parametrize(
    "args,code,error",
    [
        (["eval", "{tmp}/no-suite", "--arms", "router"], 2, "invalid_eval"),
        (["eval", "{tmp}/suite", "--arms", "router"], 2, "invalid_eval"),  # a folder without qrels
        (["eval", "compare", "{tmp}/nothing", "{tmp}/nothing"], 2, "invalid_eval"),
        (["eval", "compare", "{tmp}/bad.json", "{tmp}/bad.json"], 2, "invalid_eval"),
        (["index", "--workspace", "{tmp}/no-such-dir"], 2, "invalid_request"),
        (["index", "--workspace", "{tmp}", "--only", "nosuch"], 2, "invalid_request"),  # was a silent no-op
        (["index", "--workspace", "{tmp}", "--only", "ripgrep"], 2, "invalid_request"),  # has no index
        (["doctor", "--workspace", "{tmp}/no-such-dir"], 2, "invalid_request"),
        (["validate", "--config-dir", "{tmp}"], 2, "invalid_config"),
        (["schema", "nope"], 2, "invalid_config"),
    ],
)
def test_user_mistakes_exit_2_with_a_classified_error(tmp_path: Path, args: list[str], code: int, error: str) -> None:
    (tmp_path / "suite").mkdir()
    (tmp_path / "bad.json").write_text('["not", "metrics"]')
    res = run(*(a.format(tmp=tmp_path) for a in args), cwd=tmp_path)
    assert res.returncode == code, res.stderr
    assert "Traceback" not in res.stderr
    assert json.loads(res.stderr.strip().splitlines()[-1])["error"] == error


def test_a_bug_is_internal_error_exit_1(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import engine.cli

    def broken(_root: Path) -> None:
        raise RuntimeError("a bug, not a user mistake")

    monkeypatch.setattr(engine.cli, "load_config", broken)
    monkeypatch.setattr(sys, "argv", ["engine", "validate", "--config-dir", "."])
    with pytest.raises(SystemExit) as exit_:
        engine.cli.main()
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    assert json.loads(err.strip().splitlines()[-1]) == {
        "error": "internal_error",
        "message": "RuntimeError: a bug, not a user mistake",
    }
    assert "Traceback" in err  # kept for the bug report


@pytest.mark.parametrize(
    "exc,expected",
    [
        (
            sqlite3.OperationalError("database or disk is full"),
            "an index could not be written: database or disk is full",
        ),
        (OSError("458880 requested and 29664 written"), "OSError: 458880 requested and 29664 written"),
    ],
)
def test_a_full_disk_is_an_environment_error_that_says_what_happened(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], exc: Exception, expected: str
) -> None:
    """Found by an exploratory run on a full tmpfs: SQLite's "disk is full" was internal_error with a
    traceback, and numpy's short write an environment_error that said only "OSError"."""
    import engine.cli

    def full(_root: Path) -> None:
        raise exc

    monkeypatch.setattr(engine.cli, "load_config", full)
    monkeypatch.setattr(sys, "argv", ["engine", "validate", "--config-dir", "."])
    with pytest.raises(SystemExit) as exit_:
        engine.cli.main()
    err = capsys.readouterr().err
    assert exit_.value.code == 1 and "Traceback" not in err
    got = json.loads(err.strip().splitlines()[-1])
    assert got["error"] == "environment_error" and expected in got["message"]


@pytest.mark.parametrize("verb", [["index"], ["store", "status"]])
def test_a_data_dir_that_is_a_file_is_an_environment_error_not_a_traceback(tmp_path: Path, verb: list[str]) -> None:
    """Found by an exploratory run: `.engine` being a file (or ENGINE_HOME a read-only path) gave
    a NotADirectoryError traceback as an `internal_error`."""
    ws = tmp_path / "ws"
    (ws / "app").mkdir(parents=True)
    (ws / "app" / "x.py").write_text("x = 1\n")
    (ws / ".engine").write_text("not a folder\n")
    res = run(*verb, "--workspace", str(ws), cwd=tmp_path)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    err = json.loads(res.stderr.strip().splitlines()[-1])
    assert err["error"] == "environment_error" and ".engine" in err["message"]


def test_doctor_reports_a_store_it_cannot_open_as_a_failed_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by an exploratory run: on a read-only data dir `doctor` stopped at the store (its lock
    file) with one environment_error, and its own checks never ran."""
    from engine.doctor import store_checks
    from engine.store.duckdb_store import DuckDBStore

    def read_only(self: object) -> None:
        raise PermissionError(13, "Read-only file system", str(tmp_path / "store.lock"))

    monkeypatch.setattr(DuckDBStore, "health", read_only)
    checks = {c["check"]: c for c in store_checks(tmp_path)}
    assert checks["store"]["ok"] is False and "Read-only file system" in checks["store"]["detail"]
    assert "signing key" in checks


def test_malformed_suites_and_empty_comparisons_are_classified(tmp_path: Path) -> None:
    """Found by an exploratory run: a qrels score `x` and a corpus row without `_id` were tracebacks;
    `eval compare` of runs with nothing in common passed as "0 regressions in 0 checks" (the release
    gate), and `receipts list --limit -1` blamed a healthy store."""
    from engine.errors import EvalError
    from engine.evaluation.compare import compare
    from engine.evaluation.suite import load_suite

    suite = tmp_path / "s"
    (suite / "qrels").mkdir(parents=True)
    (suite / "corpus.jsonl").write_text('{"_id": "d1", "text": "def f(): pass"}\n')
    (suite / "queries.jsonl").write_text('{"_id": "q1", "text": "where is f"}\n')
    (suite / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\tx\n")
    with pytest.raises(EvalError, match="not an integer"):
        load_suite(suite, "test")
    (suite / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    (suite / "corpus.jsonl").write_text('{"text": "def f(): pass"}\n')
    with pytest.raises(EvalError, match="no _id"):
        load_suite(suite, "test")
    (suite / "corpus.jsonl").write_text('{"_id": "d1", "text": "a"}\n{"_id": "d1", "text": "b"}\n')
    with pytest.raises(EvalError, match="corpus id 'd1' is given twice"):
        load_suite(suite, "test")
    (suite / "corpus.jsonl").write_text('{"_id": "d1", "text": "def f(): pass"}\n')
    (suite / "queries.jsonl").write_text('{"_id": "q1", "text": "where is f"}\n{"_id": "q1", "text": "other"}\n')
    with pytest.raises(EvalError, match="query id 'q1' is given twice"):
        load_suite(suite, "test")
    with pytest.raises(EvalError, match="nothing to compare"):
        compare({"arms": {"router": {"overall": {}}}}, {"arms": {}})
    res = run("receipts", "list", "--limit", "-1", "--workspace", str(tmp_path), cwd=tmp_path)
    assert res.returncode == 2 and "store_error" not in res.stderr
    for argv in (("eval", "run", str(suite), "--limit-queries", "-3"), ("bench", str(suite), "--rounds", "0")):
        res = run(*argv, cwd=tmp_path)  # refused before any work (a negative count sliced from the end)
        assert res.returncode == 2 and "Invalid value" in res.stderr, argv
