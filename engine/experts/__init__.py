"""The closed registry of expert adapters, keyed by the short ``adapter:`` name in experts.yaml.

An adapter registers by *being* somewhere, never by an entry in a central table:

1. **Built in**: the module ``engine.experts.<name>`` (a ``-`` in the name is read as ``_``) whose
   :class:`~engine.experts.base.Expert` subclass declares ``adapter = "<name>"``. Adding one is
   adding that module (docs/contributing.md).
2. **Installed**: an entry point ``<name>`` in the group :data:`ENTRY_POINT_GROUP` of another
   installed distribution, pointing at its Expert subclass.

YAML only ever names a short name (``^[a-z][a-z0-9_-]*$``), never an import path: the name can
resolve only to a module inside this package or to an entry point some installed distribution
declared (the trust of ``pip install``, not of a config file) — the closed set STYLE §5 asks
for, without haystack's import-path registry and its allowlist. Modules are imported lazily on
first use (the semantic adapter pulls in onnxruntime when it runs, not when the CLI starts).
"""

from __future__ import annotations

import pkgutil
import re
from functools import cache
from importlib import import_module
from importlib.metadata import entry_points

from ..errors import MissingDependency, SpecError
from .base import Expert, ExpertEnv

ENTRY_POINT_GROUP = "search_router.experts"
#: modules of this package that hold shared code, not an adapter
SUPPORT_MODULES = frozenset({"base", "indexed", "templated", "mapping", "git_files"})
_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")


def known_adapters() -> list[str]:
    """Every adapter name that resolves: this package's adapter modules and installed entry points."""
    builtin = {m.name for m in pkgutil.iter_modules(__path__) if m.name not in SUPPORT_MODULES}
    return sorted(builtin | {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)})


@cache
def adapter_class(adapter: str) -> type[Expert]:
    """The Expert subclass registered as ``adapter``.

    Raises:
        SpecError: no adapter of that name (the message lists the known ones).
        MissingDependency: the adapter's module needs a package that is not installed.
    """
    if not _NAME.match(adapter):
        raise SpecError(f"adapter names are short names, not paths: {adapter!r}; known: {known_adapters()}")
    module_name = f"{__name__}.{adapter.replace('-', '_')}"
    try:
        module = import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise MissingDependency(f"adapter {adapter!r} needs {exc.name!r}, which is not installed") from exc
        return _installed(adapter)
    found = [
        obj
        for obj in vars(module).values()
        if isinstance(obj, type) and issubclass(obj, Expert) and obj.adapter == adapter
    ]
    if len(found) != 1:
        raise SpecError(f"unknown expert adapter {adapter!r}; known adapters: {known_adapters()}")
    return found[0]


def _installed(adapter: str) -> type[Expert]:
    for ep in entry_points(group=ENTRY_POINT_GROUP, name=adapter):
        try:
            cls = ep.load()
        except ModuleNotFoundError as exc:
            raise MissingDependency(f"adapter {adapter!r} ({ep.value}) needs {exc.name!r}") from exc
        if not (isinstance(cls, type) and issubclass(cls, Expert) and cls.adapter == adapter):
            raise SpecError(f"entry point {adapter!r} ({ep.value}) is not an Expert declaring adapter = {adapter!r}")
        return cls
    raise SpecError(f"unknown expert adapter {adapter!r}; known adapters: {known_adapters()}")


__all__ = ["ENTRY_POINT_GROUP", "Expert", "ExpertEnv", "adapter_class", "known_adapters"]
