"""Router replicas for ``engine bench --load``: N ``engine serve --transport http`` processes over
one workspace, one data dir (index, signing key) and one PostgreSQL store (docs/scale.md).

A replica holds nothing that matters only in its memory: every receipt is committed to the
store before its answer returns (each replica is its own chain writer), feedback goes straight to
the store, and the answer cache a replica keeps in memory is only a cache. Killing one loses no
answered request's receipt. Loopback only; every process here is ours and is ended by its pid.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import EvalError
from ..store.pgcluster import free_port


@dataclass
class Replica:
    index: int
    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no shutdown hook runs, as when a machine dies."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if not self.alive():
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def start_replicas(
    n: int,
    *,
    workspaces: list[Path],
    config_dir: Path,
    data_dir: Path,
    store_url: str,
    log_dir: Path,
    first_index: int = 0,
    timeout_s: float = 180.0,
) -> list[Replica]:
    """Start ``n`` replicas and wait until each accepts connections.

    Raises:
        EvalError: a replica exited or did not listen within ``timeout_s`` (its log tail says why).
    """
    env = {**os.environ, "ENGINE_STORE": store_url, "ENGINE_HOME": str(data_dir)}
    log_dir.mkdir(parents=True, exist_ok=True)
    out: list[Replica] = []
    for i in range(first_index, first_index + n):
        port = free_port()
        log = log_dir / f"replica-{i}.log"
        cmd = [sys.executable, "-m", "engine.cli", "serve", "--transport", "http", "--port", str(port)]
        cmd += ["--config-dir", str(config_dir)]
        for w in workspaces:
            cmd += ["--workspace", str(w)]
        with open(log, "wb") as fh:
            proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        out.append(Replica(i, port, proc, log))
    deadline = time.monotonic() + timeout_s
    for r in out:
        while not _listening(r.port):
            if not r.alive() or time.monotonic() > deadline:
                for other in out:
                    other.stop()
                tail = r.log.read_text(errors="replace")[-1500:]
                raise EvalError(f"replica {r.index} did not start: {tail}")
            time.sleep(0.2)
    return out
