"""Adapters declare what they are (issue 9): settings schemas checked when the config loads (file,
line, path), capabilities instead of adapter-name checks, one precision-class table, and a
registry that resolves short names only — to a module of ``engine.experts`` or an installed
entry point."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from engine.config import load_config
from engine.errors import EXPERT_STATUSES, SchemaError, SpecError
from engine.experts import ENTRY_POINT_GROUP, adapter_class, known_adapters
from engine.experts.indexed import IndexedExpert
from engine.spec import load_schema
from engine.types import ITEM_KINDS, PRECISION, PRECISION_CLASSES, TIERS

from ..helpers import ask


def _edit_expert(config_dir: Path, name: str, **fields: object) -> None:
    data = yaml.safe_load((config_dir / "experts.yaml").read_text())
    data["experts"][name].update(fields)
    (config_dir / "experts.yaml").write_text(yaml.safe_dump(data, sort_keys=False))


def _line_of(config_dir: Path, needle: str) -> int:
    lines = (config_dir / "experts.yaml").read_text().splitlines()
    return next(n for n, line in enumerate(lines, start=1) if needle in line)


@pytest.mark.parametrize(
    "name,settings,path,reason",
    [
        ("ripgrep", {"max_count_per_file": "many"}, "experts/ripgrep/settings/max_count_per_file", "not of type"),
        # an unknown key is reported at that key (it was reported at the settings mapping)
        ("bm25", {"stored_chars": 1200, "stored_char": 5}, "experts/bm25/settings/stored_char", "unknown key"),
        ("semantic", {"model": "gpt-9"}, "experts/semantic/settings/model", "is not one of"),
        ("semantic", {"max_len": 4096}, "experts/semantic/settings/max_len", "maximum"),
        ("git", {"max_commits": 0}, "experts/git/settings/max_commits", "minimum"),
        ("mcp-server-git", {"tool": "git_log"}, "experts/mcp-server-git/settings", "exactly one of command, url"),
    ],
)
def test_bad_settings_fail_at_load_with_file_line_and_path(
    config_dir: Path, name: str, settings: dict[str, object], path: str, reason: str
) -> None:
    _edit_expert(config_dir, name, settings=settings)
    with pytest.raises(SchemaError) as err:
        load_config(config_dir)
    e = err.value
    assert e.file.endswith("experts.yaml") and e.path == path and reason in e.message
    key = path.split("/")[-1]
    expected = _line_of(config_dir, f"{key}:" if key != "settings" else f"  {name}:")
    if key != "settings":  # the line of the offending key itself
        assert e.line == expected
    else:  # a rule about the whole mapping: the settings key's line, below the expert's
        assert e.line is not None and e.line > expected
    assert e.exit_code == 2


def test_unknown_adapter_fails_at_load_listing_the_known_ones(config_dir: Path) -> None:
    _edit_expert(config_dir, "ripgrep", adapter="grep-ng")
    with pytest.raises(SchemaError) as err:
        load_config(config_dir)
    assert err.value.path == "experts/ripgrep/adapter" and "ripgrep" in err.value.message
    assert err.value.line == _line_of(config_dir, "adapter: grep-ng")


def test_a_bad_setting_edit_keeps_the_last_good_config_serving(indexed: Path, config_dir: Path) -> None:
    from engine.runtime import Router
    from engine.workspace import Workspace

    router = Router(config_dir, Workspace.open([indexed]))
    good = router.config()
    _edit_expert(config_dir, "ripgrep", settings={"max_count_per_file": -1})
    assert router.config() is good  # rejected (and logged); the running router keeps the last good config


def test_adapter_names_are_short_names_never_paths() -> None:
    for bad in ("os.path", "engine.experts.ripgrep:RipgrepExpert", "../ripgrep", "Ripgrep"):
        with pytest.raises(SpecError, match="short names"):
            adapter_class(bad)
    with pytest.raises(SpecError, match="known adapters"):
        adapter_class("base")  # a support module of the package is not an adapter
    assert {"ripgrep", "bm25", "git", "semantic", "symbols", "typed", "docs", "mcp", "http", "command", "fake"} <= set(
        known_adapters()
    )


def test_every_builtin_adapter_is_its_module_and_declares_itself() -> None:
    for name in known_adapters():
        cls = adapter_class(name)
        assert cls.adapter == name and cls.__module__ == f"engine.experts.{name}"
        assert cls.needs_index == issubclass(cls, IndexedExpert)
    assert adapter_class("git").reads_history and not adapter_class("ripgrep").reads_history
    assert [n for n in known_adapters() if adapter_class(n).needs_index] == [
        "bm25",
        "docs",
        "semantic",
        "symbols",
        "typed",
    ]


def test_an_installed_distribution_registers_an_adapter_by_entry_point(tmp_path: Path) -> None:
    """Another distribution's adapter, found the way ``pip install`` makes it findable."""
    site = tmp_path / "site"
    (site / "acme_experts").mkdir(parents=True)
    (site / "acme_experts" / "__init__.py").write_text(
        "from engine.experts.fake import FakeExpert\n\n\nclass EchoExpert(FakeExpert):\n    adapter = 'acme-echo'\n"
    )
    dist = site / "acme_experts-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-experts\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nacme-echo = acme_experts:EchoExpert\n")
    sys.path.insert(0, str(site))
    try:
        cls = adapter_class("acme-echo")
        assert cls.__name__ == "EchoExpert" and "acme-echo" in known_adapters()
    finally:
        sys.path.remove(str(site))
        sys.modules.pop("acme_experts", None)
        adapter_class.cache_clear()


def test_git_is_gated_by_its_capability_not_its_name(tmp_path: Path, config_dir: Path) -> None:
    plain = tmp_path / "plain"  # a folder that is not a git repository
    plain.mkdir()
    (plain / "notes.py").write_text("def jitter():\n    return 1\n")
    r = ask(config_dir, plain, "when was jitter added to the retry backoff").response["receipt"]
    assert r["experts_selected"]["why"]["git"] == "no git repository in scope"


def test_one_precision_table_and_the_schemas_agree() -> None:
    experts = load_schema("experts")["properties"]["experts"]["additionalProperties"]["properties"]
    budget = load_schema("request")["properties"]["budget"]["properties"]
    assert experts["precision_class"]["enum"] == list(PRECISION_CLASSES) == list(PRECISION)
    assert budget["min_precision_class"]["enum"] == list(PRECISION_CLASSES)
    item = load_schema("response")["$defs"]["item"]["properties"]
    assert item["tier"]["enum"] == list(TIERS) and item["kind"]["enum"] == list(ITEM_KINDS)
    per_expert = load_schema("receipt")["properties"]["per_expert"]["additionalProperties"]["properties"]
    assert per_expert["status"]["enum"] == list(EXPERT_STATUSES)
    ranks = {pc.name: pc.rank for pc in PRECISION.values()}
    assert ranks["typed"] > ranks["structural"] > ranks["hybrid"] > ranks["lexical"] > ranks["semantic"]
    assert [pc.name for pc in PRECISION.values() if pc.similarity_only] == ["semantic"]
