"""The expert instances of a Router, by name: built on first use, rebuilt only when their spec changes.

Sessions (MCP servers, index readers) survive config reloads that do not touch their expert; an
instance whose spec changed is retired and closed on the next run (its processes end then, not
at exit).
"""

from __future__ import annotations

import logging

from .experts import Expert, ExpertEnv, adapter_class
from .spec import ConfigSet, ExpertSpec

log = logging.getLogger("engine")


class ExpertPool:
    """Expert instances by name, rebuilt only when their spec changes (sessions survive reloads)."""

    def __init__(self, env: ExpertEnv) -> None:
        self.env = env
        self._experts: dict[str, tuple[ExpertSpec, Expert]] = {}
        self._retired: list[Expert] = []
        self.config: ConfigSet | None = None

    def sync(self, config: ConfigSet) -> None:
        self.config = config
        for name in list(self._experts):
            spec, inst = self._experts[name]
            if config.experts.get(name) != spec:
                self._retired.append(inst)
                del self._experts[name]

    def get(self, name: str) -> Expert:
        if name not in self._experts:
            assert self.config is not None
            spec = self.config.experts[name]
            self._experts[name] = (spec, adapter_class(spec.adapter)(spec, self.env))
        return self._experts[name][1]

    def inject(self, name: str, expert: Expert) -> None:
        """Use a ready-made instance for ``name`` (scheduler tests inject FakeExpert handlers)."""
        assert self.config is not None
        self._experts[name] = (self.config.experts[name], expert)

    async def close_retired(self) -> None:
        """Close instances replaced by a config reload (their server processes end now, not at exit)."""
        retired, self._retired = self._retired, []
        for inst in retired:
            try:
                await inst.aclose()
            except Exception:  # noqa: BLE001 - closing must not fail a request
                log.exception("closing expert %s", inst.name)

    async def aclose(self) -> None:
        for inst in self._retired + [i for _, i in self._experts.values()]:
            try:
                await inst.aclose()
            except Exception:  # noqa: BLE001 - closing must not mask the answer
                log.exception("closing expert %s", inst.name)
        self._experts.clear()
        self._retired.clear()
