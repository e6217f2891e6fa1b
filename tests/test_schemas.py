"""``engine schema NAME`` prints a schema a consumer can use alone (issue 12 item 8): the schemas it
references are bundled under ``$defs``, so plain ``jsonschema`` — no registry, no network —
validates a real response with it, receipt included.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from referencing.exceptions import Unresolvable

from engine.schema_bundle import bundle, bundled_schema
from engine.spec import load_schema

from .helpers import ask

NAMES = ("request", "response", "receipt", "experts", "priors", "pipeline")


def printed(name: str) -> dict[str, Any]:
    res = subprocess.run(
        [sys.executable, "-m", "engine.cli", "schema", name], capture_output=True, text=True, check=True
    )
    schema: dict[str, Any] = json.loads(res.stdout)
    return schema


def refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return own + [r for v in node.values() for r in refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in refs(v)]
    return []


def test_a_real_response_validates_with_plain_jsonschema_and_nothing_else(indexed: Path, config_dir: Path) -> None:
    schema = printed("response")
    jsonschema.Draft202012Validator.check_schema(schema)
    assert all(r.startswith("#") for r in refs(schema)), refs(schema)  # nothing to fetch, nothing to register
    assert schema["properties"]["receipt"] == {"$ref": "#/$defs/receipt"}
    assert "$id" not in schema["$defs"]["receipt"] and "$schema" not in schema["$defs"]["receipt"]

    fused = ask(config_dir, indexed, "where is FileSystemStorage defined").response
    separate = ask(config_dir, indexed, '"RetryPolicy"', mode="separate").response
    failed = ask(config_dir, indexed, "   ").response  # an invalid request is answered and receipted too
    for response in (fused, separate, failed):
        validator = jsonschema.Draft202012Validator(schema)  # no registry: the document stands alone
        assert list(validator.iter_errors(response)) == []
    # the bundled receipt schema does its job: a receipt without its signature fails, at the receipt
    broken = {**fused, "receipt": {k: v for k, v in fused["receipt"].items() if k != "signature"}}
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(broken))
    assert errors and errors[0].absolute_path[0] == "receipt" and "signature" in errors[0].message

    # the file as shipped (by $id) is what a consumer could not use alone: the bug this fixes
    with pytest.raises(Unresolvable):
        jsonschema.Draft202012Validator(load_schema("response")).validate(fused)


@pytest.mark.parametrize("name", NAMES)
def test_every_printed_schema_stands_alone(name: str) -> None:
    schema = printed(name)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert all(r.startswith("#") for r in refs(schema)), (name, refs(schema))
    assert schema == bundled_schema(name)
    assert schema["$id"] == load_schema(name)["$id"]  # still the same schema, by name


def test_unknown_schema_is_a_classified_error() -> None:
    res = subprocess.run([sys.executable, "-m", "engine.cli", "schema", "nope"], capture_output=True, text=True)
    assert res.returncode == 2 and "unknown schema" in res.stdout + res.stderr


def test_bundling_nests_rebases_and_refuses_a_collision() -> None:
    base = "https://x.test/"
    schemas: dict[str, dict[str, Any]] = {
        "a": {
            "$id": base + "a",
            "type": "object",
            "properties": {"b": {"$ref": base + "b"}, "bx": {"$ref": base + "b#/$defs/x"}, "me": {"$ref": base + "a"}},
        },
        "b": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": base + "b",
            "$defs": {"x": {"type": "integer"}},
            "type": "object",
            "properties": {"x": {"$ref": "#/$defs/x"}, "c": {"$ref": base + "c"}},
        },
        "c": {"$id": base + "c", "type": "string", "minLength": 2},
    }
    ids = {s["$id"]: n for n, s in schemas.items()}
    out = bundle("a", schemas.__getitem__, ids)
    assert out["properties"] == {
        "b": {"$ref": "#/$defs/b"},
        "bx": {"$ref": "#/$defs/b/$defs/x"},
        "me": {"$ref": "#"},
    }
    assert out["$defs"]["b"]["properties"] == {"x": {"$ref": "#/$defs/b/$defs/x"}, "c": {"$ref": "#/$defs/c"}}
    assert "$id" not in out["$defs"]["b"] and "$schema" not in out["$defs"]["b"]
    v = jsonschema.Draft202012Validator(out)
    assert v.is_valid({"b": {"x": 1, "c": "ok"}, "bx": 2, "me": {}})
    assert not v.is_valid({"b": {"c": "o"}}) and not v.is_valid({"bx": "nope"}) and not v.is_valid({"me": {"bx": 1.5}})
    assert schemas["b"]["properties"]["x"] == {"$ref": "#/$defs/x"}  # the sources are not touched

    schemas["a"]["$defs"] = {"b": {"type": "null"}}
    with pytest.raises(ValueError, match=r"\$defs/b exists"):
        bundle("a", schemas.__getitem__, ids)
