"""``engine bench --load`` in small (the long ladder and soak are benchmarks: docs/scale.md):
three real ``engine serve --transport http`` replicas over one workspace and one PostgreSQL store,
MCP clients over streamable HTTP, and the chaos slice — a replica SIGKILLed mid-load, an expert
stalled by a config hot-reload, PostgreSQL restarted. Every answered request must have exactly one
stored receipt that verifies, the survivors must not fail, and every replica's chain must audit."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from engine.evaluation.load_bench import LoadOptions, load_table, run_load
from tests.conftest import make_repo
from tests.pg_support import start

pytestmark = pytest.mark.slow


def test_replicas_survive_a_kill_a_stalled_expert_and_a_postgres_restart(tmp_path: Path, config_dir: Path) -> None:
    start().close()  # skips (or fails under ENGINE_REQUIRE_POSTGRES) when no server can run here
    experts = yaml.safe_load((config_dir / "experts.yaml").read_text())
    experts["experts"]["semantic"]["enabled"] = False  # the model load is not what this test is about
    (config_dir / "experts.yaml").write_text(yaml.safe_dump(experts, sort_keys=False))
    files = {f"pkg/mod{i}.py": f"def handler_{i}(request):\n    return retry_policy_{i}(request)\n" for i in range(12)}
    ws = make_repo(tmp_path / "ws", files)
    result = run_load(
        LoadOptions(
            workspaces=[ws],
            config_dir=config_dir,
            replicas=[1],
            concurrency=[2],
            duration_s=3,
            chaos_s=8,
            n_questions=8,
        )
    )
    (ladder,) = result["ladder"]
    assert ladder["errors"] == 0 and ladder["answered"] > 0 and ladder["receipts"]["ok"]
    killed = result["chaos"]["replica_killed"]
    assert killed["events"].get("killed_done") is not None
    assert killed["errors_on_survivors"] == 0 and killed["answered_after_kill"] > 0
    assert killed["receipts"]["ok"]  # what the killed replica answered before it died is stored too
    stalled = result["chaos"]["expert_stalled"]
    assert stalled["errors"] == 0 and stalled["receipts"]["ok"]
    assert {"stall_on_done", "stall_off_done"} <= set(stalled["events"])
    restarted = result["chaos"]["postgres_restarted"]
    assert restarted["events"].get("pg_restart_done") is not None  # the server really went down and up
    assert restarted["answered_after_restart"] > 0 and restarted["receipts"]["ok"]
    assert result["audit"]["ok"] and result["audit"]["chains"] == result["replica_processes"] == 4
    assert "audit of the whole log" in load_table(result)
