"""TemplatedExpert: the shared half of the external adapters (mcp, http, command).

Each is configured by sandboxed templates (what to send) and a result mapping (what comes
back). Both are validated and compiled once, on first use — not in the constructor, which
stays free of work — and a bad setting is ``unconfigured``, reported per call.
"""

from __future__ import annotations

from abc import abstractmethod

from ..spec import ExpertSpec
from .base import Expert, ExpertEnv
from .mapping import ResultMapper, TemplateSet


class TemplatedExpert(Expert):
    def __init__(self, spec: ExpertSpec, env: ExpertEnv) -> None:
        super().__init__(spec, env)
        self._built: tuple[TemplateSet, ResultMapper] | None = None

    def _prepare(self) -> tuple[TemplateSet, ResultMapper]:
        if self._built is None:
            self._built = self._build()
        return self._built

    @abstractmethod
    def _build(self) -> tuple[TemplateSet, ResultMapper]:
        """Validate settings (raise ExpertUnconfigured) and compile templates and result mapping."""
