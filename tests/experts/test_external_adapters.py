"""The mcp, http and command adapters each pass the shared expert contract, plus their own edges."""

from __future__ import annotations

import contextlib
import gzip
import json
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from engine.errors import ExpertOutputError, ExpertUnavailable, ExpertUnconfigured
from engine.experts.base import Expert
from engine.screen import screen
from engine.secrets import SecretsPolicy
from engine.workspace import Workspace
from tests.experts.expert_contract import ExpertContract, call
from tests.external_support import FAKE_MCP, FIXTURES, PYTHON, expert, mcp_settings, query, ws  # noqa: F401

pytestmark = pytest.mark.anyio
FAKE_CLI = FIXTURES / "fake_search_cli.py"


# --------------------------------------------------------------------------------------------- mcp

MCP_TOOLS = {"ok": "search", "missing": "search", "crash": "crash", "stall": "stall", "malformed": "garbage"}


class TestMcpContract(ExpertContract):
    adapter = "mcp"
    marker = str(FAKE_MCP)

    def make(self, scenario: str, ws: Workspace, tmp_path: Path) -> Expert:
        settings = mcp_settings(MCP_TOOLS[scenario])
        if scenario == "missing":
            settings["command"] = [str(tmp_path / "no-such-server")]
        if scenario == "malformed":
            settings["result"] = {"format": "json", "items": "results"}
        return expert("mcp", settings, ws)


async def test_mcp_session_is_reused_and_restarted_after_a_crash(ws: Workspace) -> None:
    ok = expert("mcp", mcp_settings(), ws)
    try:
        q = query(ws, 'where is "PaymentGateway"')
        first = await call(ok, q)
        second = await call(ok, q)
        assert first == second and ok._conn.starts == 1  # one server process served both questions
        ok.settings["tool"] = "crash"
        with pytest.raises(Exception) as info:
            await call(ok, q)
        assert getattr(info.value, "status", None) == "internal"
        ok.settings["tool"] = "search"
        assert await call(ok, q) == first
        assert ok._conn.starts == 2  # restarted after the crash
    finally:
        await ok.aclose()


async def test_a_stdio_server_stuck_at_the_deadline_is_replaced(ws: Workspace) -> None:
    """Found by an exploratory run: a server blocked in a synchronous tool was never killed at the
    deadline (the check ran after cancel(), when the future is always done), so every later call
    timed out against the same stuck process."""
    import anyio

    ok = expert("mcp", mcp_settings(), ws)
    try:
        q = query(ws, 'where is "PaymentGateway"')
        first = await call(ok, q)
        ok.settings["tool"] = "hog"
        with pytest.raises(TimeoutError), anyio.fail_after(1.5):
            await call(ok, q)
        ok.settings["tool"] = "search"
        with anyio.fail_after(20):
            assert await call(ok, q) == first  # a fresh server answers
        assert ok._conn.starts == 2
    finally:
        await ok.aclose()


async def test_mcp_text_lines_and_paths_outside_the_workspace(ws: Workspace) -> None:
    lines = expert("mcp", mcp_settings("lines", result={}), ws)  # default pattern: path:line:text
    escape = expert("mcp", mcp_settings("escape"), ws)
    try:
        q = query(ws, 'where is "PaymentGateway"')
        got = await call(lines, q)
        assert {(e.project, e.path) for e in got} >= {("alpha", "src/alpha.py"), ("beta", "src/beta.py")}
        # the adapter leaves paths outside a project and withheld files as named; the fan-out's screen
        # (engine/screen.py) drops them and counts them for the receipt (issue 8 item 1)
        screened = screen(await call(escape, q), ws.projects, SecretsPolicy(), adapter="mcp")
        kept = screened.items
        assert len(kept) == 2  # per project: ../../etc/passwd, /etc/passwd and .env dropped, one real hit kept
        assert all(not e.path.startswith(("/", "..")) and e.path != ".env" for e in kept)
        assert screened.counts == {"outside-project": 4, "secret": 2}
    finally:
        await lines.aclose()
        await escape.aclose()


async def test_mcp_over_streamable_http_url(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [PYTHON, str(FAKE_MCP), "--http", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        monkeypatch.setenv("FAKE_MCP_TOKEN", "t0ken")
        settings = {**mcp_settings(), "url": f"http://127.0.0.1:{port}/mcp", "auth_env": "FAKE_MCP_TOKEN"}
        del settings["command"]
        remote = expert("mcp", settings, ws)
        try:
            got = await call(remote, query(ws, 'where is "PaymentGateway"'))
            assert {e.project for e in got} == {"alpha", "beta"}
        finally:
            await remote.aclose()
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    gone = expert("mcp", {**settings, "url": f"http://127.0.0.1:{free_port()}/mcp"}, ws)
    with pytest.raises(ExpertUnavailable):
        await call(gone, query(ws, 'where is "PaymentGateway"'))
    await gone.aclose()


# --------------------------------------------------------------------------------------------- http


class _Handler(BaseHTTPRequestHandler):
    stop = threading.Event()

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, body: str) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        url = urlparse(self.path)
        args = {k: v[0] for k, v in parse_qs(url.query).items()}
        if url.path == "/crash":
            return self._send(500, '{"error": "boom"}')
        if url.path == "/stall":
            for _ in range(300):
                if self.stop.wait(0.1):
                    break
            return None
        if url.path == "/garbage":
            return self._send(200, "<html>not json")
        if url.path in ("/endless", "/gzipbomb"):  # never-ending / 1 GB once inflated
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            if url.path == "/gzipbomb":
                self.send_header("Content-Encoding", "gzip")
                data = gzip.compress(b" " * 64_000_000, compresslevel=9)  # ~62 KB on the wire
                self.send_header("Content-Length", str(len(data)))
                with contextlib.suppress(OSError):  # the client hangs up once it has enough
                    self.end_headers()
                    self.wfile.write(data)
                return None
            self.end_headers()
            with contextlib.suppress(OSError):
                while not self.stop.is_set():
                    self.wfile.write(b"[" * 65536)
            return None
        if url.path == "/deep":
            return self._send(200, "[" * 100_000 + "]" * 100_000)
        if url.path == "/bigheader":
            self.send_response(200)
            self.send_header("X-Big", "x" * 200_000)
            self.send_header("Content-Length", "2")
            with contextlib.suppress(OSError):  # the client hangs up mid-header
                self.end_headers()
                self.wfile.write(b"{}")
            return None
        if url.path == "/auth" and self.headers.get("X-Api-Key") != "Token sesame":
            return self._send(401, '{"error": "unauthorized"}')
        hits = []
        for f in sorted(Path(args["root"]).rglob("*.py")):
            for n, line in enumerate(f.read_text().splitlines(), start=1):
                if args["q"] in line:
                    hits.append({"file": f.relative_to(args["root"]).as_posix(), "line": n, "snippet": line})
        return self._send(200, json.dumps({"data": {"results": hits[: int(args.get("limit", 10))]}}))


@pytest.fixture(scope="module")
def http_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    _Handler.stop.set()
    server.shutdown()
    server.server_close()


def http_settings(base: str, path: str = "/search", **extra: Any) -> dict[str, Any]:
    return {
        "url": base + path,
        "per_project": True,
        "params": {"q": "{{ term }}", "root": "{{ root }}", "limit": "{{ limit }}"},
        "result": {"items": "data.results", "fields": {"path": "file", "content": "snippet"}},
        **extra,
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TestHttpContract(ExpertContract):
    adapter = "http"

    @pytest.fixture(autouse=True)
    def _server(self, http_server: str) -> None:
        self.base = http_server

    def make(self, scenario: str, ws: Workspace, tmp_path: Path) -> Expert:
        base = f"http://127.0.0.1:{free_port()}" if scenario == "missing" else self.base
        path = {"ok": "/search", "missing": "/search", "crash": "/crash", "stall": "/stall", "malformed": "/garbage"}[
            scenario
        ]
        return expert("http", http_settings(base, path), ws)


async def test_http_auth_header_comes_from_the_named_environment_variable(
    ws: Workspace, http_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = http_settings(
        http_server, "/auth", auth_env="TEST_SEARCH_KEY", auth_header="X-Api-Key", auth_prefix="Token "
    )
    q = query(ws, 'where is "PaymentGateway"')
    monkeypatch.delenv("TEST_SEARCH_KEY", raising=False)
    with pytest.raises(ExpertUnconfigured):
        await call(expert("http", settings, ws), q)
    monkeypatch.setenv("TEST_SEARCH_KEY", "sesame")
    got = await call(expert("http", settings, ws), q)
    assert {e.project for e in got} == {"alpha", "beta"}
    plan = expert("http", settings, ws).plan(q)
    assert "sesame" not in json.dumps(plan)  # secrets never reach the receipt's sub_queries


@pytest.mark.parametrize(
    "path,reason",
    [
        ("/endless", "over 1,048,576 bytes"),
        ("/gzipbomb", "over 1,048,576 bytes"),
        ("/deep", "nested too deeply"),
        ("/bigheader", "RemoteProtocolError"),
    ],
)
async def test_http_answers_too_big_too_deep_or_not_http_are_malformed(
    ws: Workspace, http_server: str, path: str, reason: str
) -> None:
    """Found by an exploratory run: a 500 MB body, an endless one or a gzip bomb was buffered whole
    (2.7 GB for one request) and parsed on the event loop; 10,000-deep JSON was `internal`; a header
    past h11's buffer said the answering host was unreachable."""
    settings = http_settings(http_server, path, max_response_bytes=1_048_576)
    with pytest.raises(ExpertOutputError, match=reason):
        await call(expert("http", settings, ws), query(ws, 'where is "PaymentGateway"'))


# --------------------------------------------------------------------------------------------- command


class TestCommandContract(ExpertContract):
    adapter = "command"
    marker = str(FAKE_CLI)

    def make(self, scenario: str, ws: Workspace, tmp_path: Path) -> Expert:
        argv = {
            "ok": [PYTHON, str(FAKE_CLI), "ok", "{{ term }}"],
            "missing": [str(tmp_path / "no-such-tool"), "{{ term }}"],
            "crash": [PYTHON, str(FAKE_CLI), "crash"],
            "stall": [PYTHON, str(FAKE_CLI), "stall"],
            "malformed": [PYTHON, str(FAKE_CLI), "malformed"],
        }[scenario]
        settings: dict[str, Any] = {"argv": argv, "output": "jsonl" if scenario == "malformed" else "lines"}
        return expert("command", settings, ws)


async def test_command_jsonl_output(ws: Workspace) -> None:
    cmd = expert(
        "command",
        {
            "argv": [PYTHON, str(FAKE_CLI), "jsonl", "{{ term }}"],
            "output": "jsonl",
            "result": {"fields": {"path": "file", "content": "text"}},
        },
        ws,
    )
    got = await call(cmd, query(ws, 'where is "PaymentGateway"'))
    assert {(e.project, e.path, e.start_line) for e in got} >= {("alpha", "src/alpha.py", 6)}


async def test_command_question_never_becomes_an_option_or_a_shell_word(ws: Workspace) -> None:
    echo = {
        "argv": [PYTHON, str(FAKE_CLI), "echo", "{{ term }}"],
        "output": "jsonl",
        "result": {"fields": {"path": "file", "content": "text"}},
    }
    with pytest.raises(ExpertUnconfigured, match="option"):
        expert("command", echo, ws).plan(query(ws, 'find "--pre=touch /tmp/pwned"'))
    after_dashes = {**echo, "argv": [PYTHON, str(FAKE_CLI), "echo", "--", "{{ term }}"]}
    shell = 'x"; rm -rf / #'
    got = await call(expert("command", after_dashes, ws), query(ws, f"find '{shell}' or \"$(id)\""))
    assert json.loads(got[0].content) == ["--", shell]  # one argv element, verbatim, no shell


async def test_required_variable_empty_is_unconfigured(ws: Workspace) -> None:
    settings = mcp_settings(required=["regex"])
    with pytest.raises(ExpertUnconfigured, match="regex"):
        expert("mcp", settings, ws).plan(query(ws, "how does it work"))


async def test_template_errors_are_unconfigured_and_sandboxed(ws: Workspace) -> None:
    q = query(ws, 'where is "PaymentGateway"')
    bad = mcp_settings(arguments={"pattern": "{{ nope }}"})
    with pytest.raises(ExpertUnconfigured, match="nope"):
        expert("mcp", bad, ws).plan(q)
    unsafe = mcp_settings(arguments={"pattern": "{{ question.__class__.__mro__ }}"})
    with pytest.raises(ExpertUnconfigured):
        expert("mcp", unsafe, ws).plan(q)


async def test_command_output_past_the_cap_is_flagged_and_its_cut_line_dropped(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by an exploratory run: output past max_output was cut silently (status ok, no flag) —
    and a cut inside a UTF-8 character made the whole answer malformed."""
    import functools

    from engine.experts import command

    monkeypatch.setattr(command, "run_process", functools.partial(command.run_process, max_output=4000))
    code = "import sys\nfor i in range(5000):\n    print(f'src/alpha.py:{i % 9 + 1}:é PaymentGateway {i}')"
    cmd = expert("command", {"argv": [PYTHON, "-c", code], "cwd": "project"}, ws)
    got = await call(cmd, query(ws, 'where is "PaymentGateway"'))
    assert got and all("output-truncated" in e.flags for e in got)
