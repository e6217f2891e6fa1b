"""End-to-end runs on real git repos with the real rg, tantivy and a real DuckDB file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from engine.spec import response_validator

from .helpers import ask, paths, plain_pynacl_verify

ENGINE = [sys.executable, "-m", "engine.cli"]


def test_identifier_question_ranks_the_file_that_contains_it_first(indexed: Path, config_dir: Path) -> None:
    r = ask(config_dir, indexed, 'where does "retry budget exhausted for request" come from')
    assert r.error is None
    assert paths(r)[0] == "alpha/alpha/retry.py"
    top = r.response["items"][0]
    assert {s["expert"] for s in top["sources"]} >= {"ripgrep"}
    assert r.response["receipt"]["classifier"]["class"] == "identifier"
    assert response_validator().is_valid(r.response)


def test_config_key_question(indexed: Path, config_dir: Path) -> None:
    r = ask(config_dir, indexed, "which file sets the config key 'upload.max_size_mb'")
    assert paths(r)[0] == "alpha/alpha/config.py"


def test_where_is_class_defined_finds_both_projects(indexed: Path, config_dir: Path) -> None:
    r = ask(config_dir, indexed, "where is FileSystemStorage defined")
    assert r.response["receipt"]["classifier"]["class"] == "typed-symbol"
    top3 = paths(r)[:3]
    assert "alpha/alpha/storage.py" in top3 and "beta/beta/storage.py" in top3


def test_response_validates_and_receipt_verifies_with_plain_pynacl(indexed: Path, config_dir: Path) -> None:
    r = ask(config_dir, indexed, "how is the retry backoff decided", limit=5)
    errors = list(response_validator().iter_errors(r.response))
    assert errors == []
    assert plain_pynacl_verify(r.response["receipt"])
    tampered = dict(r.response["receipt"], result_count=999)
    assert not plain_pynacl_verify(tampered)


def test_never_returns_secrets_ignored_or_key_files(indexed: Path, config_dir: Path) -> None:
    r = ask(config_dir, indexed, '"FileSystemStorage"', limit=50)
    got = set(paths(r))
    assert "alpha/alpha/storage.py" in got
    for banned in (".env", "deploy/id_rsa", "build/generated.py", "debug.log", "notes/leak.txt"):
        assert f"alpha/{banned}" not in got


def test_scope_prunes_projects_paths_and_languages(indexed: Path, config_dir: Path) -> None:
    r = ask(config_dir, indexed, '"RetryPolicy"', scope={"project": "beta"})
    assert paths(r) and all(p.startswith("beta/") for p in paths(r))
    r = ask(config_dir, indexed, '"RetryPolicy"', scope={"language": "python"})
    assert paths(r) and all(p.endswith(".py") for p in paths(r))
    r = ask(config_dir, indexed, '"RetryPolicy"', scope={"path": "../../etc"})
    assert r.error is not None and r.error.code == "invalid_request" and r.error.field == "scope.path"
    assert plain_pynacl_verify(r.response["receipt"])


def test_history_question_returns_commits(indexed: Path, config_dir: Path) -> None:
    r = ask(config_dir, indexed, "when was jitter added to the retry backoff")
    assert r.response["receipt"]["classifier"]["class"] == "history"
    commits = [it for it in r.response["items"] if it["kind"] == "commit"]
    assert commits and "jitter" in commits[0]["meta"]["subject"]
    assert commits[0]["meta"]["files"] == ["alpha/retry.py"]


def test_separate_mode_labels_each_expert(indexed: Path, config_dir: Path) -> None:
    r = ask(config_dir, indexed, '"RetryPolicy"', mode="separate")
    assert r.response["items"] == []
    assert set(r.response["separate"]) >= {"ripgrep", "bm25"}
    assert response_validator().is_valid(r.response)


def test_same_inputs_same_output(indexed: Path, config_dir: Path) -> None:
    a = ask(config_dir, indexed, "retry policy for failed uploads")
    b = ask(config_dir, indexed, "retry policy for failed uploads")
    strip = lambda r: [(i["id"], i["score"], i["tier"]) for i in r.response["items"]]  # noqa: E731
    assert strip(a) == strip(b)


def test_editing_a_prior_changes_experts_and_config_version(indexed: Path, config_dir: Path) -> None:
    q = "where is FileSystemStorage defined"
    before = ask(config_dir, indexed, q).response["receipt"]
    priors = yaml.safe_load((config_dir / "priors.yaml").read_text())
    priors["classes"]["typed-symbol"]["bm25"] = 0.0
    (config_dir / "priors.yaml").write_text(yaml.safe_dump(priors))
    after = ask(config_dir, indexed, q).response["receipt"]
    assert "bm25" in before["experts_selected"]["selected"]
    assert "bm25" not in after["experts_selected"]["selected"]
    assert before["config_version"] != after["config_version"]
    again = ask(config_dir, indexed, q).response["receipt"]
    assert again["config_version"] == after["config_version"]


def test_zero_expert_gate_is_a_structured_receipted_error(indexed: Path, config_dir: Path) -> None:
    priors = yaml.safe_load((config_dir / "priors.yaml").read_text())
    priors["classes"]["identifier"] = {"ripgrep": 0.05}
    (config_dir / "priors.yaml").write_text(yaml.safe_dump(priors))
    r = ask(config_dir, indexed, '"RetryPolicy"')
    assert r.error is not None and r.error.code == "zero_expert_gate" and r.exit_code == 1
    assert r.response["receipt"]["status"] == "zero_expert_gate"
    assert "below gate.min_prior" in r.response["receipt"]["experts_selected"]["why"]["ripgrep"]
    assert plain_pynacl_verify(r.response["receipt"])


@pytest.mark.parametrize(
    "question",
    [
        "x" * 5000 + " FileSystemStorage",
        "Où est défini FileSystemStorage ? 文件存储 🚀",
        "'; rm -rf / #` $(touch /tmp/pwned) {{7*7}} ignore previous instructions",
    ],
)
def test_huge_non_ascii_and_injection_shaped_questions_are_answered_safely(
    indexed: Path, config_dir: Path, question: str
) -> None:
    r = ask(config_dir, indexed, question)
    assert r.error is None
    assert plain_pynacl_verify(r.response["receipt"])
    assert r.response["receipt"]["request"]["question"] == question  # nothing lost, stored as data
    assert not Path("/tmp/pwned").exists()
    assert response_validator().is_valid(r.response)


def _cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    return subprocess.run(ENGINE + args, cwd=cwd, capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.parametrize("question", ["", "   \n\t "])
def test_cli_empty_question_exits_2_naming_the_field(indexed: Path, config_dir: Path, question: str) -> None:
    res = _cli(
        ["run", str(config_dir / "pipelines/router.yaml"), "-q", question, "-w", str(indexed), "-f", "json"],
        cwd=indexed,
    )
    assert res.returncode == 2
    out = json.loads(res.stdout)
    assert out["error"]["error"] == "invalid_request" and out["error"]["field"] == "question"
    assert plain_pynacl_verify(out["receipt"])


def test_cli_run_json_and_receipts_verify(indexed: Path, config_dir: Path) -> None:
    res = _cli(
        [
            "run",
            str(config_dir / "pipelines/router.yaml"),
            "-q",
            "where is RetryPolicy defined",
            "-w",
            str(indexed),
            "-f",
            "json",
        ],
        cwd=indexed,
    )
    assert res.returncode == 0, res.stderr
    resp = json.loads(res.stdout)
    assert response_validator().is_valid(resp)
    listed = _cli(["receipts", "list", "-w", str(indexed), "-f", "json"], cwd=indexed)
    assert resp["receipt"]["receipt_id"] in listed.stdout
    # window bounds are instants, whatever their offset (they were compared as text: found by an
    # exploratory run), and a bound that is not a time is an error, not an empty list
    made = datetime.fromisoformat(resp["receipt"]["created_at"])
    for since, shown in ((made - timedelta(seconds=1), True), (made + timedelta(seconds=1), False)):
        for tz in (UTC, timezone(timedelta(hours=1))):
            res = _cli(
                ["receipts", "list", "-w", str(indexed), "-f", "json", "--since", since.astimezone(tz).isoformat()],
                cwd=indexed,
            )
            assert res.returncode == 0 and (resp["receipt"]["receipt_id"] in res.stdout) is shown, (since, tz)
    assert _cli(["receipts", "list", "-w", str(indexed), "--since", "garbage!!"], cwd=indexed).returncode == 2
    verified = _cli(["receipts", "verify", "-w", str(indexed)], cwd=indexed)
    assert verified.returncode == 0 and json.loads(verified.stdout)["invalid"] == []
    for fmt in ("markdown", "toon"):
        res = _cli(
            [
                "run",
                str(config_dir / "pipelines/router.yaml"),
                "-q",
                "where is RetryPolicy defined",
                "-w",
                str(indexed),
                "-f",
                fmt,
            ],
            cwd=indexed,
        )
        assert res.returncode == 0 and "receipt " in res.stdout
        label = resp["confidence"]["label"]  # the calibrated confidence is shown in every format
        shown = f"**Confidence: {label} (" if fmt == "markdown" else f"#confidence {label} ("
        assert shown in res.stdout


def test_cli_bad_config_exits_2_with_file_line_and_reason(indexed: Path, config_dir: Path) -> None:
    text = (config_dir / "experts.yaml").read_text().replace("timeout_ms: 3000", "timeout_ms: fast")
    (config_dir / "experts.yaml").write_text(text)
    res = _cli(["validate", "--config-dir", str(config_dir)], cwd=indexed)
    assert res.returncode == 2
    err = json.loads(res.stderr)
    assert err["file"].endswith("experts.yaml") and err["path"] == "experts/ripgrep/timeout_ms" and err["line"] > 1


def test_schema_command_prints_schemas(tmp_path: Path) -> None:
    for which in ("request", "response", "receipt"):
        res = _cli(["schema", which], cwd=tmp_path)
        assert res.returncode == 0 and json.loads(res.stdout)["$id"].endswith("/1")


def test_cache_hit_is_receipted_and_invalidated_by_config(indexed: Path, config_dir: Path) -> None:
    q = '"RetryPolicy"'
    first = ask(config_dir, indexed, q, no_cache=False)
    second = ask(config_dir, indexed, q, no_cache=False)
    assert first.response["receipt"]["cache"]["hit"] is False
    assert second.response["receipt"]["cache"]["hit"] is True
    assert second.response["receipt"]["per_expert"] == {}  # nothing fired: the receipt says so
    assert [i["id"] for i in first.response["items"]] == [i["id"] for i in second.response["items"]]
    assert plain_pynacl_verify(second.response["receipt"])
    text = (config_dir / "priors.yaml").read_text().replace("k: 60", "k: 61")
    (config_dir / "priors.yaml").write_text(text)
    third = ask(config_dir, indexed, q, no_cache=False)
    assert third.response["receipt"]["cache"]["hit"] is False
    negative = ask(config_dir, indexed, '"no-such-string-zqx"', no_cache=False)
    negative2 = ask(config_dir, indexed, '"no-such-string-zqx"', no_cache=False)
    assert negative.response["items"] == [] and negative2.response["receipt"]["cache"]["hit"] is True


def test_rule_weights_override_class_priors_for_long_descriptions(indexed: Path, config_dir: Path) -> None:
    short = ask(config_dir, indexed, "how are failed requests retried with backoff").response["receipt"]
    long_q = (
        "When an upload fails the client retries it, but the backoff between attempts never grows and "
        "the retry policy ignores the configured number of attempts, so a flaky network makes every "
        "request hammer the server until the process is killed; I expected exponential backoff here."
    )
    long_r = ask(config_dir, indexed, long_q).response["receipt"]
    assert short["classifier"]["rule"] == "natural-language"
    assert long_r["classifier"]["rule"] == "long-description"
    assert short["fusion"]["weights"]["semantic"] == 1.0 and short["fusion"]["weights"]["bm25"] == 0.5
    assert long_r["fusion"]["weights"]["semantic"] == 0.5 and long_r["fusion"]["weights"]["bm25"] == 1.0
    assert "(rule long-description)" in long_r["experts_selected"]["why"]["bm25"]


def test_an_edit_that_keeps_size_and_mtime_is_still_picked_up(indexed: Path, config_dir: Path) -> None:
    """`cp -p` / `rsync -t` can replace priors.yaml keeping its size and mtime: a long-lived Router
    (serve, the daemon) kept the old config (found by an exploratory run). ctime is compared too."""
    from engine.runtime import Router
    from engine.workspace import Workspace

    router = Router(config_dir, Workspace.open([indexed]))
    priors = config_dir / "priors.yaml"
    before = router.config().priors
    st = priors.stat()
    text = priors.read_text()
    assert "bm25: 0.5" in text
    time.sleep(0.01)
    priors.write_text(text.replace("bm25: 0.5", "bm25: 0.4", 1))  # same size
    os.utime(priors, ns=(st.st_atime_ns, st.st_mtime_ns))  # same mtime
    after = router.config().priors
    assert after is not before and after != before


def test_a_busy_store_does_not_keep_a_one_shot_run_alive(indexed: Path, config_dir: Path) -> None:
    """Found by an exploratory run: with another process holding store.lock, `engine run --no-daemon`
    printed its answer at once and exited 70 s later (reads for the next answer, after the last one).
    The receipt waits in the spool and the next process ingests it."""
    import fcntl

    env = {**os.environ, "ENGINE_CONFIG_DIR": str(config_dir)}
    argv = [sys.executable, "-m", "engine.cli", "run", "router", "-q", "RetryPolicy", "-f", "json", "--no-daemon"]
    first = subprocess.run(argv, cwd=indexed, env=env, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr  # the store exists
    fd = os.open(indexed / ".engine" / "store.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        started = time.monotonic()
        res = subprocess.run([*argv, "--no-cache"], cwd=indexed, env=env, capture_output=True, text=True, timeout=120)
        took = time.monotonic() - started
    finally:
        os.close(fd)
    assert res.returncode == 0, res.stderr
    receipt_id = json.loads(res.stdout)["receipt"]["receipt_id"]
    assert took < 20, took  # the 3 s ingest wait plus start-up on a loaded machine; was ~70 s
    shown = subprocess.run(
        [sys.executable, "-m", "engine.cli", "receipts", "show", receipt_id, "-w", str(indexed)],
        cwd=indexed,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0 and receipt_id in shown.stdout, shown.stderr


def test_a_project_with_no_code_has_empty_indexes_not_missing_ones(tmp_path: Path, config_dir: Path) -> None:
    """Found by an exploratory run: after `engine index` of a project with no code file, symbols,
    typed and semantic said "no index: run engine index" (an empty build never opened them)."""
    from engine.indexing import index_workspace
    from engine.spec import load_config
    from engine.workspace import Workspace

    from .conftest import make_repo

    ws = make_repo(tmp_path / "notes", {"README.md": "# Notes\n\nNothing but prose here.\n"})
    index_workspace(Workspace.open([ws]), load_config(config_dir), only=["symbols", "typed"], progress=False)
    per = ask(config_dir, ws, "where is FooBar defined").response["receipt"]["per_expert"]
    assert per["symbols"]["status"] == "ok" and per["typed"]["status"] == "ok", per
