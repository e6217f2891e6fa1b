"""What the web UI tests share: a real workspace with XSS probes in file content, a file name and
a question; a config folder that is a git repository; the server run for real (in-process for
HTTP-level tests, as ``engine serve`` for the browser); and Debian's Chromium under Playwright.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from starlette.testclient import TestClient

from engine.mcp_server import http_app
from engine.serve import RouterTools, make_server
from engine.ui import ui_app
from engine.workspace import Workspace
from tests.conftest import ALPHA, BETA, git, make_repo

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
CHROMIUM = "/usr/bin/chromium"
#: the flags every browser test launches Chromium with (no sandbox: CI runs as root)
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# every browser test run takes the screenshots; they land in docs/ui/ (docs/ui.md) only when asked
# (`make ui-shots`), so an ordinary `make test` leaves the tree clean
SHOTS = Path(os.environ.get("ENGINE_UI_SHOTS") or Path(tempfile.gettempdir()) / "engine-ui-shots")

# XSS probes: each would run script if it reached the page as markup instead of text
IMG_PROBE = '"><img src=x onerror="window.__xss=1">'
SCRIPT_PROBE = "<script>window.__xss=2</script>"
PROBE_FILE = 'probe_"><img src=x onerror=window.__xss=3>.py'
PROBE_QUESTION = f"{SCRIPT_PROBE}{IMG_PROBE} where is xss_probe_marker"
PROBE_FILES = {
    PROBE_FILE: f"# {SCRIPT_PROBE}\nxss_probe_marker = '{IMG_PROBE}'\n",
    "probe/render.py": (f"def render():\n    # {SCRIPT_PROBE}\n    return '{IMG_PROBE}'  # xss_probe_marker\n"),
}


def build_workspace(root: Path) -> Path:
    """alpha and beta (tests/conftest.py) plus a ``probe`` repo; alpha gets a symlink to /etc/passwd."""
    ws = root / "ws"
    make_repo(ws / "alpha", ALPHA)
    make_repo(ws / "beta", BETA)
    make_repo(ws / "probe", PROBE_FILES)
    (ws / "alpha" / "passwd_link.txt").symlink_to("/etc/passwd")
    # symlinks named like ordinary files into .git and a hidden folder (found by an exploratory run)
    (ws / "alpha" / "gitcfg.txt").symlink_to(".git/config")
    (ws / "alpha" / ".hidden").mkdir()
    (ws / "alpha" / ".hidden" / "notes.txt").write_text("hidden notes\n")
    (ws / "alpha" / "hidden_link.txt").symlink_to(".hidden/notes.txt")
    return ws


def build_config(root: Path) -> Path:
    """A copy of the repo's config in its own git repository (one commit), so revisions can be diffed."""
    dst = root / "config"
    dst.mkdir(parents=True)
    shutil.copy(REPO / "experts.yaml", dst)
    shutil.copy(REPO / "priors.yaml", dst)
    shutil.copytree(REPO / "pipelines", dst / "pipelines")
    git(dst, "init", "-q", "-b", "main")
    git(dst, "add", "-A")
    git(dst, "commit", "-q", "-m", "config as shipped")
    return dst


def index(ws: Path, config: Path) -> None:
    from engine.indexing import index_workspace
    from engine.spec import load_config

    index_workspace(Workspace.open([ws]), load_config(config), only=["bm25", "symbols"], progress=False)


def change_priors(config: Path, old: str, new: str, message: str) -> None:
    """Edit priors.yaml (one text replacement) and commit it: a new config version and revision."""
    priors = config / "priors.yaml"
    text = priors.read_text()
    assert old in text, f"{old!r} not in priors.yaml"
    priors.write_text(text.replace(old, new, 1))
    git(config, "commit", "-qam", message)


@contextmanager
def in_process(ws: Path, config: Path, token: str | None = None) -> Iterator[tuple[TestClient, list[RouterTools]]]:
    """The HTTP app ``engine serve --transport http`` runs (MCP + pages, lifespan and all), in process."""
    opened: list[RouterTools] = []
    server = make_server(
        config, Workspace.open([ws]), on_open=lambda tools: opened.append(tools) if tools is not None else None
    )
    pages = ui_app(lambda: opened[-1] if opened else None, token=token, loopback=True)
    app = http_app(server, host="127.0.0.1", token=token, pages=pages)
    with TestClient(app, base_url="http://127.0.0.1:8765", follow_redirects=False) as client:
        yield client, opened


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def engine_serve(ws: Path, config: Path, *extra: str) -> Iterator[str]:
    """``engine serve --transport http`` as a real process; yields its base URL."""
    port = free_port()
    argv = [PYTHON, "-m", "engine.cli", "serve", "-w", str(ws), "--config-dir", str(config)]
    proc = subprocess.Popen(
        [*argv, "--transport", "http", "--port", str(port), *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=ws.parent,
        env={k: v for k, v in os.environ.items() if k != "ENGINE_HOME"},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{base}/static/style.css", timeout=1.0)
                break
            except httpx.TransportError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    err = proc.stderr.read().decode() if proc.stderr and proc.poll() is not None else "timed out"
                    raise RuntimeError(f"engine serve did not start: {err}") from None
                time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()


def csrf_of(client: TestClient) -> str:
    """The CSRF token a page gave this client (its cookie; the forms carry the same value)."""
    client.get("/", headers={"accept": "text/html"})
    token = client.cookies.get("engine_csrf")
    assert token, "the first page sets the CSRF cookie"
    return str(token)


def ask(client: TestClient, question: str, **fields: Any) -> str:
    """Ask through the form; returns the receipt id the answer page is under."""
    data = {"csrf": csrf_of(client), "question": question, "pipeline": "router", "mode": "fused", **fields}
    res = client.post("/ask", data=data)
    assert res.status_code == 303, res.text
    location = res.headers["location"]
    assert location.startswith("/answer/")
    return location.rsplit("/", 1)[1]
