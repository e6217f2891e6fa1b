"""Config found wherever you stand (issue 12 item 2): one resolution for every verb —
``--config-dir``, a pipeline file's own folder, ``$ENGINE_CONFIG_DIR``, the workspace's
``.engine.yaml``, the packaged defaults — and the receipt names the folder and why."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine.configdir import packaged_config_dir, resolve_config, resolve_run
from engine.errors import SchemaError, SpecError
from tests.conftest import ROOT
from tests.helpers import plain_pynacl_verify


def _engine(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k != "ENGINE_CONFIG_DIR"}
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**full, **(env or {})},
        timeout=300,
    )


def _receipt(res: subprocess.CompletedProcess[str]) -> dict:
    assert res.returncode == 0, res.stderr
    receipt = json.loads(res.stdout)["receipt"]
    assert plain_pynacl_verify(receipt)
    return receipt


def _point(root: Path, config_dir: str) -> None:
    (root / ".engine.yaml").write_text(f"version: 1\nconfig_dir: {config_dir}\n")


def test_the_order_of_sources(tmp_path: Path, config_dir: Path) -> None:
    ws, other = tmp_path / "ws", tmp_path / "other"
    ws.mkdir()
    shutil.copytree(config_dir, other)
    assert resolve_config(None, [ws], env={}).source == "packaged"
    assert resolve_config(None, [ws], env={}).path == packaged_config_dir()
    _point(ws, str(config_dir))
    assert resolve_config(None, [ws], env={}) == resolve_config(None, [ws], env={}).__class__(config_dir, "workspace")
    env = {"ENGINE_CONFIG_DIR": str(other)}
    assert (resolve_config(None, [ws], env=env).path, resolve_config(None, [ws], env=env).source) == (
        other,
        "ENGINE_CONFIG_DIR",
    )
    file = other / "pipelines" / "docs.yaml"
    ref = resolve_config(None, [ws], env=env, pipeline_file=file)
    assert (ref.path, ref.source) == (other, "pipeline-file")
    ref = resolve_config(tmp_path / "x", [ws], env=env, pipeline_file=file)
    assert (ref.path, ref.source) == (tmp_path / "x", "--config-dir")


def test_the_first_root_with_a_pointer_wins_and_paths_are_relative_to_it(tmp_path: Path, config_dir: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    shutil.copytree(config_dir, b / "tools" / "search")
    _point(b, "tools/search")
    ref = resolve_config(None, [a, b], env={})
    assert (ref.path, ref.source) == (b / "tools" / "search", "workspace")


def test_pipeline_argument_is_a_name_a_file_or_a_file_of_the_config(tmp_path: Path, config_dir: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    _point(ws, str(config_dir))
    assert resolve_run("router", None, [ws], tmp_path, env={})[1] == "router"
    for given in ("pipelines/docs.yaml", "docs.yaml"):  # not there from cwd: taken from the config folder
        ref, target = resolve_run(given, None, [ws], tmp_path, env={})
        assert target == config_dir / "pipelines" / "docs.yaml" and ref.source == "workspace"
    elsewhere = tmp_path / "mine" / "pipelines"
    shutil.copytree(config_dir, tmp_path / "mine")
    ref, target = resolve_run("mine/pipelines/docs.yaml", None, [ws], tmp_path, env={})
    assert target == elsewhere / "docs.yaml" and (ref.path, ref.source) == (tmp_path / "mine", "pipeline-file")
    with pytest.raises(SpecError, match="not found"):
        resolve_run("pipelines/nope.yaml", None, [ws], tmp_path, env={})


@pytest.mark.parametrize(
    "text,line,match",
    [
        ("version: 1\nconfig_dir: cfg\nextra: 1\n", 3, "unknown key 'extra'"),
        ("version: 1\n", 1, "'config_dir' is a required property"),
        ("version: 1\nconfig_dir: nowhere\n", 2, "holds no experts.yaml"),
    ],
)
def test_a_bad_pointer_file_is_a_config_error_with_its_line(tmp_path: Path, text: str, line: int, match: str) -> None:
    (tmp_path / ".engine.yaml").write_text(text)
    with pytest.raises(SchemaError, match=match) as err:
        resolve_config(None, [tmp_path], env={})
    assert err.value.file == str(tmp_path / ".engine.yaml") and err.value.line == line


def test_run_by_name_from_any_directory_names_the_config_in_the_receipt(
    indexed: Path, config_dir: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "somewhere" / "else"
    elsewhere.mkdir(parents=True)
    question = ["-q", "where is RetryPolicy defined", "-w", str(indexed), "-f", "json", "--no-cache"]
    packaged = _receipt(_engine("run", "router", *question, cwd=elsewhere))
    assert packaged["config"] == {"path": str(packaged_config_dir()), "source": "packaged"}

    _point(indexed, str(config_dir))
    mine = _receipt(_engine("run", "router", *question, cwd=elsewhere))
    assert mine["config"] == {"path": str(config_dir), "source": "workspace"}
    assert mine["pipeline"].startswith("router")

    env = {"ENGINE_CONFIG_DIR": str(packaged_config_dir())}
    assert (
        _receipt(_engine("run", "docs", *question, cwd=elsewhere, env=env))["config"]["source"] == "ENGINE_CONFIG_DIR"
    )
    as_file = _receipt(_engine("run", "pipelines/identifier.yaml", *question, cwd=elsewhere))
    assert as_file["config"]["source"] == "workspace" and as_file["pipeline"] == "identifier"
    flag = _receipt(_engine("run", "router", *question, "--config-dir", str(config_dir), cwd=elsewhere))
    assert flag["config"] == {"path": str(config_dir), "source": "--config-dir"}

    unknown = _engine("run", "nope", *question, cwd=elsewhere)
    assert unknown.returncode == 2 and "pipeline 'nope' not found" in json.loads(unknown.stderr)["message"]


def test_every_verb_that_reads_config_resolves_it_the_same_way(indexed: Path, config_dir: Path, tmp_path: Path) -> None:
    _point(indexed, str(config_dir))
    shown = _engine("validate", "-w", str(indexed), cwd=tmp_path)
    assert shown.returncode == 0 and f"config {config_dir} (workspace)" in shown.stdout, shown.stderr
    (config_dir / "priors.yaml").write_text((config_dir / "priors.yaml").read_text().replace("k: 60", "k: -3"))
    for verb in (["validate"], ["index", "--only", "bm25"], ["doctor", "-f", "json"]):
        res = _engine(*verb, "-w", str(indexed), cwd=tmp_path)
        out = res.stderr if verb[0] != "doctor" else res.stdout
        assert res.returncode != 0 and str(config_dir / "priors.yaml") in out, (verb, res.stdout, res.stderr)


def test_the_build_step_ships_the_default_config_and_an_install_uses_it(tmp_path: Path, workspace_dir: Path) -> None:
    """`pip install .` must work from any directory: the wheel build (setup.py) copies experts.yaml,
    priors.yaml, classifier.yaml and pipelines/ into the package as engine/defaults/, byte for byte the repository-root
    files (their one home). Here: that build step on a copy of the package, then the copy, asked from
    a directory holding no config at all, answers with the shipped defaults. (The real `pip install .`
    into a fresh venv is measured in docs/adr/0014-cli-daemon.md; it needs the network for the deps.)"""
    spec = importlib.util.spec_from_file_location("engine_setup", ROOT / "setup.py")
    assert spec is not None and spec.loader is not None
    setup = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(setup)  # not __main__: defines the build step without running setup()
    site = tmp_path / "site"
    shutil.copytree(ROOT / "engine", site / "engine", ignore=shutil.ignore_patterns("__pycache__"))
    setup.copy_defaults(site / "engine")
    defaults = site / "engine" / "defaults"
    shipped = sorted(p.relative_to(defaults) for p in defaults.rglob("*.yaml"))
    pipelines = sorted(f"pipelines/{f.name}" for f in (ROOT / "pipelines").glob("*.yaml"))
    expected = sorted(Path(p) for p in ["experts.yaml", "priors.yaml", "classifier.yaml", *pipelines])
    assert shipped == expected and len(pipelines) >= 7
    for rel in expected:
        assert (defaults / rel).read_bytes() == (ROOT / rel).read_bytes()
    code = (
        f"import sys; sys.path.insert(0, {str(site)!r}); sys.argv = ['engine', *sys.argv[1:]]; import engine.cli; "
        "assert engine.cli.__file__.startswith(sys.path[0]), engine.cli.__file__; engine.cli.main()"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, "run", "router", "-w", str(workspace_dir), "-q", "RetryPolicy", "-f", "json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
        env={k: v for k, v in os.environ.items() if k != "ENGINE_CONFIG_DIR"},
    )
    assert _receipt(res)["config"] == {"path": str(defaults), "source": "packaged"}


def test_a_repository_config_may_not_enable_an_expert_that_runs_a_program(
    indexed: Path, config_dir: Path, tmp_path: Path
) -> None:
    """Found by an exploratory run: a cloned repository's .engine.yaml named a config whose
    `command` expert wrote a file on `engine run`. A workspace-chosen config may tune priors and
    pipelines; what runs here takes the user's own choice of the folder."""
    import yaml

    planted = tmp_path / "planted"
    raw = yaml.safe_load((config_dir / "experts.yaml").read_text())
    raw["experts"]["pwn"] = {
        "adapter": "command",
        "precision_class": "lexical",
        "timeout_ms": 3000,
        "settings": {"argv": ["touch", str(planted), "{{ term }}"], "required": ["term"]},
    }
    (config_dir / "experts.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    _point(indexed, str(config_dir))
    question = ["-q", '"RetryPolicy"', "-w", str(indexed), "-f", "json", "--no-cache", "--no-daemon"]
    res = _engine("run", "router", *question, cwd=tmp_path)
    assert res.returncode == 2 and not planted.exists()
    err = json.loads(res.stderr)
    assert err["file"] == str(config_dir / "experts.yaml") and err["line"] > 1
    assert "'pwn'" in err["message"] and f"--config-dir {config_dir}" in err["message"]
    # the user's own choice of the same folder runs it
    ok = _engine("run", "router", *question, "--config-dir", str(config_dir), cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr


def test_a_stray_file_named_like_a_pipeline_does_not_hijack_it(tmp_path: Path) -> None:
    """Found by an exploratory run: a file `router` in the current directory made `engine run
    router` fail as an invalid pipeline file. Only a .yaml name or a path is taken as a file."""
    (tmp_path / "router").write_text("not a pipeline\n")
    ref, target = resolve_run("router", None, [tmp_path], tmp_path, env={})
    assert target == "router" and ref.source == "packaged"
    (tmp_path / "mine.yaml").write_text("version: 1\n")
    assert resolve_run("mine.yaml", None, [tmp_path], tmp_path, env={})[1] == (tmp_path / "mine.yaml").resolve()
