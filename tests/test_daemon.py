"""``engine run`` through the per-workspace daemon (issue 10 item 4, docs/adr/0014-cli-daemon.md).

Real processes throughout: the console script's module (``python -m engine.launch``), a real
daemon on a real Unix socket, real indexes and receipts; crashes are real ``SIGKILL``s.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import typer.main

from engine.cli import app
from engine.daemon import Address
from engine.daemon.client import NO_VALUE, daemons, stop_all, workspace_roots
from tests.conftest import git
from tests.helpers import plain_pynacl_verify

LAUNCH = [sys.executable, "-m", "engine.launch"]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ENGINE_NO_DAEMON", "ENGINE_CONFIG_DIR")}
    return {**env, "ENGINE_DAEMON_IDLE_S": "120", **extra}


def engine(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*LAUNCH, *args], capture_output=True, text=True, cwd=cwd, env=env or _env(), timeout=300)


def _pids(data_dir: Path) -> set[int]:
    return {int(d["pid"]) for d in daemons(data_dir) if d["alive"]}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purposes
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().split(") ", 1)[1][0] != "Z"


def _wait(predicate: object, within_s: float = 15.0) -> bool:
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def ws(indexed: Path, config_dir: Path) -> Iterator[Path]:
    """An indexed two-repo workspace whose .engine.yaml points at a private config copy; every
    daemon it gets is stopped (and, if need be, killed) afterwards."""
    (indexed / ".engine.yaml").write_text(f"version: 1\nconfig_dir: {config_dir}\n")
    yield indexed
    data_dir = indexed / ".engine"
    pids = {int(d["pid"]) for d in daemons(data_dir)}
    stop_all(data_dir)
    for pid in pids:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def ask(ws: Path, *extra: str, cwd: Path | None = None, env: dict[str, str] | None = None, q: str = "RetryPolicy"):
    return engine("run", "router", "-w", str(ws), "-q", q, "-f", "json", "--no-cache", *extra, cwd=cwd or ws, env=env)


def _same_answer(a: dict, b: dict) -> None:
    assert [(i["project"], i["path"], i["range"], i["tier"], i["sources"]) for i in a["items"]] == [
        (i["project"], i["path"], i["range"], i["tier"], i["sources"]) for i in b["items"]
    ]
    ra, rb = a["receipt"], b["receipt"]
    assert sorted(ra) == sorted(rb)
    for key in ("config", "config_version", "pipeline", "classifier", "experts_selected", "request_hash", "status"):
        assert ra[key] == rb[key], key
    assert plain_pynacl_verify(ra) and plain_pynacl_verify(rb)


# ---------------------------------------------------------------------------------------------- client


def test_the_clients_option_table_matches_the_run_command() -> None:
    """The client skips option values by knowing which options take none: it must match `run`."""
    command = typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]
    flags = {o for p in command.params if getattr(p, "is_flag", False) for o in p.opts}
    assert flags | {"--help"} == NO_VALUE


@pytest.mark.parametrize(
    "args,expected",
    [
        (["router", "-q", "x"], ["."]),
        (["router", "-q", "-w", "-w", "a"], ["a"]),  # "-w" as the question's text
        (["router", "--workspace=a", "-wb", "--workspace", "c"], ["a", "b", "c"]),
        (["router", "--no-cache", "-w", "a", "-f", "json"], ["a"]),
        (["router", "--", "-w", "b"], ["."]),
    ],
)
def test_the_client_finds_the_workspace_like_the_command(tmp_path: Path, args: list[str], expected: list[str]) -> None:
    for name in "abc":
        (tmp_path / name).mkdir()
    assert workspace_roots(args, str(tmp_path)) == [str((tmp_path / e).resolve()) for e in expected]
    assert workspace_roots(["router", "-w", "missing"], str(tmp_path)) is None


# ---------------------------------------------------------------------------------------------- answers


def test_output_and_receipts_are_the_same_with_and_without_the_daemon(ws: Path, tmp_path: Path) -> None:
    first = ask(ws, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert _pids(ws / ".engine"), "the first call starts a daemon"
    warm = ask(ws, cwd=tmp_path)
    alone = ask(ws, "--no-daemon", cwd=tmp_path)
    off = ask(ws, cwd=tmp_path, env=_env(ENGINE_NO_DAEMON="1"))
    assert warm.returncode == alone.returncode == off.returncode == 0
    assert warm.stderr == alone.stderr == ""
    for other in (first, alone, off):
        _same_answer(json.loads(warm.stdout), json.loads(other.stdout))
    assert json.loads(warm.stdout)["receipt"]["config"]["source"] == "workspace"
    for fmt in ("markdown", "toon"):
        a = engine("run", "router", "-w", str(ws), "-q", "RetryPolicy", "-f", fmt, cwd=tmp_path)
        b = engine("run", "router", "-w", str(ws), "-q", "RetryPolicy", "-f", fmt, "--no-daemon", cwd=tmp_path)
        assert a.returncode == b.returncode == 0
        assert a.stdout.splitlines()[:-1] == b.stdout.splitlines()[:-1]  # all but the receipt line (its id)
        assert a.stdout.splitlines()[-1].split()[2:5] == b.stdout.splitlines()[-1].split()[2:5]


@pytest.mark.parametrize(
    "args,code",
    [
        (["run", "nope", "-q", "x"], 2),  # unknown pipeline: before any answer
        (["run", "router", "-q", "   "], 2),  # invalid request: receipted
        (["run", "router", "-q", "x", "--scope-project", "ghost"], 2),
        (["run", "router", "-q", "x", "-f", "yaml"], 2),  # a usage error: click prints it
        (["run", "router"], 2),
    ],
)
def test_errors_are_the_same_with_and_without_the_daemon(ws: Path, args: list[str], code: int) -> None:
    with_daemon = engine(*args, "-w", str(ws), cwd=ws)
    alone = engine(*args, "-w", str(ws), "--no-daemon", cwd=ws)
    assert with_daemon.returncode == alone.returncode == code
    assert with_daemon.stderr == alone.stderr
    if with_daemon.stdout:
        a, b = with_daemon.stdout.splitlines(), alone.stdout.splitlines()
        assert a[:-1] == b[:-1] and len(a) == len(b)


def test_the_daemon_is_private_and_reports_its_status(ws: Path) -> None:
    assert ask(ws).returncode == 0
    data_dir = ws / ".engine"
    (info,) = daemons(data_dir)
    sock = Path(info["socket"])
    assert stat.S_ISSOCK(sock.stat().st_mode) and stat.S_IMODE(sock.stat().st_mode) == 0o600
    assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700
    assert info["alive"] and info["served"] >= 1 and info["roots"] == [str(ws)]
    status = engine("daemon", "status", "-w", str(ws), "-f", "json", cwd=ws)
    assert json.loads(status.stdout)[0]["pid"] == info["pid"]
    assert "PID" in engine("daemon", "status", "-w", str(ws), cwd=ws).stdout


def test_no_daemon_starts_none(ws: Path) -> None:
    assert ask(ws, "--no-daemon").returncode == 0
    assert ask(ws, env=_env(ENGINE_NO_DAEMON="1")).returncode == 0
    assert not (ws / ".engine" / "daemon").exists() or not daemons(ws / ".engine")


def test_several_shells_at_once_start_one_daemon(ws: Path) -> None:
    questions = ["RetryPolicy", "FileSystemStorage", "upload a file", "retry backoff", "UploadClient", "storage"]
    with ThreadPoolExecutor(len(questions)) as pool:
        results = list(pool.map(lambda q: ask(ws, q=q), questions))
    assert [r.returncode for r in results] == [0] * len(questions), [r.stderr for r in results]
    for r in results:
        assert plain_pynacl_verify(json.loads(r.stdout)["receipt"])
    assert len(daemons(ws / ".engine")) == 1
    assert daemons(ws / ".engine")[0]["served"] == len(questions)


def test_a_killed_daemon_is_replaced(ws: Path) -> None:
    assert ask(ws).returncode == 0
    (old,) = _pids(ws / ".engine")
    os.kill(old, signal.SIGKILL)
    assert _wait(lambda: not _alive(old))
    (info,) = daemons(ws / ".engine")  # its files are left behind: a stale socket, a dead pid
    assert not info["alive"] and Path(info["socket"]).exists()
    again = ask(ws)
    assert again.returncode == 0 and plain_pynacl_verify(json.loads(again.stdout)["receipt"])
    (new,) = _pids(ws / ".engine")
    assert new != old


def test_a_stale_socket_nobody_listens_on_is_replaced(ws: Path) -> None:
    addr = Address.of([str(ws)], str(ws / ".engine"))
    Path(addr.folder).mkdir(mode=0o700, parents=True)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(addr.socket_path)
    dead.close()  # the file stays: connect() is refused
    Path(addr.info_path).write_text(json.dumps({"pid": 999999, "socket": addr.socket_path, "key": addr.key}))
    res = ask(ws)
    assert res.returncode == 0, res.stderr
    assert _pids(ws / ".engine") and 999999 not in _pids(ws / ".engine")


def test_a_new_engine_version_replaces_the_daemon(ws: Path) -> None:
    assert ask(ws).returncode == 0
    (old,) = _pids(ws / ".engine")
    init = Path(sys.modules["engine"].__file__ or "")
    now = time.time_ns()
    os.utime(init, ns=(now, now))  # the code changed: a new fingerprint
    res = ask(ws)
    assert res.returncode == 0, res.stderr
    assert _wait(lambda: not _alive(old))
    (new,) = _pids(ws / ".engine")
    assert new != old


def test_the_daemon_stops_when_idle(ws: Path) -> None:
    assert ask(ws, env=_env(ENGINE_DAEMON_IDLE_S="1")).returncode == 0
    (pid,) = _pids(ws / ".engine")
    assert _wait(lambda: not _alive(pid), within_s=20)
    assert not list((ws / ".engine" / "daemon").glob("*.sock"))
    assert not daemons(ws / ".engine")


def test_the_daemon_follows_config_edits_like_serve(ws: Path, config_dir: Path) -> None:
    before = json.loads(ask(ws).stdout)["receipt"]["config_version"]
    priors = config_dir / "priors.yaml"
    priors.write_text(priors.read_text().replace("k: 60", "k: 61"))
    after = json.loads(ask(ws).stdout)["receipt"]
    assert after["config_version"] != before
    assert after["config_version"] == json.loads(ask(ws, "--no-daemon").stdout)["receipt"]["config_version"]
    priors.write_text(priors.read_text().replace("k: 61", "k: -3"))  # a bad edit: exit 2 like in-process
    bad, alone = ask(ws), ask(ws, "--no-daemon")
    assert bad.returncode == alone.returncode == 2 and bad.stderr == alone.stderr
    assert str(priors) in json.loads(bad.stderr)["message"]


def test_the_daemon_follows_index_changes(ws: Path) -> None:
    def bm25_paths() -> set[str]:
        res = ask(ws, "--intent", "conceptual", q="QuantumFluxCapacitor")
        items = json.loads(res.stdout)["items"]
        return {i["path"] for i in items if any(s["expert"] == "bm25" for s in i["sources"])}

    assert "alpha/flux.py" not in bm25_paths()  # the daemon is up, with bm25's index open
    alpha = ws / "alpha"
    (alpha / "alpha" / "flux.py").write_text("class QuantumFluxCapacitor:\n    pass\n")
    git(alpha, "add", "-A")
    git(alpha, "commit", "-qm", "flux")
    assert engine("index", "-w", str(ws), "--only", "bm25", cwd=ws).returncode == 0
    assert "alpha/flux.py" in bm25_paths()


def test_a_data_dir_too_long_for_a_unix_socket_still_gets_a_daemon(ws: Path, tmp_path: Path) -> None:
    home = tmp_path / ("d" * 60) / ("e" * 60)
    res = ask(ws, env=_env(ENGINE_HOME=str(home)))
    assert res.returncode == 0, res.stderr
    try:
        (info,) = daemons(home)
        assert info["alive"] and not info["socket"].startswith(str(home))
        assert len(info["socket"]) <= 100 and stat.S_IMODE(os.stat(Path(info["socket"]).parent).st_mode) == 0o700
    finally:
        stop_all(home)


def test_the_client_path_imports_no_engine_machinery(ws: Path) -> None:
    """What makes a call cheap: with the daemon up, the client imports none of the engine's stack."""
    assert ask(ws).returncode == 0
    res = subprocess.run(
        [sys.executable, "-X", "importtime", *LAUNCH[1:], "run", "router", "-w", str(ws), "-q", "RetryPolicy"],
        capture_output=True,
        text=True,
        cwd=ws,
        env=_env(),
        timeout=120,
    )
    assert res.returncode == 0
    imported = {line.split("|")[-1].strip() for line in res.stderr.splitlines() if line.startswith("import time:")}
    assert "engine.daemon.client" in imported
    heavy = {"typer", "anyio", "engine.cli", "engine.runtime", "engine.spec", "yaml", "jsonschema", "duckdb"}
    heavy |= {"json", "hashlib", "dataclasses", "typing", "subprocess"}  # ~1-10 ms each on this path
    assert not heavy & imported, heavy & imported


# ------------------------------------------------------------------ found by an exploratory run


def test_the_client_talks_only_to_a_daemon_of_its_own_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A long data dir's socket lives in a shared /tmp folder: another local user who made the socket
    first read every question and answered anything. The client checks the listener's uid."""
    from engine.daemon import client

    path = str(tmp_path / "s.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    try:
        conn = client.connect(path)
        assert conn is not None and client.peer_uid(conn) == os.getuid()
        conn.close()
        me = os.getuid()
        monkeypatch.setattr(client.os, "getuid", lambda: me + 4242)  # as another user sees it
        assert client.connect(path) is None
    finally:
        server.close()


def test_a_live_daemon_that_does_not_listen_is_not_waited_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its life lock held, its socket gone (removed, or bound under another XDG_RUNTIME_DIR): each
    call waited the whole 30 s start timeout before answering in-process."""
    import fcntl

    from engine.daemon import client

    monkeypatch.setattr(client, "ACK_TIMEOUT_S", 0.3)
    addr = Address.of([str(tmp_path)], str(tmp_path / ".engine"))
    (tmp_path / ".engine" / "daemon").mkdir(parents=True, mode=0o700)
    holder = os.open(addr.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(holder, fcntl.LOCK_EX)  # "a live daemon"
    try:
        started = time.monotonic()
        assert client.start(addr) is None
        assert time.monotonic() - started < 3.0
    finally:
        os.close(holder)
    other = Address.of([str(tmp_path)], str(tmp_path / ".engine"), env={**os.environ, "XDG_RUNTIME_DIR": "/elsewhere"})
    assert other.key != addr.key  # the runtime dir can hold the socket: it names its own daemon


def test_an_acknowledged_call_that_is_never_answered_does_not_hang_the_shell(tmp_path: Path) -> None:
    """A stalled daemon (SIGSTOP, a deadlock) acknowledged and then held the client for ever."""
    import threading

    from engine.daemon import client, frame

    assert client.answer_timeout(["-q", "x", "--budget-ms", "500"]) == pytest.approx(0.5 + client.ANSWER_GRACE_S)
    assert client.answer_timeout(["--budget-ms=2000"]) == pytest.approx(2 + client.ANSWER_GRACE_S)
    assert client.answer_timeout(["-q", "x"]) == client.ANSWER_TIMEOUT_S
    path = str(tmp_path / "s.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    held: list[socket.socket] = []

    def ack_and_stall() -> None:
        peer, _ = server.accept()
        peer.recv(1 << 16)
        peer.sendall(frame({"ack": True}))
        held.append(peer)  # and never answers

    threading.Thread(target=ack_and_stall, daemon=True).start()
    conn = client.connect(path)
    assert conn is not None
    started = time.monotonic()
    with pytest.raises(client.Stalled):
        client.call(conn, {"op": "run"}, timeout_s=0.3)
    assert time.monotonic() - started < 3.0
    conn.close()
    server.close()


def test_a_closed_stdout_ends_the_client_quietly(tmp_path: Path) -> None:
    """`engine run … | head -c1` through the daemon: a BrokenPipeError traceback (in-process: quiet)."""
    code = "import sys; from engine.daemon import emit; sys.stdin.read(); emit('x' * 50_000_000, '')"
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the answer is printed
    proc.stdin.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=30) == 1 and b"Traceback" not in err and b"BrokenPipe" not in err


def test_an_empty_folder_at_the_socket_path_does_not_stop_the_daemon(ws: Path) -> None:
    """Every call started a daemon that died on IsADirectoryError, and answered in-process."""
    addr = Address.of([str(ws)], str(ws / ".engine"))
    Path(addr.socket_path).mkdir(parents=True)
    res = ask(ws)
    assert res.returncode == 0, res.stderr
    assert _pids(ws / ".engine") and stat.S_ISSOCK(os.stat(addr.socket_path).st_mode)
