"""A config version's content is kept by the store the first time a router uses it, written by
``Router.flush`` (off the hot path), so two versions seen in receipts can be diffed later."""

from __future__ import annotations

from pathlib import Path

import anyio

from engine.runtime import Router
from engine.store import MemoryStore
from engine.types import canonical_json, sha256_hex
from engine.workspace import Workspace


def test_a_new_version_is_snapshotted_once_after_the_answer(workspace_dir: Path, config_dir: Path) -> None:
    store = MemoryStore()
    router = Router(config_dir, Workspace.open([workspace_dir]), store=store)
    ask = lambda q: anyio.run(lambda: router.run("router", {"question": q, "no_cache": True}))  # noqa: E731
    first = ask("RetryPolicy")
    version = first.response["receipt"]["config_version"]
    assert store.list_config_snapshots() == []  # nothing written on the hot path
    router.flush()
    (snap,) = store.list_config_snapshots()
    assert snap.config_version == version and sha256_hex(canonical_json(snap.content)) == version
    cfg = router.config()
    hashed = cfg.config_content(cfg.pipelines["router"])
    assert canonical_json(snap.content) == canonical_json(hashed)
    assert sorted(snap.content["pipelines"]) == sorted(cfg.pipelines)  # the router and every class it routes to
    ask("FileSystemStorage")
    anyio.run(lambda: router.run("router", {"question": ""}))  # a receipted failure: same version
    router.flush()
    assert len(store.list_config_snapshots()) == 1
    priors = config_dir / "priors.yaml"
    priors.write_text(priors.read_text().replace("ripgrep: 0.9", "ripgrep: 0.5", 1))
    second = ask("RetryPolicy")
    router.flush()
    versions = {s.config_version for s in store.list_config_snapshots()}
    assert versions == {version, second.response["receipt"]["config_version"]} and len(versions) == 2
    direct = anyio.run(lambda: router.run("docs", {"question": "how to upload", "no_cache": True}))
    router.flush()
    docs = store.get_config_snapshot(direct.response["receipt"]["config_version"])
    assert docs is not None and sorted(docs.content["pipelines"]) == ["docs"]
