"""Every request gets a receipt, malformed input included (issue 8 item 3).

* CLI: a question of bytes that are not UTF-8 (``-q $'x \\xff\\xfe'``) is answered as
  ``invalid_request`` with exit 2, and its receipt — holding the question escaped — is stored
  and verifies.
* MCP stdio, spoken raw on a real ``engine serve`` subprocess: a line that is not JSON gets a
  JSON-RPC parse error (-32700), JSON that is not a JSON-RPC message an invalid-request error
  (-32600), a question with a lone surrogate (``"x \\ud800"``) a receipted ``invalid_request``
  tool result — and the server keeps answering afterwards.
* The same lone surrogate through the official SDK client (in-process server).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from engine.serve import make_server
from engine.store import open_store
from engine.workspace import Workspace
from tests.external_support import PYTHON, copy_config, ws  # noqa: F401 - ws is a fixture

from .helpers import plain_pynacl_verify

REPLY_TIMEOUT_S = 60.0


def _stored_receipt(ws: Workspace, receipt_id: str) -> dict[str, Any]:
    body = open_store(ws.data_dir).get_receipt(receipt_id)
    assert body is not None, f"receipt {receipt_id} was not stored"
    return body


def test_cli_question_of_undecodable_bytes_is_a_receipted_invalid_request(ws: Workspace, tmp_path: Path) -> None:
    config = copy_config(tmp_path / "config")
    argv = [
        os.fsencode(PYTHON),
        b"-m",
        b"engine.cli",
        b"run",
        os.fsencode(config / "pipelines" / "router.yaml"),
        b"--workspace",
        os.fsencode(ws.roots[0]),
        b"-q",
        b"x \xff\xfe",  # not UTF-8: the shell passes these bytes as they are
        b"--format",
        b"json",
    ]
    res = subprocess.run(argv, capture_output=True, timeout=120, cwd=tmp_path)
    assert res.returncode == 2, res.stderr.decode(errors="replace")[-2000:]
    assert b"Traceback" not in res.stderr
    response = json.loads(res.stdout)
    assert response["error"]["error"] == "invalid_request" and response["error"]["field"] == "question"
    receipt = response["receipt"]
    assert receipt["status"] == "invalid_request" and receipt["request"]["question"] == "x \\xff\\xfe"
    assert plain_pynacl_verify(receipt)
    assert _stored_receipt(ws, receipt["receipt_id"]) == receipt


class _Wire:
    """Newline-delimited JSON-RPC on a real ``engine serve`` subprocess, written byte for byte."""

    def __init__(self, ws: Workspace, config: Path, cwd: Path) -> None:
        argv = [PYTHON, "-m", "engine.cli", "serve", "--workspace", str(ws.roots[0]), "--config-dir", str(config)]
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=cwd
        )
        self._buf = b""

    def send(self, line: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def reply(self) -> dict[str, Any]:
        """The next line the server writes; fails (never hangs) when none comes in time."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + REPLY_TIMEOUT_S
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([fd], [], [], max(left, 0))
            if not ready:
                pytest.fail(f"no reply within {REPLY_TIMEOUT_S} s: the server hangs")
            chunk = os.read(fd, 65536)
            if not chunk:
                pytest.fail("the server closed stdout")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        out: dict[str, Any] = json.loads(line)
        return out

    def request(self, rid: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.send(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}).encode())
        return self.reply()

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise


def test_mcp_stdio_answers_every_line(ws: Workspace, tmp_path: Path) -> None:
    wire = _Wire(ws, copy_config(tmp_path / "config"), tmp_path)
    try:
        wire.send(b"this is not json {")
        parse_error = wire.reply()
        assert parse_error["id"] is None and parse_error["error"]["code"] == -32700

        init = wire.request(
            1,
            "initialize",
            {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
        )
        assert "result" in init and init["id"] == 1
        wire.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode())

        # a lone surrogate is valid JSON text but not Unicode: escaped, receipted, invalid_request
        wire.send(
            b'{"jsonrpc":"2.0","id":2,"method":"tools/call",'
            b'"params":{"name":"router","arguments":{"question":"x \\ud800","format":"json"}}}'
        )
        answer = wire.reply()
        assert answer["id"] == 2
        result = answer["result"]
        assert result["isError"] is True and result["content"][0]["text"].startswith("invalid_request")
        receipt = result["structuredContent"]["receipt"]
        assert receipt["status"] == "invalid_request" and receipt["request"]["question"] == "x \\ud800"
        assert plain_pynacl_verify(receipt)

        wire.send(b'{"jsonrpc": "2.0", "id": 7}')  # JSON, but neither a request nor a response
        invalid = wire.reply()
        assert invalid["id"] == 7 and invalid["error"]["code"] == -32600
        wire.send(b"[1, 2")  # a torn batch
        assert wire.reply()["error"]["code"] == -32700
        # found by an exploratory run: ids that are neither a string nor an integer got no reply
        # (parsed as notifications), and nesting past Python's parser killed the server
        for bad_id in (b"true", b"1.5"):
            wire.send(b'{"jsonrpc":"2.0","id":' + bad_id + b',"method":"tools/list"}')
            bad = wire.reply()
            assert bad["id"] is None and bad["error"]["code"] == -32600
        wire.send(b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":' + b"[" * 1200 + b"]" * 1200 + b"}")
        assert wire.reply()["error"]["code"] == -32700

        tools = wire.request(3, "tools/list", {})  # still serving
        assert {"router", "receipt", "feedback"} <= {t["name"] for t in tools["result"]["tools"]}
        ok = wire.request(4, "tools/call", {"name": "router", "arguments": {"question": 'find "PaymentGateway"'}})
        assert ok["result"]["isError"] is False
    finally:
        assert wire.close() == 0
    assert _stored_receipt(ws, receipt["receipt_id"]) == receipt


@pytest.mark.anyio
async def test_sdk_client_lone_surrogate_is_a_receipted_invalid_request(ws: Workspace, tmp_path: Path) -> None:
    async with Client(make_server(copy_config(tmp_path / "config"), ws)) as client:
        answer = await client.call_tool("identifier", {"question": "x \ud800", "format": "json"})
    assert answer.is_error and answer.content[0].text.startswith("invalid_request")
    receipt = answer.structured_content["receipt"]
    assert receipt["request"]["question"] == "x \\ud800" and plain_pynacl_verify(receipt)
