"""The source of truth for what an expert must do.

An expert is one search tool behind one small protocol, shaped like an httpx transport:

* ``__init__(spec, env)`` is cheap and does no I/O (config only).
* ``plan(query) -> dict`` is pure: it says exactly what the expert will be asked (the receipt's
  ``sub_queries``). Raise :class:`ExpertUnconfigured` when the question gives it nothing to ask.
  What only ``search`` can know (e.g. the files a named file resolved to: :mod:`.git`) it may
  add to the plan under new keys; the receipt records the plan as ``search`` left it.
* ``async search(query, plan) -> list[Evidence]`` does the work. It returns the expert's own
  ranked list (best first, at most ``query.limit``), items carrying only content the expert
  produced. Failures are raised as :class:`~engine.errors.ExpertError` subclasses; anything
  else is mapped to ``internal`` by the fan-out, in one place (:func:`expert_errors`).
* ``freshness(query) -> dict | None``: for index-backed experts, the index's state
  (indexed sha vs HEAD, files pending) for the receipt; ``None`` for live experts.
* ``async aclose()`` releases processes and sessions.

Deadlines are enforced by the caller (``anyio.fail_after``, per-expert deadlines from
:mod:`engine.deadlines`). An expert whose tool can hand back what it has so far declares
``partial_results = True`` and overrides ``search_partial(query, plan, found)``: it registers on
``found`` (a :class:`Found`, one per call) how to rank what it has found so far, and when the
deadline cuts the search the fan-out answers with ``found.collect()``, each item flagged
``partial`` and the expert's status ``partial``. The fan-out always calls ``search_partial``;
its default is ``search``. Experts that spawn processes use
:func:`run_process`, which kills the whole process tree — ``setsid`` children included
(:mod:`engine.proctree`) — when cancelled, and sweeps any descendant left when the process exits.

**An adapter declares what it is**, as class attributes the engine reads instead of adapter
names:

* ``adapter`` — its short name in experts.yaml (and its module's name: ``engine.experts.<adapter>``);
* ``settings_schema`` — the JSON Schema of its experts.yaml ``settings:``, checked when the
  config loads (a bad setting is a :class:`~engine.errors.SchemaError` naming file, line and path);
* capabilities: ``reads_history`` (searches version-control history; the gate runs it only with
  a git repository in scope), ``local_files`` (reads the workspace's files on this machine),
  ``live`` (sees files as they are now), ``needs_index`` (answers from an index ``engine index``
  builds), ``partial_results`` (answers with what it found so far when its deadline comes). An
  index-backed adapter subclasses :class:`~engine.experts.indexed.IndexedExpert`, which sets
  ``needs_index`` and adds ``indexer()`` and ``accepts(file)``.

An expert's default ``freshness`` (experts.yaml) follows from these: ``index`` when it needs an
index, ``live`` when it is live, ``unknown`` otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import sqlite3
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import anyio

from .. import proctree
from ..errors import (
    ExpertError,
    ExpertFailed,
    ExpertOutputError,
    ExpertTimeout,
    ExpertUnavailable,
    MissingDependency,
)
from ..spec import ExpertSpec
from ..types import Evidence, Query
from ..workspace import Workspace


@dataclass(frozen=True, slots=True)
class ExpertEnv:
    """What every expert may know about the world: the workspace and where its data lives."""

    workspace: Workspace

    @property
    def data_dir(self) -> Path:
        return self.workspace.data_dir

    def index_dir(self, expert: str) -> Path:
        return self.workspace.data_dir / "index" / expert


def settings(properties: Mapping[str, Any], *, required: Sequence[str] = ()) -> dict[str, Any]:
    """A ``settings_schema``: an object with exactly these properties (a typo is an error, not a default)."""
    schema: dict[str, Any] = {"type": "object", "additionalProperties": False, "properties": dict(properties)}
    if required:
        schema["required"] = list(required)
    return schema


POSITIVE_INT: Mapping[str, Any] = {"type": "integer", "minimum": 1}
#: the flag on items an expert handed back when its deadline cut the search
PARTIAL = "partial"
#: bytes read from a child's pipe per call
CHUNK = 65536


class Found:
    """What an expert with ``partial_results`` has found so far in one call: the expert registers
    how to rank it (:meth:`keep`), the fan-out asks for it when the deadline cuts the search."""

    __slots__ = ("_snapshot",)

    def __init__(self) -> None:
        self._snapshot: Callable[[], list[Evidence]] | None = None

    def keep(self, snapshot: Callable[[], list[Evidence]]) -> None:
        """Register the function that ranks what this call has found so far (pure, cheap to call)."""
        self._snapshot = snapshot

    def collect(self) -> list[Evidence]:
        """The expert's ranked items so far, each flagged ``partial`` (empty when nothing was kept)."""
        if self._snapshot is None:
            return []
        return [
            e if PARTIAL in e.flags else dataclasses.replace(e, flags=(*e.flags, PARTIAL)) for e in self._snapshot()
        ]


class Expert(ABC):
    """Base class with the protocol above; subclasses set ``adapter`` and implement plan/search."""

    adapter: ClassVar[str] = ""
    settings_schema: ClassVar[Mapping[str, Any]] = settings({})
    reads_history: ClassVar[bool] = False
    local_files: ClassVar[bool] = True
    live: ClassVar[bool] = True
    needs_index: ClassVar[bool] = False
    partial_results: ClassVar[bool] = False

    @classmethod
    def default_freshness(cls) -> str:
        return "index" if cls.needs_index else "live" if cls.live else "unknown"

    @classmethod
    def capabilities(cls) -> tuple[str, ...]:
        """The declared capabilities, in words (``engine doctor`` shows them)."""
        flags = {
            "needs an index": cls.needs_index,
            "live": cls.live,
            "reads local files": cls.local_files,
            "reads history": cls.reads_history,
            "partial results at the deadline": cls.partial_results,
        }
        return tuple(name for name, on in flags.items() if on)

    def __init__(self, spec: ExpertSpec, env: ExpertEnv) -> None:
        self.spec = spec
        self.env = env
        self.name = spec.name
        self.settings = dict(spec.settings)

    @abstractmethod
    def plan(self, query: Query) -> dict[str, Any]:
        """What this expert will be asked for ``query`` (pure; recorded in the receipt)."""

    @abstractmethod
    async def search(self, query: Query, plan: dict[str, Any]) -> list[Evidence]:
        """Run ``plan``; return the expert's own ranked list, best first."""

    async def search_partial(self, query: Query, plan: dict[str, Any], found: Found) -> list[Evidence]:
        """:meth:`search`, keeping what has been found so far in ``found`` for when the deadline
        cuts it. Experts declaring ``partial_results`` override this; the default just searches."""
        return await self.search(query, plan)

    def freshness(self, query: Query) -> dict[str, Any] | None:
        return None

    async def aclose(self) -> None:
        return None

    async def __aenter__(self) -> Expert:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


@contextlib.contextmanager
def expert_errors(expert: str) -> Iterator[None]:
    """Map foreign exceptions to the expert taxonomy at the adapter boundary, in one place."""
    try:
        try:
            yield
        except ExceptionGroup as group:  # a task group inside an adapter: report its first real failure
            raise _first_leaf(group) from group
    except ExpertError:
        raise
    except TimeoutError as exc:
        raise ExpertTimeout(f"timed out: {exc}", expert=expert) from exc
    except MissingDependency as exc:
        raise ExpertUnavailable(exc.message, expert=expert) from exc
    except ModuleNotFoundError as exc:  # an optional package imported on first use
        raise ExpertUnavailable(f"the package {exc.name!r} is not installed", expert=expert) from exc
    except (FileNotFoundError, PermissionError) as exc:
        raise ExpertUnavailable(f"{type(exc).__name__}: {exc}", expert=expert) from exc
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ExpertOutputError(f"{type(exc).__name__}: {exc}", expert=expert) from exc
    except sqlite3.DatabaseError as exc:
        if isinstance(exc, sqlite3.OperationalError):  # locked, out of disk: not the data's fault
            raise ExpertFailed(f"{type(exc).__name__}: {exc}", expert=expert) from exc
        # a damaged index file reads as data of the wrong shape, as it does for tantivy and numpy
        raise ExpertOutputError(f"{type(exc).__name__}: {exc}", expert=expert) from exc
    except Exception as exc:  # noqa: BLE001 - anything else an adapter raises is an internal failure
        raise ExpertFailed(f"{type(exc).__name__}: {exc}", expert=expert) from exc


def _first_leaf(group: BaseExceptionGroup) -> BaseException:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = next((e for e in exc.exceptions if isinstance(e, ExpertError)), exc.exceptions[0])
    return exc


@dataclass(frozen=True, slots=True)
class ProcessResult:
    returncode: int
    stdout: bytes
    stderr: bytes
    #: stdout went past ``max_output`` and the rest was dropped (its last line may be cut)
    truncated: bool = False


async def run_process(
    argv: Sequence[str],
    *,
    expert: str,
    cwd: Path | None = None,
    ok_codes: Sequence[int] = (0,),
    env: dict[str, str] | None = None,
    max_output: int = 50_000_000,
    sweep_on_exit: bool = True,
    on_stdout: Callable[[bytes], bool | None] | None = None,
) -> ProcessResult:
    """Run argv (never a shell) in its own process group, its environment tagged (:mod:`engine.proctree`).

    When cancelled (the deadline), the whole tree is SIGKILLed at once; when the process exits,
    any descendant it left behind (``setsid cmd &``) is killed too (from a thread: the ``/proc``
    scan costs the answer nothing), so nothing outlives the call and no leftover holding our
    pipes can keep us waiting. ``sweep_on_exit=False`` is for the engine's own binaries (rg, git),
    which leave nothing behind and run many times per request.

    Raises ExpertUnavailable when the binary is missing and ExpertFailed on an exit code not in
    ``ok_codes`` (with the tail of stderr).

    ``on_stdout`` receives stdout chunk by chunk as it arrives instead of buffering it (the
    result's ``stdout`` is then empty), so a caller can parse as the tool streams and answer with
    what it has when the deadline comes; it returns True to stop early (the tree is killed and the
    exit status ignored: the caller has all it wants).
    """
    tag = proctree.new_tag()
    try:
        proc = await _Child.start(argv, cwd=cwd, env=proctree.tagged_env(tag, env))
    except FileNotFoundError as exc:
        raise ExpertUnavailable(f"binary not found: {argv[0]}", expert=expert) from exc
    except PermissionError as exc:
        raise ExpertUnavailable(f"cannot execute {argv[0]}: {exc}", expert=expert) from exc
    out, err = bytearray(), bytearray()
    stopped = False

    dropped = {"out": False}

    async def pump(stream: asyncio.StreamReader, buf: bytearray) -> None:
        while chunk := await stream.read(CHUNK):
            if len(buf) < max_output:
                buf.extend(chunk)
            elif buf is out:
                dropped["out"] = True

    async def stream_out(stream: asyncio.StreamReader) -> None:
        nonlocal stopped
        assert on_stdout is not None
        while chunk := await stream.read(CHUNK):
            if on_stdout(chunk):
                stopped = True
                proctree.kill_group(proc.pid)  # the sweep, if any, follows the exit as usual
                return

    try:
        async with anyio.create_task_group() as tg:
            if on_stdout is None:
                tg.start_soon(pump, proc.stdout, out)
            else:
                tg.start_soon(stream_out, proc.stdout)
            tg.start_soon(pump, proc.stderr, err)
            await proc.wait()
            if sweep_on_exit:  # a descendant it left (which may hold our pipes open) goes now
                proctree.kill_tagged_soon(tag)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await _kill_tree(proc, tag)
        raise
    finally:
        proc.close()
    if proc.returncode not in ok_codes and not stopped:
        tail = bytes(err[-600:]).decode("utf-8", "replace").strip()
        raise ExpertFailed(
            f"{Path(argv[0]).name} exited {proc.returncode}: {tail}", expert=expert, returncode=proc.returncode
        )
    return ProcessResult(proc.returncode or 0, bytes(out), bytes(err), truncated=dropped["out"])


def _pidfd(pid: int) -> int | None:
    """A file descriptor that becomes readable when ``pid`` exits (Linux >= 5.3), else None."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


@dataclass(slots=True)
class _Child:
    """A child process in a process group of its own, its pipes and its exit watched by the event loop.

    ``subprocess.Popen`` spawns it (vfork) in a worker thread and a pidfd in the event loop reports
    its exit. asyncio's own ``subprocess_exec`` spawns on the loop and waits for each child in a
    new thread whose start it waits for; with the other experts' threads busy on a 2-core machine
    that held the loop 2-10 ms per spawn (ADR 0012's update). Without pidfd (not Linux, or a kernel
    before 5.3) a worker thread reaps the child. Not ``anyio.open_process``: it can only ask for a
    new *session*, and the child's ``setsid`` stalled the loop 15 ms on one spawn in ten.
    """

    pid: int
    stdout: asyncio.StreamReader
    stderr: asyncio.StreamReader
    _popen: subprocess.Popen[bytes]
    _transports: list[asyncio.BaseTransport]
    _exited: asyncio.Event
    _pidfd: int | None

    @classmethod
    async def start(cls, argv: Sequence[str], *, cwd: Path | None, env: dict[str, str]) -> _Child:
        loop = asyncio.get_running_loop()

        def spawn() -> subprocess.Popen[bytes]:
            return subprocess.Popen(
                list(argv),
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                process_group=0,
                bufsize=0,
            )

        # in a worker thread (the GIL is released while vfork waits for the child's exec): on a
        # busy 2-core machine the child waits ms for a CPU, and the loop must not wait with it.
        # Shielded: a process started as the deadline came is closed below, never leaked
        with anyio.CancelScope(shield=True):
            popen = await anyio.to_thread.run_sync(spawn)
        exited = asyncio.Event()
        pidfd = _pidfd(popen.pid)
        child = cls(popen.pid, *_readers(loop), popen, [], exited, pidfd)
        if pidfd is not None:
            loop.add_reader(pidfd, child._reap)
        try:
            for pipe, reader in ((popen.stdout, child.stdout), (popen.stderr, child.stderr)):
                transport, _ = await loop.connect_read_pipe(partial(asyncio.StreamReaderProtocol, reader), pipe)
                child._transports.append(transport)
        except BaseException:
            child.close()
            raise
        return child

    def _reap(self) -> None:
        """The pidfd is readable: the child has exited. Reap it (no zombie) and wake the waiters."""
        if self._pidfd is not None:
            asyncio.get_running_loop().remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
        self._popen.wait()  # returns at once: the process is gone
        self._exited.set()

    @property
    def returncode(self) -> int | None:
        return self._popen.returncode

    async def wait(self) -> int | None:
        if self._pidfd is None and not self._exited.is_set():
            await anyio.to_thread.run_sync(self._popen.wait, abandon_on_cancel=True)
            self._exited.set()
        await self._exited.wait()
        return self.returncode

    def close(self) -> None:
        """Close the pipes; a child still running is SIGKILLed and reaped when it goes."""
        for t in self._transports:
            t.close()  # closes its pipe
        for pipe in (self._popen.stdout, self._popen.stderr)[len(self._transports) :]:
            if pipe is not None:  # never handed to a transport (start failed half-way)
                pipe.close()
        if self._popen.poll() is None:
            proctree.kill_group(self.pid)
            if self._pidfd is None:  # no pidfd: a worker thread reaps it
                asyncio.get_running_loop().run_in_executor(None, self._popen.wait)
        elif self._pidfd is not None:
            self._reap()


def _readers(loop: asyncio.AbstractEventLoop) -> tuple[asyncio.StreamReader, asyncio.StreamReader]:
    return asyncio.StreamReader(limit=CHUNK, loop=loop), asyncio.StreamReader(limit=CHUNK, loop=loop)


async def _kill_tree(proc: _Child, tag: str) -> None:
    """SIGKILL the group now and every tagged descendant right after (no SIGTERM grace: the budget
    is spent), then reap the process, briefly — a SIGKILLed process is gone within milliseconds."""
    proctree.kill_tree_soon(proc.pid, tag)
    with anyio.move_on_after(1.0):
        await proc.wait()
