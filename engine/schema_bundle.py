"""Self-contained JSON Schemas: a shipped schema with every shipped schema it references bundled in.

The schemas refer to each other by ``$id`` (the response's ``receipt`` is
``{"$ref": "https://search-router.dev/schemas/receipt/1"}``), which only a validator given a
registry can resolve. :func:`bundled_schema` copies each referenced schema under
``$defs/<name>`` (without its own ``$schema``/``$id``, its internal ``#/...`` references moved
under that prefix) and points the reference there, recursively — so ``engine schema response``
prints a document any JSON Schema 2020-12 validator can use alone, with no registry and no
network. The files on disk stay as they are (one schema per concept).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from functools import cache
from importlib import resources
from typing import Any

from .yamlfile import load_schema


def shipped_ids() -> dict[str, str]:
    """``$id`` → name of every schema shipped in ``engine/schemas``."""
    out: dict[str, str] = {}
    for entry in resources.files("engine.schemas").iterdir():
        if entry.name.endswith(".schema.json"):
            name = entry.name.removesuffix(".schema.json")
            sid = load_schema(name).get("$id")
            if isinstance(sid, str):
                out[sid] = name
    return out


@cache
def bundled_schema(name: str) -> dict[str, Any]:
    """Shipped schema ``name`` with every shipped schema it references by ``$id`` bundled under ``$defs``.

    Raises:
        FileNotFoundError: no shipped schema of that name.
    """
    return bundle(name, load_schema, shipped_ids())


def bundle(name: str, load: Callable[[str], dict[str, Any]], ids: Mapping[str, str]) -> dict[str, Any]:
    """Schema ``name`` (from ``load``) with every schema it references through ``ids`` (``$id`` → name)
    copied under ``$defs/<name>`` and the references pointed there; recursively, each schema once.

    Raises:
        ValueError: a referenced schema's name is already a ``$defs`` entry of another meaning.
    """
    root = copy.deepcopy(load(name))
    defs: dict[str, Any] = root.setdefault("$defs", {})
    bundled: set[str] = set()
    pending = [root]
    while pending:
        for holder in _ref_holders(pending.pop()):
            base, _, fragment = holder["$ref"].partition("#")
            target = ids.get(base)
            if target is None:
                continue  # a local reference (or one to a schema we do not ship): left as it is
            if target == name:
                holder["$ref"] = "#" + fragment
                continue
            if target not in bundled:
                if target in defs:
                    raise ValueError(f"{name}: $defs/{target} exists; cannot bundle the {target} schema there")
                embedded = copy.deepcopy(load(target))
                embedded.pop("$schema", None)
                embedded.pop("$id", None)
                _rebase_local_refs(embedded, f"#/$defs/{target}")
                defs[target] = embedded
                bundled.add(target)
                pending.append(embedded)  # its own references to other schemas, bundled too
            holder["$ref"] = f"#/$defs/{target}" + (fragment if fragment.startswith("/") else "")
    if not defs:
        root.pop("$defs")
    return root


def _ref_holders(node: Any) -> list[dict[str, Any]]:
    """Every object in ``node`` that has a string ``$ref``."""
    found: list[dict[str, Any]] = []
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, dict):
            if isinstance(n.get("$ref"), str):
                found.append(n)
            stack.extend(n.values())
        elif isinstance(n, list):
            stack.extend(n)
    return found


def _rebase_local_refs(schema: dict[str, Any], prefix: str) -> None:
    """``#/...`` references of a schema being embedded now point inside its new place."""
    for holder in _ref_holders(schema):
        ref = holder["$ref"]
        if ref == "#":
            holder["$ref"] = prefix
        elif ref.startswith("#/"):
            holder["$ref"] = prefix + ref[1:]
