"""Where an index's heavy per-batch work runs: in this process (``local``, the default) or spread over
a Ray cluster (``ray``, the optional ``ray`` extra; docs/scale.md).

An :class:`Executor` maps a *pure* function over file batches and yields the results in input
order, so the index that results is the same whichever executor ran it: the driver still applies
each result, commits and saves the manifest batch by batch. The function and its inputs must be
picklable (a module-level function, frozen dataclasses, bytes); see
:meth:`engine.index.build.Indexer` ``prepare_fn`` / ``apply``.

Ray: ``RAY_ADDRESS`` names an existing cluster; without it a local cluster is started with
``ENGINE_RAY_CPUS`` workers (default: every core), bound to loopback, usage reporting off. At most
``2 × workers`` batches are in flight, so the driver never reads the whole workspace ahead.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol, TypeVar

from ..errors import MissingDependency, SpecError

T = TypeVar("T")
R = TypeVar("R")
EXECUTORS = ("local", "ray")


class Executor(Protocol):
    name: str

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        """``fn`` over ``items``, results in input order."""
        ...

    def close(self) -> None: ...


class LocalExecutor:
    name = "local"

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        return (fn(x) for x in items)

    def close(self) -> None:
        return None


class RayExecutor:
    """Tasks on a Ray cluster; a worker keeps what ``fn`` caches (a loaded model) between batches."""

    name = "ray"

    def __init__(self, address: str | None = None, num_cpus: int | None = None) -> None:
        if not (address or os.environ.get("RAY_ADDRESS")):
            # a local cluster: every Ray process on 127.0.0.1 (Ray would pick the machine's own
            # interface address otherwise) and no usage report sent anywhere
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        try:
            import ray
        except ImportError as exc:
            raise MissingDependency("--executor ray needs the ray extra: pip install -e '.[ray]'") from exc
        self._ray: Any = ray
        self._owned = not ray.is_initialized()
        if self._owned:
            cpus = num_cpus or int(os.environ.get("ENGINE_RAY_CPUS", "0")) or os.cpu_count() or 1
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
            if address:
                ray.init(address=address, **kwargs)
            else:
                ray.init(num_cpus=None if os.environ.get("RAY_ADDRESS") else cpus, **kwargs)
        self.workers = max(1, int(self._ray.cluster_resources().get("CPU", 1)))
        self._remote: dict[Callable[..., Any], Any] = {}

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        remote = self._remote.get(fn)
        if remote is None:
            remote = self._remote[fn] = self._ray.remote(fn)
        window: deque[Any] = deque()
        for x in items:
            window.append(remote.remote(x))
            if len(window) >= 2 * self.workers:
                yield self._ray.get(window.popleft())
        while window:
            yield self._ray.get(window.popleft())

    def close(self) -> None:
        if self._owned and self._ray.is_initialized():
            self._ray.shutdown()


def make_executor(name: str) -> Executor:
    """``local`` or ``ray``.

    Raises:
        SpecError: an unknown name; MissingDependency: ``ray`` without the extra.
    """
    if name == "local":
        return LocalExecutor()
    if name == "ray":
        return RayExecutor()
    raise SpecError(f"unknown executor {name!r}; use {' or '.join(EXECUTORS)}")
