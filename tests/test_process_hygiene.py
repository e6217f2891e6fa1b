"""Issue 8 item 7: a command expert dies with its whole process tree — ``setsid`` children included —
at its deadline, and when it exits leaving a child behind. The p99 budget overrun is measured by
``benchmarks/budget_overrun.py``, not here."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.proctree import kill_tagged, new_tag, tagged_env, tagged_pids
from tests.conftest import make_repo
from tests.edge_support import command_expert, config_with, leftovers, run
from tests.helpers import plain_pynacl_verify

# unique sleep lengths: a process with this command line can only be ours
SETSID_AFTER_EXIT = "31.4159"
SETSID_AT_DEADLINE = "32.7182"
STUBBORN = "33.1416"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "ws" / "solo", {"app.py": "def handler():\n    return 'hit'\n"})


def _gone(marker: str, within_s: float = 2.0) -> bool:
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        if not leftovers(marker):
            return True
        time.sleep(0.02)
    return False


def test_setsid_child_left_by_a_finished_command_is_gone_after_the_request(repo: Path, tmp_path: Path) -> None:
    code = (
        "import subprocess, sys\n"
        f"subprocess.Popen(['setsid', 'sleep', '{SETSID_AFTER_EXIT}'], stdout=sys.stdout)\n"
        "print('app.py:1:def handler():')\n"
    )
    cfg = config_with(tmp_path / "cfg", {"forker": command_expert(code)})
    result = run(cfg, repo, {"question": 'find "handler"', "intent": "identifier"})
    forker = result.response["receipt"]["per_expert"]["forker"]
    # the child held our stdout open: without the sweep the call would wait for it (32 s)
    assert forker["status"] == "ok" and forker["latency_ms"] < 5000
    assert [it["path"] for it in result.response["items"]] == ["app.py"]
    assert _gone(SETSID_AFTER_EXIT)


def test_setsid_child_of_a_command_at_its_deadline_is_killed(repo: Path, tmp_path: Path) -> None:
    code = f"import subprocess, time\nsubprocess.Popen(['setsid', 'sleep', '{SETSID_AT_DEADLINE}'])\ntime.sleep(60)\n"
    cfg = config_with(tmp_path / "cfg", {"hanger": command_expert(code, timeout_ms=800)})
    result = run(cfg, repo, {"question": 'find "handler"', "intent": "identifier"})
    assert result.response["receipt"]["per_expert"]["hanger"]["status"] == "timeout"
    assert plain_pynacl_verify(result.response["receipt"])
    assert _gone(SETSID_AT_DEADLINE)


def test_sigterm_ignoring_command_is_killed_within_the_budget(repo: Path, tmp_path: Path) -> None:
    code = (
        "import signal, subprocess, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"subprocess.Popen(['sleep', '{STUBBORN}'])\n"  # a child in the same group, ignoring nothing
        "time.sleep(60)\n"
    )
    cfg = config_with(tmp_path / "cfg", {"stubborn": command_expert(code)})
    started = time.perf_counter()
    result = run(cfg, repo, {"question": 'find "handler"', "intent": "identifier", "budget": {"latency_ms": 1000}})
    elapsed_ms = (time.perf_counter() - started) * 1000
    assert result.response["receipt"]["per_expert"]["stubborn"]["status"] == "timeout"
    # generous bound for a shared CI machine (Router set-up included); the p99 ≤ 50 ms overrun is
    # benchmarks/budget_overrun.py's job. Before the fix this took 1,309 ms on its own.
    assert elapsed_ms < 1000 + 600
    assert _gone(STUBBORN)


def test_kill_tagged_finds_a_process_that_left_the_group() -> None:
    import subprocess

    tag = new_tag()
    proc = subprocess.Popen(["setsid", "sleep", "34.5"], env=tagged_env(tag))
    try:
        # wait until setsid has exec'd sleep: a process caught mid-exec shows an empty environment
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            if Path(f"/proc/{proc.pid}/cmdline").read_bytes().startswith(b"sleep") and tagged_pids(tag):
                break
            time.sleep(0.01)
        assert tagged_pids(tag) == [proc.pid]
        assert kill_tagged(tag) >= 1
        proc.wait(timeout=2)
        assert proc.returncode == -9 and tagged_pids(tag) == []
    finally:
        proc.kill()


SERVED_SETSID = "34.1421"
SERVED_CHILD = "35.2360"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signalled_stdio_server_ends_its_experts_process_trees(repo: Path, tmp_path: Path, signum: int) -> None:
    """Found by an exploratory run: SIGTERM (and SIGHUP) killed `engine serve` on the spot and left
    a call's expert processes running under init; SIGINT left it alive and deaf. Now a signal ends
    it the way a closed stdin does: the Router closes and ends every expert's process tree."""
    code = (
        f"import subprocess, time\nsubprocess.Popen(['setsid', 'sleep', '{SERVED_SETSID}'])\n"
        f"subprocess.Popen(['sleep', '{SERVED_CHILD}'])\ntime.sleep(60)\n"
    )
    cfg = config_with(tmp_path / "cfg", {"hanger": command_expert(code, timeout_ms=60_000)})
    argv = [sys.executable, "-m", "engine.cli", "serve", "--workspace", str(repo), "--config-dir", str(cfg)]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdin is not None
    init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    for message in (
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "identifier", "arguments": {"question": '"handler"'}},
        },
    ):
        proc.stdin.write(json.dumps(message).encode() + b"\n")
        proc.stdin.flush()
    try:
        end = time.monotonic() + 30
        while not (leftovers(SERVED_SETSID) and leftovers(SERVED_CHILD)) and time.monotonic() < end:
            time.sleep(0.05)
        assert leftovers(SERVED_SETSID) and leftovers(SERVED_CHILD), "the expert never started"
        proc.send_signal(signum)
        proc.wait(timeout=20)  # it ends (SIGINT used to leave it running, deaf)
        assert _gone(SERVED_SETSID, 5.0) and _gone(SERVED_CHILD, 5.0)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in leftovers(SERVED_SETSID) + leftovers(SERVED_CHILD):
            os.kill(pid, signal.SIGKILL)


def test_a_client_that_goes_away_mid_call_ends_the_server_cleanly(repo: Path, tmp_path: Path) -> None:
    """Found by an exploratory run: with both pipes closed mid-call, `engine serve` exited 1 with an
    ExceptionGroup(BrokenPipeError) traceback. Nobody is left to answer: it ends, 0, quietly."""
    code = "import time\ntime.sleep(1.5)\nprint('app.py:1:def handler():')\n"
    cfg = config_with(tmp_path / "cfg", {"slow": command_expert(code)})
    argv = [sys.executable, "-m", "engine.cli", "serve", "--workspace", str(repo), "--config-dir", str(cfg)]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    call = {"name": "identifier", "arguments": {"question": '"handler"'}}
    for message in (
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call},
    ):
        proc.stdin.write(json.dumps(message).encode() + b"\n")
        proc.stdin.flush()
    proc.stdout.readline()  # the initialize reply: the call is in flight now
    proc.stdout.close()
    proc.stdin.close()
    try:
        assert proc.wait(timeout=30) == 0
        assert b"Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
