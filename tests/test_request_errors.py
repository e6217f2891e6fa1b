"""Issue 8 item 8: clear, classified errors for the small cases, and the small fixes around them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from engine.errors import SpecError
from engine.mcp_server import BearerAuth
from engine.serve import serve
from engine.workspace import Workspace
from tests.conftest import ROOT, git, make_repo
from tests.helpers import ask, plain_pynacl_verify


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=120
    )


@pytest.mark.parametrize(
    ("request_fields", "field", "says"),
    [
        ({"question": "x" * 70_000}, "question", "too long (70000 > 65536 characters)"),
        ({"question": "?!? ... ---"}, "question", "no letter or digit"),
        ({"question": 'find "a\x00b"'}, "question", "NUL"),
        ({"question": "storage", "scope": {"path": "alpha\x00/x"}}, "scope.path", "NUL"),
        ({"question": "storage", "scope": {"language": "klingon"}}, "scope.language", "known: c, cpp, go"),
        ({"question": "storage", "limit": 10_000}, "limit", "above the maximum 200"),
        # a path no project has (a typo, a glob) was "nothing found" (found by an exploratory run)
        ({"question": "storage", "scope": {"path": "no/such/dir"}}, "scope.path", "is no file or folder"),
        ({"question": "storage", "scope": {"path": "alpha/*.py"}}, "scope.path", "no globs"),
    ],
)
def test_small_cases_are_invalid_requests_with_a_clear_reason(
    workspace_dir: Path, config_dir: Path, request_fields: dict[str, Any], field: str, says: str
) -> None:
    question = request_fields.pop("question")
    r = ask(config_dir, workspace_dir, question, **request_fields)
    assert r.error is not None and r.error.code == "invalid_request" and r.exit_code == 2
    assert r.error.to_dict()["field"] == field and says in r.error.message
    assert len(r.error.message) < 400  # never the caller's huge value echoed back
    assert plain_pynacl_verify(r.response["receipt"])
    assert all(o["status"] != "malformed" for o in r.response["receipt"]["per_expert"].values())


def test_integral_numbers_are_integers_in_any_json_form(indexed: Path, config_dir: Path) -> None:
    """Found by an exploratory run: JSON Schema's integer admits 3.0 and 1e2; `limit: 3.0` broke a
    slice after the schema (internal error, no receipt), `max_experts: 2.0` failed the gate."""
    r = ask(config_dir, indexed, '"RetryPolicy"', limit=3.0, budget={"max_experts": 2.0, "latency_ms": 2e3})
    assert r.error is None and 0 < len(r.response["items"]) <= 3
    receipt = r.response["receipt"]
    assert receipt["request"]["limit"] == 3 and type(receipt["request"]["limit"]) is int
    assert {k: receipt["request"]["budget"][k] for k in ("latency_ms", "max_experts")} == {
        "latency_ms": 2000,
        "max_experts": 2,
    }
    assert len(receipt["experts_selected"]["selected"]) <= 2 and plain_pynacl_verify(receipt)


def test_cli_unknown_scope_language_exits_2_listing_the_known_ones(workspace_dir: Path, config_dir: Path) -> None:
    res = _cli(
        *("run", str(config_dir / "pipelines/router.yaml"), "-w", str(workspace_dir)),
        *("-q", "storage", "--scope-language", "cobol", "-f", "json"),
        cwd=workspace_dir,
    )
    assert res.returncode == 2
    err = json.loads(res.stdout)["error"]
    assert err["error"] == "invalid_request" and err["field"] == "scope.language"
    assert "python" in err["message"] and "typescript" in err["message"]


def test_a_non_utf8_line_comes_back_decoded_with_replacement_characters(tmp_path: Path, config_dir: Path) -> None:
    repo = make_repo(tmp_path / "ws" / "latin", {"README.md": "# latin\n"})
    (repo / "legacy.txt").write_bytes(b"caf\xe9 LegacyEncodingMarker here\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "latin-1 file")
    r = ask(config_dir, repo, 'find "LegacyEncodingMarker"', intent="identifier")
    hits = [it for it in r.response["items"] if it["path"] == "legacy.txt"]
    assert hits and hits[0]["content"] == "caf\ufffd LegacyEncodingMarker here"


def test_doctor_names_folders_not_served_and_warns_on_stale_indexes(workspace_dir: Path, config_dir: Path) -> None:
    notes = workspace_dir / "notes"
    notes.mkdir()
    (notes / "todo.md").write_text("not in git\n")
    assert "notes" not in {p.name for p in Workspace.open([workspace_dir]).projects}
    assert _cli("index", "-w", str(workspace_dir), "--config-dir", str(config_dir), "--only", "bm25", cwd=workspace_dir)
    (workspace_dir / "alpha" / "alpha" / "new.py").write_text("X = 1\n")
    git(workspace_dir / "alpha", "add", "-A")
    git(workspace_dir / "alpha", "commit", "-qm", "new file after indexing")
    res = _cli("doctor", "-w", str(workspace_dir), "--config-dir", str(config_dir), cwd=workspace_dir)
    lines = res.stdout.splitlines()
    folders = next(i for i, line in enumerate(lines) if "folders not served" in line)
    assert (
        lines[folders].startswith("WARN") and "notes" in lines[folders + 1] and "not a git repo" in lines[folders + 1]
    )
    bm25 = next(line for line in lines if line.split()[1:3] == ["expert", "bm25"])
    assert bm25.startswith("WARN") and "stale for alpha" in bm25 and "engine index" in bm25
    checks = json.loads(
        _cli(
            "doctor", "-w", str(workspace_dir), "--config-dir", str(config_dir), "-f", "json", cwd=workspace_dir
        ).stdout
    )
    stale = next(c for c in checks if c["check"] == "expert bm25")
    assert stale["ok"] and stale["warn"] and "alpha" in stale["freshness"]["stale"]


async def _status(app: BearerAuth, header: bytes | None) -> int:
    sent: list[dict[str, Any]] = []
    headers = [(b"authorization", header)] if header is not None else []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app({"type": "http", "headers": headers}, receive, send)
    return int(sent[0]["status"])


def test_http_auth_scheme_is_case_insensitive_and_the_token_exact() -> None:
    async def ok_app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})

    app = BearerAuth(ok_app, "s3cret")
    for header, status in [
        (b"Bearer s3cret", 200),
        (b"bearer s3cret", 200),
        (b"BEARER s3cret", 200),
        (b"Bearer  s3cret ", 200),
        (b"Bearer s3cret2", 401),
        (b"Basic s3cret", 401),
        (b"s3cret", 401),
        (b"Bearer", 401),
        (b"", 401),
        (None, 401),
    ]:
        assert anyio.run(_status, app, header) == status, header


@pytest.mark.parametrize("token", ["", "   ", "\t\n"])
def test_an_empty_or_blank_token_is_refused_at_start(workspace_dir: Path, token: str) -> None:
    with pytest.raises(SpecError, match="token is empty"):
        serve(ROOT, Workspace.open([workspace_dir]), transport="http", token=token)
    with pytest.raises(ValueError, match="empty"):
        BearerAuth(lambda *a: None, token)
    res = _cli("serve", "-w", str(workspace_dir), "--transport", "http", "--token", token, cwd=workspace_dir)
    assert res.returncode == 2 and "invalid_config" in res.stderr


def test_doctor_fails_an_expert_whose_program_is_missing(workspace_dir: Path, config_dir: Path) -> None:
    """Found by an exploratory run: `binary: /nonexistent/rg` was "ok ripgrep" in doctor, unavailable in every run."""
    import yaml

    experts = yaml.safe_load((config_dir / "experts.yaml").read_text())
    experts["experts"]["ripgrep"].setdefault("settings", {})["binary"] = "/nonexistent/rg"
    (config_dir / "experts.yaml").write_text(yaml.safe_dump(experts))
    res = _cli("doctor", "-w", str(workspace_dir), "--config-dir", str(config_dir), "-f", "json", cwd=workspace_dir)
    check = next(c for c in json.loads(res.stdout) if c["check"] == "expert ripgrep")
    assert not check["ok"] and "/nonexistent/rg" in check["detail"]


def test_projects_of_one_folder_name_stay_apart_and_a_bare_repo_is_not_served(tmp_path: Path) -> None:
    """Found by an exploratory run: p1/x/proj and p2/x/proj were both named `x/proj` (one parent
    folder was not enough): one index overwrote the other and their evidence fused as agreement.
    A bare repository as the workspace served git's internals (a remote URL's password)."""
    from engine.errors import InvalidRequest

    roots = []
    for side in ("p1", "p2"):
        root = tmp_path / side / "x" / "proj"
        root.mkdir(parents=True)
        git(root, "init", "-q")
        roots.append(root)
    ws = Workspace.open([*roots, roots[0]])  # the same root twice is one project
    assert [p.name for p in ws.projects] == ["p1/x/proj", "p2/x/proj"]
    bare = tmp_path / "bare.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    with pytest.raises(InvalidRequest, match="bare git repository"):
        Workspace.open([bare])
    multi = tmp_path / "multi"
    (multi / "app").mkdir(parents=True)
    git(multi / "app", "init", "-q")
    git(multi, "init", "-q", "--bare", str(multi / "mirror.git"))
    assert [p.name for p in Workspace.open([multi]).projects] == ["app"]
    from engine.workspace import skipped_folders

    assert [why for _, why in skipped_folders(multi)] == [
        "a bare git repository (no working tree): not served; clone it to search it"
    ]
