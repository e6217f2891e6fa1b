"""docs/contributing.md stays true: its TODO/FIXME expert, copied from the page into a temporary
folder, loads as the adapter ``todo`` through the registry (no table edited), passes config
validation with the page's experts.yaml and priors.yaml entries, and answers through the router."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

import engine.experts
from engine.config import load_config
from engine.errors import SchemaError
from engine.experts import adapter_class

from .conftest import ROOT, git
from .helpers import ask

DOC = ROOT / "docs" / "contributing.md"
QUESTION = "which TODO notes mention the retry backoff"


def doc_block(first_line: str) -> str:
    """The fenced code block of the page whose first line is ``first_line``."""
    for block in re.findall(r"```\w*\n(.*?)```", DOC.read_text(), flags=re.S):
        if block.startswith(first_line):
            return str(block)
    raise AssertionError(f"docs/contributing.md has no block starting {first_line!r}")


@pytest.fixture
def todo_adapter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The page's module, placed where the registry looks for ``engine.experts.todo``."""
    folder = tmp_path / "adapters"
    folder.mkdir()
    module = folder / "todo.py"
    module.write_text(doc_block("# engine/experts/todo.py"))
    monkeypatch.setattr(engine.experts, "__path__", [*engine.experts.__path__, str(folder)])
    adapter_class.cache_clear()
    yield module
    adapter_class.cache_clear()
    sys.modules.pop("engine.experts.todo", None)


def add_to_config(config_dir: Path) -> None:
    """Apply the page's experts.yaml and priors.yaml snippets to a copy of the repo's config."""
    experts = yaml.safe_load((config_dir / "experts.yaml").read_text())
    experts["experts"].update(yaml.safe_load(textwrap.dedent(doc_block("# experts.yaml, under experts:"))))
    (config_dir / "experts.yaml").write_text(yaml.safe_dump(experts, sort_keys=False))
    priors = yaml.safe_load((config_dir / "priors.yaml").read_text())
    for klass, weights in yaml.safe_load(textwrap.dedent(doc_block("# priors.yaml, under classes:"))).items():
        priors["classes"][klass].update(weights)
    (config_dir / "priors.yaml").write_text(yaml.safe_dump(priors, sort_keys=False))


def test_the_walkthrough_expert_runs_through_the_router(todo_adapter: Path, indexed: Path, config_dir: Path) -> None:
    repo = indexed / "alpha"
    (repo / "alpha" / "backoff.py").write_text(
        "def delay(attempt):\n"
        "    # TODO: make the retry backoff grow exponentially\n"
        "    return 1\n\n\n"
        "# FIXME: the upload size limit is read twice\n"
    )
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "Leave notes")
    add_to_config(config_dir)
    cfg = load_config(config_dir)  # what `engine validate` checks: adapter found, settings valid
    assert cfg.experts["todo"].freshness == "live"  # the adapter's default, from its capabilities

    r = ask(config_dir, indexed, QUESTION)
    receipt = r.response["receipt"]
    assert r.error is None and receipt["classifier"]["class"] == "conceptual"
    assert "todo" in receipt["experts_selected"]["selected"]
    assert receipt["per_expert"]["todo"]["status"] == "ok" and receipt["per_expert"]["todo"]["result_count"] == 1
    assert receipt["sub_queries"]["todo"]["words"] == ["notes", "mention", "retry", "backoff"]
    found = [it for it in r.response["items"] if any(s["expert"] == "todo" for s in it["sources"])]
    assert [(it["path"], it["range"]["start_line"]) for it in found] == [("alpha/backoff.py", 2)]
    assert found[0]["content"] == "# TODO: make the retry backoff grow exponentially"


def test_a_typo_in_the_walkthrough_settings_fails_validation(todo_adapter: Path, config_dir: Path) -> None:
    add_to_config(config_dir)
    text = (config_dir / "experts.yaml").read_text().replace("    markers:", "    marker:")
    (config_dir / "experts.yaml").write_text(text)
    with pytest.raises(SchemaError) as err:
        load_config(config_dir)
    assert err.value.path == "experts/todo/settings/marker" and "unknown key 'marker'" in err.value.message


def test_the_walkthrough_module_is_lint_clean(todo_adapter: Path) -> None:
    ruff = str(Path(sys.executable).with_name("ruff"))
    for argv in (["check"], ["format", "--check"]):
        res = subprocess.run([ruff, *argv, "--config", str(ROOT / "pyproject.toml"), str(todo_adapter)],
                             text=True, capture_output=True)  # fmt: skip
        assert res.returncode == 0, res.stdout + res.stderr
