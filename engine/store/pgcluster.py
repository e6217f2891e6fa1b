"""A throwaway PostgreSQL cluster for tests and benchmarks (docs/adr/0016-postgresql.md).

``initdb`` into a temporary folder, ``postgres`` listening on a unix socket in that folder (and,
when asked, on a free loopback port), trust authentication for the ``postgres`` role, stopped and
deleted by :meth:`PgCluster.close`. PostgreSQL refuses to run as root, so as root (CI) the
cluster runs as the unprivileged ``nobody`` user and its folder is handed to that user.

Binaries come from, in order: ``$ENGINE_PG_BIN``; Debian's ``postgresql`` package
(``/usr/lib/postgresql/<version>/bin``, what ``make postgres`` installs); the ``pgserver``
wheel's bundled server (the only offline source of pgvector here: Debian 12 has no pgvector
package). :func:`find_bin` with ``vector=True`` takes only a server that has pgvector.

Never used on the hot path; a production store is a server someone runs (``ENGINE_STORE``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import StoreError

DEBIAN_ROOT = Path("/usr/lib/postgresql")
#: the unprivileged user a root process runs the cluster as (postgres refuses root)
RUN_AS = "nobody"


def _version_key(p: Path) -> tuple[int, ...]:
    return tuple(int(x) for x in p.parent.name.split(".") if x.isdigit()) or (0,)


def candidate_bins() -> list[Path]:
    """Every server bin dir found, in preference order."""
    out: list[Path] = []
    env = os.environ.get("ENGINE_PG_BIN")
    if env:
        out.append(Path(env))
    if DEBIAN_ROOT.is_dir():
        debian = sorted(DEBIAN_ROOT.glob("*/bin"), key=_version_key, reverse=True)
        out += [b for b in debian if (b / "initdb").is_file()]
    spec = importlib.util.find_spec("pgserver")
    if spec is not None and spec.submodule_search_locations:
        bundled = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
        if (bundled / "initdb").is_file():
            out.append(bundled)
    return out


def has_vector(bin_dir: Path) -> bool:
    """Does this server ship the pgvector extension?"""
    try:
        share = subprocess.run(
            [str(bin_dir / "pg_config"), "--sharedir"], capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return False
    return (Path(share) / "extension" / "vector.control").is_file()


def find_bin(*, vector: bool = False) -> Path | None:
    """The first usable server bin dir (with pgvector when ``vector``), or None."""
    for b in candidate_bins():
        if (b / "initdb").is_file() and (b / "pg_ctl").is_file() and (not vector or has_vector(b)):
            return b
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PgCluster:
    """One running throwaway cluster; ``url`` is a libpq URL for its ``postgres`` database."""

    bin_dir: Path
    root: Path
    port: int
    tcp: bool = False
    run_as: str | None = None
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.root / "server.log"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def socket_dir(self) -> Path:
        return self.root

    @property
    def url(self) -> str:
        if self.tcp:
            return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        return f"postgresql://postgres@/postgres?host={self.socket_dir}&port={self.port}"

    def _run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        kw: dict[str, object] = {}
        if self.run_as:
            kw = {"user": self.run_as, "group": pwd.getpwnam(self.run_as).pw_gid}
        env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
        proc: subprocess.CompletedProcess[str] = subprocess.run(
            [str(self.bin_dir / args[0]), *args[1:]],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=self.root,
            check=False,
            **kw,  # type: ignore[call-overload]  # user/group are keyword-only in subprocess.run
        )
        return proc

    def _check(self, proc: subprocess.CompletedProcess[str], what: str) -> None:
        if proc.returncode != 0:
            tail = ""
            with contextlib.suppress(OSError):
                tail = self.log.read_text()[-1500:]
            raise StoreError(
                f"PostgreSQL {what} failed ({self.bin_dir}): {proc.stderr.strip()[-800:]} {tail}",
                fix="install the server: `make postgres` (Debian) or `pip install -e '.[pgserver]'`",
            )

    def init(self) -> None:
        proc = self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-locale")
        self._check(proc, "initdb")
        conf = self.data / "postgresql.conf"
        listen = "127.0.0.1" if self.tcp else ""
        extra = (
            f"\nlisten_addresses = '{listen}'\nport = {self.port}\nunix_socket_directories = '{self.socket_dir}'\n"
            "max_connections = 300\nshared_buffers = 64MB\n"
        )
        with open(conf, "a") as fh:
            fh.write(extra)

    def start(self) -> None:
        proc = self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start")
        self._check(proc, "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def restart(self) -> None:
        proc = self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-m", "fast", "-w", "restart")
        self._check(proc, "restart")

    def running(self) -> bool:
        return self._run("pg_ctl", "-D", str(self.data), "status").returncode == 0

    def close(self) -> None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


def start_cluster(*, bin_dir: Path | None = None, vector: bool = False, tcp: bool = False) -> PgCluster:
    """Create and start a throwaway cluster (as ``nobody`` when this process is root).

    Raises:
        StoreError: no server binaries were found, or the server did not start.
    """
    found = bin_dir or find_bin(vector=vector)
    if found is None:
        what = "a PostgreSQL server with pgvector" if vector else "a PostgreSQL server"
        raise StoreError(
            f"{what} was not found", fix="`make postgres` (Debian's postgresql) or `pip install -e '.[pgserver]'`"
        )
    root = Path(tempfile.mkdtemp(prefix="engine-pg-"))
    run_as = RUN_AS if os.geteuid() == 0 else None
    if run_as:
        entry = pwd.getpwnam(run_as)
        os.chown(root, entry.pw_uid, entry.pw_gid)
    os.chmod(root, 0o700)
    cluster = PgCluster(found, root, free_port(), tcp=tcp, run_as=run_as)
    try:
        cluster.init()
        cluster.start()
    except BaseException:
        cluster.close()
        raise
    return cluster


def wait_ready(url: str, timeout_s: float = 30.0) -> None:
    """Wait until the server at ``url`` accepts connections (after a restart)."""
    import psycopg

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with psycopg.connect(url, connect_timeout=2):
                return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
