"""``engine validate`` names the right file and line for every field (issue 12 item 5).

Systematic: every key of the shipped experts.yaml, priors.yaml and router pipeline gets an unknown
sibling inserted before it, and every scalar value is replaced by a mapping; whatever the config
loader or the graph check says about it must point at that very line of that file (or accept it).
Then the cases named in the issue, one by one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from engine.config import load_config
from engine.errors import GraphError, SchemaError, SpecError
from engine.graph import build_graph

FILES = ["experts.yaml", "priors.yaml", "pipelines/router.yaml"]


def _validate(config_dir: Path) -> None:
    cfg = load_config(config_dir)
    for spec in cfg.pipelines.values():
        build_graph(spec, cfg)


def _keys(node: yaml.Node) -> Iterator[tuple[yaml.Node, yaml.Node]]:
    """Keys of block mappings (a flow mapping ``{a: 1}`` cannot take an inserted line)."""
    if isinstance(node, yaml.MappingNode) and not node.flow_style:
        for k, v in node.value:
            yield k, v
            yield from _keys(v)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            yield from _keys(item)


def _block_keys(text: str) -> list[tuple[int, int, yaml.Node, yaml.Node]]:
    """(line index, column, key, value) of every key that starts its own line (not a flow mapping,
    not the first key of a ``- `` sequence item)."""
    lines = text.splitlines()
    out = []
    for k, v in _keys(yaml.compose(text)):
        line, col = k.start_mark.line, k.start_mark.column
        if lines[line][:col].strip() == "":
            out.append((line, col, k, v))
    return out


def _where(exc: SpecError) -> tuple[str, int | None]:
    assert isinstance(exc, SchemaError | GraphError), exc
    return Path(str(exc.file)).name, exc.line


@pytest.mark.parametrize("rel", FILES)
def test_every_key_and_value_is_reported_at_its_own_line(config_dir: Path, rel: str) -> None:
    file = config_dir / rel
    original = file.read_text()
    lines = original.splitlines()
    mutations: list[tuple[str, int]] = []
    for line, col, _key, value in _block_keys(original):
        unknown = [*lines[:line], " " * col + "zz_unknown_key: 1", *lines[line:]]
        mutations.append(("\n".join(unknown) + "\n", line + 1))
        if isinstance(value, yaml.ScalarNode) and value.start_mark.line == line and value.style is None:
            changed = list(lines)
            text = changed[line]
            changed[line] = text[: value.start_mark.column] + "{zz: [1]}" + text[value.end_mark.column :]
            mutations.append(("\n".join(changed) + "\n", line + 1))
    reported = 0
    try:
        for text, expected_line in mutations:
            file.write_text(text)
            try:
                _validate(config_dir)
            except SpecError as exc:
                assert _where(exc) == (file.name, expected_line), (exc.message, text.splitlines()[expected_line - 1])
                reported += 1
    finally:
        file.write_text(original)
    assert reported >= len(mutations) // 2, f"only {reported} of {len(mutations)} mutations were errors"


def _edit(file: Path, old: str, new: str) -> None:
    text = file.read_text()
    assert old in text, old
    file.write_text(text.replace(old, new, 1))


def _line_with(file: Path, needle: str) -> int:
    return next(i for i, line in enumerate(file.read_text().splitlines(), 1) if needle in line)


@pytest.mark.parametrize(
    "old,new,needle",
    [
        ("default_experts: [bm25, semantic, ripgrep]", "default_experts: [bm25, nosuch, ripgrep]", "default_experts"),
        ("  identifier:\n    ripgrep: 1.0", "  identifier:\n    ripgrep: 1.0\n    nosuch: 0.5", "nosuch"),
        ("default_weights:\n  bm25: 1.0", "default_weights:\n  bm25: 1.0\n  nosuch: 0.3", "nosuch"),
        ("  snippet_chars: 800", "  snippet_chars: 800\n  bogus_key: 1", "bogus_key"),
    ],
)
def test_priors_errors_named_in_the_issue(config_dir: Path, old: str, new: str, needle: str) -> None:
    """An unknown expert in priors.yaml had no line; an unknown key was reported three lines off."""
    priors = config_dir / "priors.yaml"
    _edit(priors, old, new)
    with pytest.raises(SchemaError) as err:
        load_config(config_dir)
    assert (Path(err.value.file).name, err.value.line) == ("priors.yaml", _line_with(priors, needle))


@pytest.mark.parametrize(
    "old,new,needle,match",
    [
        ("    kind: dispatch", "    kind: teleport", "teleport", "unknown kind"),
        ("    after: [dispatch]", "    after: [ghost]", "ghost", "unknown node 'ghost'"),
        ("        docs: docs\n", "        docs: nowhere\n", "nowhere", "is not another pipeline"),
        ("      default: conceptual", "      default: nowhere", "nowhere", "is not another pipeline"),
        (
            "        history: history\n",
            "        history: history\n        wizardry: docs\n",
            "wizardry",
            "unknown class",
        ),
    ],
)
def test_graph_errors_name_the_pipeline_file_and_line(
    config_dir: Path, old: str, new: str, needle: str, match: str
) -> None:
    router = config_dir / "pipelines" / "router.yaml"
    _edit(router, old, new)
    with pytest.raises(GraphError, match=match) as err:
        _validate(config_dir)
    assert err.value.file == str(router) and err.value.line == _line_with(router, needle)


def test_an_unknown_expert_in_a_node_setting_points_at_the_setting(config_dir: Path) -> None:
    gate = next(p for p in sorted((config_dir / "pipelines").glob("*.yaml")) if "kind: gate" in p.read_text())
    text = gate.read_text()
    gate.write_text(text.replace("    kind: gate\n", "    kind: gate\n    settings:\n      experts: [nope]\n", 1))
    with pytest.raises(GraphError, match="unknown expert 'nope'") as err:
        _validate(config_dir)
    assert err.value.file == str(gate) and err.value.line == _line_with(gate, "experts: [nope]")


def test_engine_validate_prints_file_and_line(config_dir: Path, tmp_path: Path) -> None:
    priors = config_dir / "priors.yaml"
    _edit(priors, "  identifier:\n    ripgrep: 1.0", "  identifier:\n    ripgrep: 1.0\n    nosuch: 0.5")
    res = subprocess.run(
        [sys.executable, "-m", "engine.cli", "validate", "--config-dir", str(config_dir)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert res.returncode == 2
    err = json.loads(res.stderr.strip().splitlines()[-1])
    line = _line_with(priors, "nosuch")
    assert err["line"] == line and err["file"] == str(priors) and err["path"] == "classes/identifier/nosuch"
    assert err["message"].startswith(f"{priors}:{line} at classes/identifier/nosuch: unknown expert 'nosuch'")


@pytest.mark.parametrize("rel", FILES)
def test_a_key_given_twice_is_an_error_at_its_second_line(config_dir: Path, rel: str) -> None:
    """Found by an exploratory run: `k: 60` then `k: 5` in priors.yaml validated OK, the last
    winning silently. Every block key of the shipped files, repeated right after its own line."""
    file = config_dir / rel
    original = file.read_text()
    lines = original.splitlines()
    checked = 0
    for line, col, key, value in _block_keys(original):
        if not (isinstance(value, yaml.ScalarNode) and value.start_mark.line == line):
            continue  # a one-line `key: value` only: repeat that line
        twice = [*lines[: line + 1], " " * col + lines[line][col:], *lines[line + 1 :]]
        file.write_text("\n".join(twice) + "\n")
        with pytest.raises(SchemaError) as err:
            _validate(config_dir)
        assert _where(err.value) == (Path(rel).name, line + 2) and "given twice" in err.value.message, key.value
        checked += 1
    file.write_text(original)
    assert checked > 5


def test_merge_keys_non_finite_numbers_and_alias_bombs(config_dir: Path) -> None:
    """Found by an exploratory run: `<<: {...}` (ordinary YAML) was an internal error that killed the
    CLI daemon; `.nan` / `.inf` weights validated and made every fused score NaN (and the JSON output
    invalid); a 2 KB file of nested aliases took 35 s and 700 MB to validate."""
    priors = config_dir / "priors.yaml"
    original = priors.read_text()
    assert "\ngate:\n" in original
    priors.write_text(original.replace("\ngate:\n", "\ngate:\n  <<: {min_prior: 0.2}\n", 1))
    assert load_config(config_dir).priors.gate.min_prior == 0.1  # merged; the explicit key overrides it
    for bad in (".nan", ".inf", "-.inf"):
        priors.write_text(original.replace("bm25: 0.5", f"bm25: {bad}", 1))
        with pytest.raises(SchemaError) as err:
            _validate(config_dir)
        assert "finite" in err.value.message and _where(err.value) == ("priors.yaml", _line_with(priors, bad)), bad
    bomb = "\n".join(
        ["l0: &L0 [" + ", ".join(["x"] * 9) + "]"]
        + [f"l{i}: &L{i} [" + ", ".join([f"*L{i - 1}"] * 9) + "]" for i in range(1, 9)]
    )
    (config_dir / "pipelines" / "router.yaml").write_text(
        (config_dir / "pipelines" / "router.yaml").read_text()
        + "\nx_bomb:\n"
        + "\n".join("  " + ln for ln in bomb.splitlines())
        + "\n"
    )
    priors.write_text(original)
    with pytest.raises(SchemaError, match="aliases are expanded"):
        _validate(config_dir)


def test_the_routers_version_covers_its_default_pipeline(config_dir: Path) -> None:
    """Found by an exploratory run: a pipeline reached only as the dispatch's `default` was not in the
    router's config_version, so editing it kept serving cached answers made with the old one."""
    router = config_dir / "pipelines" / "router.yaml"
    router.write_text(router.read_text().replace("        conceptual: conceptual\n", ""))
    before = load_config(config_dir)
    conceptual = config_dir / "pipelines" / "conceptual.yaml"
    conceptual.write_text(conceptual.read_text().replace("description: ", "description: edited. ", 1))
    after = load_config(config_dir)
    assert "conceptual" not in yaml.safe_load(router.read_text())["nodes"][1]["settings"]["routes"]
    assert before.config_version(before.pipelines["router"]) != after.config_version(after.pipelines["router"])


def test_a_yml_pipeline_is_named_not_ignored(config_dir: Path) -> None:
    """Found by an exploratory run: pipelines/mine.yml was silently not loaded, and `engine run
    pipelines/mine.yml` said to move it into the folder it was in."""
    from engine.errors import SpecError

    stray = config_dir / "pipelines" / "mine.yml"
    stray.write_text(
        (config_dir / "pipelines" / "identifier.yaml").read_text().replace("name: identifier", "name: mine")
    )
    with pytest.raises(SpecError, match=r"end in \.yaml; rename it"):
        load_config(config_dir)
