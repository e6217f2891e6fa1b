"""One error taxonomy for the whole engine.

Split by phase, so surfaces (CLI, MCP, eval) can react to the class alone::

    EngineError
    ├── InvalidRequest          the caller's request is wrong        (CLI exit 2)
    ├── SpecError               a config file or pipeline is wrong   (CLI exit 2)
    │   ├── SchemaError             fails its JSON Schema, or an adapter's settings schema (file, line, path)
    │   └── GraphError              cycle, unknown node kind, a node setting naming what does not exist
    ├── EvalError               an eval suite, arm or bench input is wrong (CLI exit 2)
    ├── MissingDependency       an optional package a feature needs is not installed (CLI exit 1)
    ├── IndexingError           the workspace could not be listed or indexed (CLI exit 1)
    ├── ExpertError             one expert failed; becomes a per_expert status, never a crash
    │   ├── ExpertTimeout           "timeout"
    │   ├── ExpertUnavailable       "unavailable"   (binary missing, server down, no index)
    │   ├── ExpertUnconfigured      "unconfigured"  (disabled / settings missing)
    │   ├── ExpertOutputError       "malformed"     (output not of the promised shape)
    │   └── ExpertFailed            "internal"      (crash, non-zero exit)
    ├── GateError               zero experts selected (`zero_expert_gate`)   (CLI exit 1)
    ├── ReceiptError            a receipt could not be signed or stored      (CLI exit 1)
    ├── StoreError              the store cannot be read or written: damaged, busy, unsafe
    │   │                       files (`store_error`; the fix is in the message)  (CLI exit 1)
    │   └── NotFound                a record named by the caller does not exist (`not_found`)
    └── NodeError               a node raised unexpectedly                   (CLI exit 1)

Every error has a stable ``code`` (the classified name reported to callers) and a
``to_dict()`` that never contains a traceback. The CLI's exit code is the class's
``exit_code``: 0 answered (an empty answer included), 2 the request or config is wrong, 1 the
router failed; anything outside this tree is a bug, reported as ``internal_error`` with exit 1.
"""

from __future__ import annotations

from typing import Any


class EngineError(Exception):
    code = "engine_error"
    exit_code = 1

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(message)
        self.message = message
        self.context = {k: v for k, v in context.items() if v is not None}

    def to_dict(self) -> dict[str, Any]:
        return {"error": self.code, "message": self.message, **self.context}


class InvalidRequest(EngineError):
    code = "invalid_request"
    exit_code = 2

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message, field=field)
        self.field = field


class SpecError(EngineError):
    code = "invalid_config"
    exit_code = 2


class SchemaError(SpecError):
    """A config file that does not match its schema: names the file, the path inside it and why."""

    def __init__(self, message: str, *, file: str, path: str = "", line: int | None = None) -> None:
        where = f"{file}" + (f":{line}" if line else "") + (f" at {path}" if path else "")
        super().__init__(f"{where}: {message}", file=file, path=path or None, line=line)
        self.file, self.path, self.line = file, path, line


class GraphError(SpecError):
    """A pipeline graph that cannot run; ``file``, ``line`` and ``path`` locate the node or field at fault."""

    def __init__(
        self,
        message: str,
        *,
        pipeline: str,
        node_id: str | None = None,
        file: str | None = None,
        line: int | None = None,
        path: str | None = None,
    ) -> None:
        where = (file or pipeline) + (f":{line}" if line else "") + (f" at {path}" if path else "")
        super().__init__(f"{where}: {message}", pipeline=pipeline, node_id=node_id, file=file, line=line, path=path)
        self.file, self.line, self.path = file, line, path


class EvalError(EngineError):
    """A suite that cannot be read, an unknown arm, a bench with nothing to ask."""

    code = "invalid_eval"
    exit_code = 2


class MissingDependency(EngineError):
    code = "missing_dependency"


class IndexingError(EngineError):
    code = "index_error"


class ExpertError(EngineError):
    """An expert did not answer. Fan-out turns it into ``per_expert.status``; it never aborts a run."""

    code = "internal"
    status = "internal"

    def __init__(self, message: str, *, expert: str, **context: Any) -> None:
        super().__init__(message, expert=expert, **context)
        self.expert = expert


class ExpertTimeout(ExpertError):
    code = status = "timeout"


class ExpertUnavailable(ExpertError):
    code = status = "unavailable"


class ExpertUnconfigured(ExpertError):
    code = status = "unconfigured"


class ExpertOutputError(ExpertError):
    code = status = "malformed"


class ExpertFailed(ExpertError):
    code = status = "internal"


class GateError(EngineError):
    code = "zero_expert_gate"


class ReceiptError(EngineError):
    code = "receipt_error"


class StoreError(EngineError):
    """The store (engine/store) failed. Never costs an answer: receipts are in the spool before
    the store is touched, so surfaces report this after the answer (``engine doctor``)."""

    code = "store_error"

    def __init__(self, message: str, *, fix: str | None = None, **context: Any) -> None:
        super().__init__(message + (f"; fix: {fix}" if fix else ""), fix=fix, **context)
        self.fix = fix


class NotFound(StoreError):
    code = "not_found"


class NodeError(EngineError):
    code = "node_error"

    @classmethod
    def from_exception(cls, node_id: str, kind: str, exc: BaseException) -> NodeError:
        return cls(f"node {node_id!r} ({kind}) failed: {type(exc).__name__}: {exc}", node_id=node_id, kind=kind)


#: statuses an expert can report in a receipt; "ok" and "partial" (its deadline came: what it had
#: found so far, items flagged ``partial``) are the ones that carry items.
EXPERT_STATUSES = ("ok", "partial", "timeout", "unavailable", "internal", "malformed", "unconfigured", "skipped")
