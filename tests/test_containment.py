"""Issue 8 item 1: nothing outside a project is read or returned — symlinks to files and folders
outside, symlinks inside to secrets, external results naming paths outside — over the Router, the
real CLI and MCP stdio."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from tests.conftest import ROOT
from tests.edge_support import OUTSIDE_MARKER, command_expert, config_with, plant_attacks, run
from tests.helpers import ask, plain_pynacl_verify

ROOT_LINE = "root:x:0:0"


@pytest.fixture
def attacked(workspace_dir: Path, tmp_path: Path) -> Path:
    plant_attacks(workspace_dir / "alpha", tmp_path / "outside")
    return workspace_dir


def _cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=120
    )


@pytest.mark.parametrize(
    ("scope_path", "reason"),
    [
        ("passwd_link.txt", "resolves outside"),  # symlink to a file outside (the reproduction)
        ("outside_link.txt", "resolves outside"),
        ("outside_dir", "resolves outside"),  # symlink to a folder outside
        ("outside_dir/secret.txt", "resolves outside"),
        ("env_link.txt", "withheld"),  # symlink inside, to .env
        ("key_link.txt", "withheld"),  # symlink inside, to deploy/id_rsa
        (".env", "withheld"),
        ("deploy_key", "withheld"),
        (".git/config", "private"),
        ("../beta", "may not leave"),
    ],
)
def test_scope_path_outside_or_secret_is_invalid_request(
    attacked: Path, config_dir: Path, scope_path: str, reason: str
) -> None:
    r = ask(config_dir, attacked, "root", scope={"project": "alpha", "path": scope_path})
    assert r.error is not None and r.error.code == "invalid_request" and r.exit_code == 2
    assert r.error.to_dict()["field"] == "scope.path" and reason in r.error.message
    assert plain_pynacl_verify(r.response["receipt"]) and r.response["items"] == []
    assert ROOT_LINE not in json.dumps(r.response)


def test_cli_scope_symlink_to_etc_passwd_exits_2_without_its_content(attacked: Path, config_dir: Path) -> None:
    res = _cli(
        [
            *("run", str(config_dir / "pipelines/router.yaml"), "-w", str(attacked), "-q", "root"),
            *("--scope-path", "passwd_link.txt", "-f", "json", "--no-cache"),
        ],
        cwd=attacked,
    )
    assert res.returncode == 2, res.stderr
    assert ROOT_LINE not in res.stdout + res.stderr
    out = json.loads(res.stdout)
    assert out["error"]["error"] == "invalid_request" and out["error"]["field"] == "scope.path"
    assert plain_pynacl_verify(out["receipt"])


def test_symlinks_are_never_followed_when_searching_the_whole_project(attacked: Path, config_dir: Path) -> None:
    for question in (f'"{OUTSIDE_MARKER}"', f'"{ROOT_LINE}"', "SECRET_TOKEN"):
        r = ask(config_dir, attacked, question)
        assert r.error is None
        text = json.dumps(r.response["items"])
        assert OUTSIDE_MARKER not in text and ROOT_LINE not in text and "do-not-return" not in text
        assert not any(it["path"].endswith(("_link.txt", ".env")) for it in r.response["items"])


def test_external_results_naming_files_outside_are_dropped_and_counted(attacked: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside" / "secret.txt"
    lines = [
        "alpha/storage.py:4:class FileSystemStorage:",  # inside: kept
        f"{outside}:1:{OUTSIDE_MARKER}",  # absolute, outside
        f"../../outside/secret.txt:1:{OUTSIDE_MARKER}",  # relative escape
        f"outside_link.txt:1:{OUTSIDE_MARKER}",  # a symlink out
        f"outside_dir/secret.txt:1:{OUTSIDE_MARKER}",  # through a symlinked folder
        "/etc/passwd:1:root:x:0:0:root:/root:/bin/bash",
        "env_link.txt:1:SECRET_TOKEN=FileSystemStorage-super-secret",  # a symlink in, to .env
        ".git/config:1:[core]",
    ]
    code = f"import os\nif os.getcwd().endswith('alpha'):\n    print({chr(10).join(lines)!r})\n"
    cfg = config_with(tmp_path / "cfg", {"leaky": command_expert(code)})
    r = run(cfg, attacked, {"question": 'find "FileSystemStorage"', "intent": "identifier"})
    leaky = r.response["receipt"]["per_expert"]["leaky"]
    assert leaky["status"] == "ok"
    assert [(it["project"], it["path"]) for it in r.response["items"]] == [("alpha", "alpha/storage.py")]
    assert leaky["withheld"]["outside-project"] >= 5 and leaky["withheld"]["secret"] >= 1
    text = json.dumps(r.response["items"])  # (the receipt's sub_queries hold the expert's own argv)
    assert OUTSIDE_MARKER not in text and ROOT_LINE not in text and "super-secret" not in text


@pytest.mark.anyio
async def test_mcp_stdio_scope_symlink_is_invalid_request(attacked: Path, config_dir: Path, tmp_path: Path) -> None:
    argv = ["-m", "engine.cli", "serve", "--workspace", str(attacked), "--config-dir", str(config_dir)]
    params = StdioServerParameters(command=sys.executable, args=argv, cwd=str(tmp_path))
    async with Client(params) as client:
        for path in ("passwd_link.txt", "env_link.txt", "outside_dir"):
            reply = await client.call_tool(
                "router", {"question": "root", "scope": {"project": "alpha", "path": path}, "format": "json"}
            )
            assert reply.is_error and reply.content[0].text.startswith("invalid_request")
            assert ROOT_LINE not in reply.content[0].text and "SECRET_TOKEN" not in reply.content[0].text
            assert plain_pynacl_verify(reply.structured_content["receipt"])


def test_batched_check_equals_the_plain_one(tmp_path: Path) -> None:
    """``contained(..., dirs=memo)`` (the screen's batch, which resolves only the last name again)
    answers exactly what a full ``realpath`` does, for every mix of links, ``..`` and missing files."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from engine.workspace import contained

    root, outside = tmp_path / "proj", tmp_path / "outside"
    (root / "pkg" / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_text("x")
    (root / "pkg" / "a.py").write_text("x")
    (root / "pkg" / "sub" / "b.py").write_text("x")
    (root / "pkg" / "out_link.txt").symlink_to(outside / "secret.txt")
    (root / "pkg" / "in_link.py").symlink_to(root / "pkg" / "a.py")
    (root / "dir_link").symlink_to(root / "pkg")
    (root / "out_dir").symlink_to(outside)
    (root / "loop").symlink_to(root / "loop")
    parts = ["pkg", "sub", "a.py", "b.py", "out_link.txt", "in_link.py", "dir_link", "out_dir", "secret.txt",
             "loop", "..", ".", "missing"]  # fmt: skip

    @settings(max_examples=300, deadline=None)
    @given(st.lists(st.lists(st.sampled_from(parts), min_size=1, max_size=4), min_size=1, max_size=6))
    def check(rels: list[list[str]]) -> None:
        memo: dict[str, str | None] = {}
        for rel in ("/".join(r) for r in rels):
            assert contained(root, rel, dirs=memo) == contained(root, rel), rel

    check()
    # what the property found: a non-strict realpath stops at a loop and keeps the rest as text,
    # so a link to outside behind `loop/..` came back "inside", unresolved
    for rel in ("loop/../pkg/out_link.txt", "loop/../out_dir/secret.txt", "missing/../pkg/out_link.txt"):
        assert contained(root, rel) is None and contained(root, rel, dirs={}) is None, rel
    assert contained(root, "loop/x") is None  # through a loop: refused, not guessed
    assert contained(root, "pkg/missing.py") == root.resolve() / "pkg" / "missing.py"  # missing is fine


def test_a_scope_path_through_a_link_inside_the_project_names_the_real_path(tmp_path: Path) -> None:
    """Found by an exploratory run: `--scope-path current` (current -> releases/v2) answered nothing
    and said nothing: every expert reports real paths, which are not under `current/`."""
    from engine.errors import InvalidRequest
    from engine.secrets import SecretsPolicy
    from engine.workspace import Workspace, check_scope_path

    from .conftest import make_repo

    repo = make_repo(tmp_path / "ws" / "app", {"releases/v2/mod.py": "ALIAS = 1\n"})
    (repo / "current").symlink_to("releases/v2")
    projects = Workspace.open([repo]).projects
    with pytest.raises(InvalidRequest, match="scope by the path it points to, 'releases/v2'"):
        check_scope_path(projects, "current", SecretsPolicy())
    assert check_scope_path(projects, "releases/v2", SecretsPolicy()) == "releases/v2"
