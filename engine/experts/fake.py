"""FakeExpert: a scripted expert for scheduler unit tests and docs (like ``httpx.MockTransport``).

Configured from YAML settings or with a handler in Python::

    FakeExpert.with_handler(spec, env, lambda query: [Evidence(...)])

Settings: ``items`` (list of Evidence fields), ``delay_ms``, ``fail`` (one of timeout,
unavailable, internal, malformed, crash). Never used for a real answer: the adapter exists
only so scheduler tests can script timing and failure exactly.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from ..errors import ExpertFailed, ExpertOutputError, ExpertTimeout, ExpertUnavailable
from ..types import Evidence, Query
from .base import Expert, settings

Handler = Callable[[Query], "list[Evidence] | Awaitable[list[Evidence]]"]
_FAILURES = {
    "timeout": ExpertTimeout,
    "unavailable": ExpertUnavailable,
    "internal": ExpertFailed,
    "malformed": ExpertOutputError,
}


class FakeExpert(Expert):
    adapter = "fake"
    local_files = False
    settings_schema = settings(
        {
            "items": {"type": "array", "items": {"type": "object", "required": ["project", "path", "kind"]}},
            "delay_ms": {"type": "number", "minimum": 0},
            "fail": {"enum": ["timeout", "unavailable", "internal", "malformed", "crash"]},
        }
    )
    handler: Handler | None = None
    calls: int = 0

    @classmethod
    def with_handler(cls, spec: Any, env: Any, handler: Handler) -> FakeExpert:
        inst = cls(spec, env)
        inst.handler = handler
        return inst

    def plan(self, query: Query) -> dict[str, Any]:
        return {"question": query.question, "fake": True}

    async def search(self, query: Query, plan: dict[str, Any]) -> list[Evidence]:
        self.calls += 1
        delay = float(self.settings.get("delay_ms", 0)) / 1000
        if delay:
            await anyio.sleep(delay)
        fail = self.settings.get("fail")
        if fail == "crash":
            raise RuntimeError("fake expert crashed")
        if fail in _FAILURES:
            raise _FAILURES[fail](f"scripted {fail}", expert=self.name)
        if self.handler is not None:
            out = self.handler(query)
            return await out if inspect.isawaitable(out) else out
        return [Evidence(**item) for item in self.settings.get("items", [])][: query.limit]
