"""Small helpers shared by tests (imported, not fixtures)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
from nacl.signing import VerifyKey

from engine.runtime import Router, RunResult
from engine.workspace import Workspace


def ask(config_dir: Path, workspace: Path, question: str, pipeline: str = "router", **fields: Any) -> RunResult:
    router = Router(config_dir, Workspace.open([workspace]))

    async def go() -> RunResult:
        try:
            return await router.run(pipeline, {"question": question, "no_cache": True, **fields})
        finally:
            await router.aclose()

    result = anyio.run(go)
    router.flush()
    return result


def plain_pynacl_verify(receipt: dict[str, Any]) -> bool:
    """Verification exactly as DESIGN §5 tells a stranger to do it, with nothing of ours."""
    body = {k: v for k, v in receipt.items() if k != "signature"}
    msg = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    try:
        VerifyKey(bytes.fromhex(receipt["public_key"])).verify(msg, bytes.fromhex(receipt["signature"]))
        return True
    except Exception:  # noqa: BLE001
        return False


def paths(result: RunResult) -> list[str]:
    return [f"{it['project']}/{it['path']}" for it in result.response["items"]]
