"""The log of record under a file store: per-process spool files and compacted segments.

* ``<data>/spool/p<pid>_<nonce>_<host>.jsonl``: one per writing process, ``O_APPEND``, 0600, one
  JSON line ``{"table": ..., "row": {...}}`` per record; receipts and feedback are fsync'ed
  before the write returns. No lock: no two processes share a file.
* ``<data>/log/seg-<utc>-<nonce>.jsonl.gz``: immutable segments; compaction folds the spools of
  dead, fully ingested writers into one (docs/adr/0007-receipt-chain-and-log.md), dropping cache
  rows, which are derived data.

Only whole lines count: a line being written (or torn by a crash) ends without ``\\n`` and is
read by nobody until it is complete. A write that fails is cut back off the file, so a later
line never lands glued to a fragment.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import secrets
import socket
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from ..datadir import fsync_dir, private_dir
from ..errors import StoreError

Record = tuple[str, dict[str, Any]]
#: tables whose rows are derived and short-lived: not kept past compaction
EPHEMERAL = frozenset({"cache"})


def encode(table: str, row: dict[str, Any]) -> bytes:
    """One spool line. orjson (the receipt is spooled on the hot path); json for what it refuses
    (keys that are not strings, ints past 64 bits). Readers parse it, so key order is free."""
    try:
        return orjson.dumps({"table": table, "row": row}, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError:  # orjson.JSONEncodeError
        return (json.dumps({"table": table, "row": row}, ensure_ascii=False, separators=(",", ":")) + "\n").encode()


def parse(data: bytes) -> tuple[list[Record], int]:
    """Records of whole lines; returns them and the count of lines that were not records."""
    out: list[Record] = []
    bad = 0
    for raw in data.splitlines():
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
            table, row = rec["table"], rec["row"]
        except (ValueError, KeyError, TypeError):
            bad += 1
            continue
        if isinstance(table, str) and isinstance(row, dict):
            out.append((table, row))
        else:
            bad += 1
    return out, bad


class SpoolWriter:
    """This process's spool file, opened on first write (and again after a fork)."""

    def __init__(self, spool_dir: Path, before_create: Callable[[], object]) -> None:
        self.spool_dir = spool_dir
        self._before_create = before_create
        self.path: Path | None = None
        self._fd = -1
        self._pid = -1
        self._mutex = threading.Lock()

    def _open(self) -> int:
        if self._fd < 0 or self._pid != os.getpid():
            self._before_create()
            private_dir(self.spool_dir)
            name = f"p{os.getpid()}_{secrets.token_hex(4)}_{socket.gethostname()}.jsonl"
            path = self.spool_dir / name
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o600)
            fsync_dir(self.spool_dir)  # the file's name must survive a crash, not only its bytes
            self.path, self._pid = path, os.getpid()
        return self._fd

    def append(self, lines: Iterable[bytes], *, durable: bool) -> None:
        """Append whole lines; with ``durable``, fsync before returning.

        Raises:
            StoreError: the spool cannot be written (disk full, permissions): nothing was added.
        """
        data = b"".join(lines)
        if not data:
            return
        with self._mutex:
            start = -1
            try:
                fd = self._open()
                start = os.lseek(fd, 0, os.SEEK_END)
                written = os.write(fd, data)
                if written != len(data):
                    raise OSError(f"short write ({written} of {len(data)} bytes)")
                if durable:
                    os.fsync(fd)
            except OSError as exc:
                if start >= 0:  # cut the fragment: the next line must start on a fresh line
                    with contextlib.suppress(OSError):
                        os.ftruncate(self._fd, start)
                raise StoreError(
                    f"cannot write to the store spool {self.spool_dir}: {exc}",
                    fix="free disk space or fix the data dir's permissions",
                ) from exc

    def fsync(self) -> None:
        """Make every line appended so far durable.

        Raises:
            StoreError: the disk refused (the lines stay written, in the page cache).
        """
        with self._mutex:
            if self._fd >= 0 and self._pid == os.getpid():
                try:
                    os.fsync(self._fd)
                except OSError as exc:
                    raise StoreError(
                        f"cannot fsync the store spool {self.spool_dir}: {exc}", fix="check the disk (dmesg)"
                    ) from exc

    def close(self) -> None:
        with self._mutex:
            if self._fd >= 0 and self._pid == os.getpid():
                with contextlib.suppress(OSError):
                    os.close(self._fd)
            self._fd = -1


# ---------------------------------------------------------------------------------- reading


def spool_files(spool_dir: Path) -> list[Path]:
    return sorted(spool_dir.glob("*.jsonl")) if spool_dir.exists() else []


def segment_files(log_dir: Path) -> list[Path]:
    return sorted(log_dir.glob("seg-*.jsonl.gz")) if log_dir.exists() else []


def read_spool(path: Path, start: int = 0) -> tuple[list[Record], int, int]:
    """Whole lines of a spool file from byte ``start``: (records, end offset, unparseable lines)."""
    with open(path, "rb") as fh:
        fh.seek(start)
        data = fh.read()
    end = start + data.rfind(b"\n") + 1
    records, bad = parse(data[: end - start])
    return records, end, bad


def read_segment(path: Path) -> tuple[list[Record], int]:
    """All records of a segment; a damaged one yields the whole lines before the damage, plus one
    bad count."""
    chunks: list[bytes] = []
    bad = 0
    try:
        with gzip.open(path, "rb") as fh:
            while chunk := fh.read(1 << 16):
                chunks.append(chunk)
    except (OSError, EOFError, zlib.error):
        bad = 1
    data = b"".join(chunks)
    if bad:
        data = data[: data.rfind(b"\n") + 1]
    records, more = parse(data)
    return records, bad + more


def iter_log(spool_dir: Path, log_dir: Path) -> Iterator[Record]:
    """Every record of the log of record: segments in name (time) order, then spools."""
    for seg in segment_files(log_dir):
        yield from read_segment(seg)[0]
    for f in spool_files(spool_dir):
        with contextlib.suppress(FileNotFoundError):  # compacted away while we listed
            yield from read_spool(f)[0]


# ---------------------------------------------------------------------------------- compaction


def write_segment(log_dir: Path, records: Iterable[Record]) -> Path:
    """Write ``records`` (ephemeral tables dropped) as one new immutable segment, atomically."""
    private_dir(log_dir)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    path = log_dir / f"seg-{stamp}-{secrets.token_hex(4)}.jsonl.gz"
    tmp = log_dir / f".{path.name}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) as gz:
            for table, row in records:
                if table not in EPHEMERAL:
                    gz.write(encode(table, row))
            gz.close()
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp, path)
        fsync_dir(log_dir)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return path


def owner_alive(spool_name: str) -> bool:
    """Is the process that writes this spool file still running (on this host)?"""
    try:
        pid_part, _nonce, host = spool_name.removesuffix(".jsonl").split("_", 2)
        pid = int(pid_part[1:])
    except ValueError:
        return False
    if host != socket.gethostname():
        return True  # another machine's file: not ours to judge
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
