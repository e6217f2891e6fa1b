"""The Config page: the current ``config_version`` of every pipeline, the files, and the semantic
diff (what ``engine diff`` prints, rendered) between any two of: a version seen in receipts (the
store's config snapshot), a git revision of the config folder's repository, the current files."""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from ..diff import diff_sets, format_diff, materialize_revision, materialize_snapshot
from ..errors import EngineError
from ..runtime import Router
from ..spec import ConfigSet, load_config
from ..types import canonical_json, sha256_hex
from .pages import backend, in_thread, page

MAX_SHOWN_BYTES = 200_000


@dataclass(frozen=True)
class ConfigFile:
    name: str
    size: int
    sha256: str
    text: str


def config_files(root: Path) -> list[ConfigFile]:
    out = []
    for f in [root / "experts.yaml", root / "priors.yaml", *sorted((root / "pipelines").glob("*.yaml"))]:
        try:
            data = f.read_bytes()
        except OSError:
            continue
        shown = data[:MAX_SHOWN_BYTES].decode("utf-8", "replace")
        out.append(ConfigFile(f.relative_to(root).as_posix(), len(data), hashlib.sha256(data).hexdigest(), shown))
    return out


async def config_view(request: Request) -> Response:
    router = backend(request).router
    cfg = router.config()
    versions = {name: cfg.config_version(spec) for name, spec in sorted(cfg.pipelines.items())}

    def read() -> tuple[list[ConfigFile], list[dict[str, Any]]]:
        snaps = [
            {
                "version": s.config_version,
                "created_at": s.created_at,
                "pipelines": sorted(s.content.get("pipelines") or {}),
                "intact": sha256_hex(canonical_json(s.content)) == s.config_version,
            }
            for s in reversed(router.store.list_config_snapshots())
        ]
        return config_files(router.config_dir), snaps

    files, snapshots = await in_thread(read)
    return page(
        request,
        "config.html",
        root=str(router.config_dir),
        versions=versions,
        current=set(versions.values()),
        files=files,
        snapshots=snapshots,
    )


def load_side(router: Router, side: str, tmp: Path) -> tuple[ConfigSet, str, dict[str, Any] | None]:
    """A diff side → (its config set, its label, its snapshot content when it is one).

    ``v:<config_version>`` a version seen in receipts; ``rev:<git revision>`` of the config
    folder's repository; ``current`` the files as they are now. Nothing else: a side is never a
    folder path typed into a form.
    """
    kind, _, value = side.partition(":")
    if side == "current":
        return load_config(router.config_dir), "current files", None
    if kind == "v" and value:
        snap = router.store.get_config_snapshot(value)
        if snap is None:
            raise HTTPException(404, f"no config snapshot of version {value[:16]}…; versions are kept from first use")
        return load_config(materialize_snapshot(snap.content, tmp)), f"version {value[:12]}", snap.content
    if kind == "rev" and value:
        return load_config(materialize_revision(router.config_dir, value, tmp)), f"git {value}", None
    raise HTTPException(400, f"a diff side is v:<config version>, rev:<git revision> or current, not {side[:80]!r}")


def diff_of(router: Router, a: str, b: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as ta, tempfile.TemporaryDirectory() as tb:
        ca, label_a, content_a = load_side(router, a, Path(ta))
        cb, label_b, content_b = load_side(router, b, Path(tb))
        d = diff_sets(ca, cb, label_a, label_b)
    classifier = None
    if content_a is not None and content_b is not None:
        classifier = "changed" if content_a.get("classifier") != content_b.get("classifier") else "unchanged"
    return {"diff": d, "text": format_diff(d), "classifier": classifier}


async def diff_view(request: Request) -> Response:
    router = backend(request).router
    a, b = request.query_params.get("a", ""), request.query_params.get("b", "")
    try:
        result = await in_thread(lambda: diff_of(router, a, b))
    except EngineError as exc:  # a revision that does not exist, a snapshot that no longer loads
        raise HTTPException(400, f"{exc.code}: {exc.message}") from None
    return page(request, "diff.html", a=a, b=b, **result)
