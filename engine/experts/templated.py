"""TemplatedExpert: the shared half of the external adapters (mcp, http, command).

Each is configured by sandboxed templates (what to send) and a result mapping (what comes
back). Their shapes are checked when the config loads (:data:`SHARED_SETTINGS`, each adapter's
``settings_schema``); the templates are compiled once, on first use — not in the constructor,
which stays free of work — and one that does not compile is ``unconfigured``, reported per call.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

from ..spec import ExpertSpec
from ..types import ITEM_KINDS
from .base import Expert, ExpertEnv
from .mapping import FIELDS, ResultMapper, TemplateSet

_STRINGS = {"type": "array", "items": {"type": "string"}}
_STR_MAP = {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]}}
#: ``result:`` — how a tool's output becomes evidence (engine.experts.mapping)
RESULT_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "format": {"enum": ["auto", "json", "jsonl", "text"]},
        "items": {"type": "string"},
        "fields": {
            "type": "object",
            "propertyNames": {"enum": list(FIELDS)},
            "additionalProperties": {"type": "string"},
        },
        "kind": {"enum": list(ITEM_KINDS)},
        "line_offset": {"type": "integer"},
        "urls": {"type": "boolean"},
        "meta": {"type": "object", "additionalProperties": {"type": "string"}},
        "pattern": {"type": "string"},
    },
}
#: the settings every templated adapter shares (auth, per-project calls, required variables, result)
SHARED_SETTINGS: Mapping[str, Any] = {
    "auth_env": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
    "auth_header": {"type": "string", "minLength": 1},
    "auth_prefix": {"type": "string"},
    "per_project": {"type": "boolean"},
    "required": _STRINGS,
    "env": _STR_MAP,
    "result": RESULT_SCHEMA,
}


class TemplatedExpert(Expert):
    local_files: ClassVar[bool] = False
    live: ClassVar[bool] = False  # an external tool keeps its own state: the router cannot tell how fresh

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
