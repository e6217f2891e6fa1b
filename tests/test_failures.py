"""Failure semantics (DESIGN §7) with real processes: each failure is classified, others still answer."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import yaml

from .helpers import ask, plain_pynacl_verify


def _set_expert(config_dir: Path, name: str, **changes: object) -> None:
    data = yaml.safe_load((config_dir / "experts.yaml").read_text())
    spec = data["experts"][name]
    for k, v in changes.items():
        if k == "settings":
            spec.setdefault("settings", {}).update(v)  # type: ignore[arg-type]
        else:
            spec[k] = v
    (config_dir / "experts.yaml").write_text(yaml.safe_dump(data))


def _script(tmp_path: Path, name: str, body: str) -> str:
    p = tmp_path / name
    p.write_text(f"#!{sys.executable}\n{body}\n")
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return str(p)


def _status(result, expert: str) -> dict:  # noqa: ANN001
    return result.response["receipt"]["per_expert"][expert]


def test_expert_timeout_is_classified_and_others_answer(indexed: Path, config_dir: Path, tmp_path: Path) -> None:
    slow = _script(tmp_path, "slow-rg", "import time\ntime.sleep(30)")
    _set_expert(config_dir, "ripgrep", timeout_ms=300, settings={"binary": slow})
    r = ask(config_dir, indexed, '"RetryPolicy"')
    assert _status(r, "ripgrep")["status"] == "timeout"
    assert _status(r, "ripgrep")["result_count"] == 0
    assert _status(r, "bm25")["status"] == "ok" and r.response["items"]
    assert all(s["expert"] != "ripgrep" for it in r.response["items"] for s in it["sources"])
    assert r.response["receipt"]["budget"]["spent"]["latency_ms"] < 3000
    assert plain_pynacl_verify(r.response["receipt"])


def test_budget_latency_bounds_every_expert(indexed: Path, config_dir: Path, tmp_path: Path) -> None:
    slow = _script(tmp_path, "slow-rg", "import time\ntime.sleep(30)")
    _set_expert(config_dir, "ripgrep", timeout_ms=20000, settings={"binary": slow})
    r = ask(config_dir, indexed, '"RetryPolicy"', budget={"latency_ms": 400})
    assert _status(r, "ripgrep")["status"] == "timeout"
    assert r.response["receipt"]["budget"]["spent"]["latency_ms"] < 3000


def test_missing_binary_is_unavailable(indexed: Path, config_dir: Path, tmp_path: Path) -> None:
    _set_expert(config_dir, "ripgrep", settings={"binary": str(tmp_path / "no-such-rg")})
    r = ask(config_dir, indexed, '"RetryPolicy"')
    assert _status(r, "ripgrep")["status"] == "unavailable"
    assert _status(r, "ripgrep")["error_class"] == "unavailable"
    assert r.error is None and r.response["items"]


def test_crashing_expert_is_internal(indexed: Path, config_dir: Path, tmp_path: Path) -> None:
    crash = _script(tmp_path, "crash-rg", "import sys\nsys.stderr.write('segfault-ish\\n')\nsys.exit(139)")
    _set_expert(config_dir, "ripgrep", settings={"binary": crash})
    r = ask(config_dir, indexed, '"RetryPolicy"')
    assert _status(r, "ripgrep")["status"] == "internal"
    assert "139" in _status(r, "ripgrep")["error"]
    assert _status(r, "bm25")["status"] == "ok"


def test_malformed_expert_output_is_malformed(indexed: Path, config_dir: Path, tmp_path: Path) -> None:
    junk = _script(tmp_path, "junk-rg", "print('this is not json')")
    _set_expert(config_dir, "ripgrep", settings={"binary": junk})
    r = ask(config_dir, indexed, '"RetryPolicy"')
    assert _status(r, "ripgrep")["status"] == "malformed"
    assert _status(r, "ripgrep")["result_count"] == 0


def test_missing_index_is_unavailable_not_a_crash(workspace_dir: Path, config_dir: Path) -> None:
    r = ask(config_dir, workspace_dir, '"RetryPolicy"')  # never indexed
    assert _status(r, "bm25")["status"] == "unavailable"
    assert "engine index" in _status(r, "bm25")["error"]
    assert _status(r, "ripgrep")["status"] == "ok" and r.response["items"]


def test_empty_result_is_a_valid_answer(indexed: Path, config_dir: Path) -> None:
    r = ask(config_dir, indexed, '"zqxj-no-such-string-anywhere"')
    assert r.error is None and r.exit_code == 0
    assert r.response["items"] == []
    assert set(r.response["receipt"]["per_expert"]) >= {"ripgrep"}
    assert r.response["receipt"]["confidence"]["label"] == "none"


def test_stale_index_flags_changed_files(indexed: Path, config_dir: Path) -> None:
    f = indexed / "alpha" / "alpha" / "retry.py"
    f.write_text(f.read_text().replace("exponential backoff", "linear backoff"))
    r = ask(config_dir, indexed, "retry policy exponential backoff", intent="conceptual")
    stale = [it for it in r.response["items"] if it["path"] == "alpha/retry.py"]
    assert stale and stale[0]["tier"] == "stale-index"
    assert "file-changed-since-indexed" in stale[0]["flags"]
    # the HEADs are stated once per receipt; an index names only the projects it is stale for
    receipt = r.response["receipt"]
    fresh = receipt["per_expert"]["bm25"]["freshness"]
    assert receipt["heads"]["alpha"] and fresh["stale"] == {}


def test_incremental_index_adds_changes_and_drops(indexed: Path, config_dir: Path) -> None:
    from engine.indexing import index_workspace
    from engine.spec import load_config
    from engine.workspace import Workspace

    ws, cfg = Workspace.open([indexed]), load_config(config_dir)
    (indexed / "alpha" / "alpha" / "fresh.py").write_text("def brand_new_zebra_handler():\n    return 1\n")
    (indexed / "beta" / "beta" / "storage.py").unlink()
    (rep,) = index_workspace(ws, cfg, only=["bm25"], progress=False)
    assert (rep.added, rep.removed) == (1, 1)
    r = ask(config_dir, indexed, "brand new zebra handler", intent="conceptual")
    assert r.response["items"][0]["path"] == "alpha/fresh.py"
    r = ask(config_dir, indexed, "Beta's own storage with the same name", intent="conceptual")
    assert "beta/storage.py" not in [i["path"] for i in r.response["items"]]
    (rep,) = index_workspace(ws, cfg, only=["bm25"], progress=False)
    assert (rep.added, rep.removed) == (0, 0)


def test_a_damaged_index_file_names_the_index_and_the_fix(workspace_dir: Path, config_dir: Path) -> None:
    """Found by an exploratory run: a symbols database overwritten with junk answered `malformed:
    DatabaseError: file is not a database` and nothing said what to do."""
    from engine.indexing import index_workspace
    from engine.spec import load_config
    from engine.workspace import Workspace

    ws = Workspace.open([workspace_dir])
    index_workspace(ws, load_config(config_dir), only=["symbols"], progress=False)
    db = ws.data_dir / "index" / "symbols" / "symbols.sqlite3"
    db.write_bytes(b"\x00junk" * 4096)
    r = ask(config_dir, workspace_dir, "where is FileSystemStorage defined")
    status = _status(r, "symbols")
    assert status["status"] == "malformed" and "engine index --only symbols" in status["error"], status


def test_items_of_a_deleted_file_the_manifest_never_knew_are_flagged_stale(tmp_path: Path, config_dir: Path) -> None:
    """Found by an exploratory run: an index killed between its data commit and its manifest save
    kept a file's items; once the file was deleted they came back first, unflagged."""
    import json

    from engine.indexing import index_workspace
    from engine.spec import load_config
    from engine.workspace import Workspace

    from .conftest import make_repo

    repo = make_repo(tmp_path / "ws" / "lib", {"gone.py": "class VanishingThing:\n    pass\n", "kept.py": "X = 1\n"})
    ws = Workspace.open([repo])
    index_workspace(ws, load_config(config_dir), only=["symbols"], progress=False)
    manifest = ws.data_dir / "index" / "symbols" / "manifest.json"
    data = json.loads(manifest.read_text())
    data["files"] = {k: v for k, v in data["files"].items() if not k.endswith(":gone.py")}  # never saved
    manifest.write_text(json.dumps(data))
    (repo / "gone.py").unlink()
    r = ask(config_dir, repo, "where is VanishingThing defined")
    hits = [it for it in r.response["items"] if it["path"] == "gone.py"]
    assert hits and all(it["tier"] == "stale-index" for it in hits), r.response["items"]
