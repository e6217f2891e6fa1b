"""run_process against real processes: output, exit codes, and no child left behind at a deadline —
with the exit reported by a pidfd (Linux) and by a worker thread where there is none."""

from __future__ import annotations

import os
import time
from pathlib import Path

import anyio
import pytest

from engine.errors import ExpertFailed
from engine.experts import base
from engine.experts.base import run_process


@pytest.fixture(params=["pidfd", "thread"])
def exit_watch(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "thread":
        monkeypatch.setattr(base, "_pidfd", lambda pid: None)
    elif base._pidfd(os.getpid()) is None:
        pytest.skip("no pidfd on this kernel")
    return str(request.param)


async def _gone(pid: int, within_s: float = 3.0) -> bool:
    """The process no longer exists: killed *and* reaped (a zombie still answers kill(pid, 0))."""
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        await anyio.sleep(0.02)  # the loop runs the pidfd's callback, which reaps
    return False


def test_output_and_exit_codes(exit_watch: str) -> None:
    async def main() -> None:
        res = await run_process(["sh", "-c", "echo out; echo err >&2; exit 3"], expert="t", ok_codes=(0, 3))
        assert (res.returncode, res.stdout, res.stderr) == (3, b"out\n", b"err\n")
        with pytest.raises(ExpertFailed, match="exited 3: err"):
            await run_process(["sh", "-c", "echo err >&2; exit 3"], expert="t")
        chunks: list[bytes] = []
        await run_process(["sh", "-c", "printf 'a\\nb\\n'"], expert="t", on_stdout=lambda c: chunks.append(c) and None)
        assert b"".join(chunks) == b"a\nb\n"

    anyio.run(main)


def test_a_deadline_kills_and_reaps_the_child(exit_watch: str, tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"

    async def main() -> None:
        with anyio.move_on_after(0.5):
            await run_process(["sh", "-c", f"echo $$ > {pidfile}; exec sleep 30"], expert="t")
        pid = int(pidfile.read_text())
        assert await _gone(pid), f"process {pid} outlived its deadline"

    anyio.run(main)


def test_a_missing_binary_is_unavailable(exit_watch: str) -> None:
    from engine.errors import ExpertUnavailable

    async def main() -> None:
        with pytest.raises(ExpertUnavailable, match="binary not found"):
            await run_process(["/nonexistent/tool"], expert="t")

    anyio.run(main)
