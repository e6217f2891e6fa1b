"""Reading a config file: YAML (libyaml when present) validated against its shipped JSON Schema,
with the file, line, JSON path and reason of the first problem (:class:`~engine.errors.SchemaError`).

Shared by the config loader (:mod:`engine.spec`), the classifier's rules (:mod:`engine.classifier`)
and the schema bundler (:mod:`engine.schema_bundle`); it imports none of them.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, MutableMapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from .errors import SchemaError

#: libyaml's parser with PyYAML's safe constructor and resolver: the same values, ~10x faster
#: (load_config: ~100 → ~15 ms; it runs at every start and on every config edit)
_FAST_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class DuplicateKey(yaml.constructor.ConstructorError):  # type: ignore[misc]
    """A mapping names the same key twice: YAML keeps the last silently (``k: 60`` … ``k: 5``)."""


MERGE_TAG = "tag:yaml.org,2002:merge"
#: a config file's values once its aliases are expanded: a 2 KB file of nested aliases (a "billion
#: laughs") is millions of values to validate and hash — tens of seconds and gigabytes
MAX_VALUES = 200_000


class _Loader(_FAST_LOADER):  # type: ignore[misc]
    """The fast loader, refusing a key given twice in one mapping."""


def _mapping_without_duplicates(loader: Any, node: yaml.MappingNode) -> Any:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == MERGE_TAG:
            continue  # `<<: *base` — merged keys may be overridden; construct_mapping flattens them
        key = loader.construct_object(key_node)
        try:
            first = seen.setdefault(key, key_node.start_mark.line)
        except TypeError:  # an unhashable key: the constructor below says what is wrong with it
            continue
        if first != key_node.start_mark.line:
            raise DuplicateKey(None, None, f"key {key!r} given twice (first on line {first + 1})", key_node.start_mark)
    return loader.construct_mapping(node)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)


@cache
def load_schema(name: str) -> dict[str, Any]:
    """One of the JSON Schemas shipped in the package: request, response, receipt, experts, priors, pipeline."""
    text = resources.files("engine.schemas").joinpath(f"{name}.schema.json").read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@cache
def _validator(name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(load_schema(name))


def _line_of(node: yaml.Node | None, path: list[Any]) -> int | None:
    """Walk a composed YAML node along a JSON path to the line of the offending field: a mapping
    entry's *key* line (its value may start on the next line), a sequence item's own line."""
    line = node.start_mark.line + 1 if node is not None else None
    for key in path:
        if isinstance(node, yaml.MappingNode):
            entry = next(((k, v) for k, v in node.value if k.value == str(key)), None)
            nxt, at = (entry[1], entry[0]) if entry else (None, None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            nxt = at = node.value[key]
        else:
            nxt = at = None
        if nxt is None or at is None:
            break
        node, line = nxt, at.start_mark.line + 1
    return line


def error_path(err: jsonschema.ValidationError) -> tuple[list[Any], str]:
    """Where a schema error is and what to say: an unknown key is reported at that key (the
    validator reports it at the mapping that holds it), by name, with the keys allowed there."""
    path = list(err.absolute_path)
    if err.validator == "additionalProperties" and isinstance(err.instance, dict) and isinstance(err.schema, dict):
        known = set(err.schema.get("properties", {}))
        patterns = [re.compile(p) for p in err.schema.get("patternProperties", {})]
        extra = [k for k in err.instance if k not in known and not any(p.search(str(k)) for p in patterns)]
        if extra:
            allowed = f"; allowed here: {', '.join(sorted(known))}" if known else ""
            return [*path, extra[0]], f"unknown key {extra[0]!r}{allowed}"
    if "propertyNames" in err.relative_schema_path and isinstance(err.instance, str):
        # the validator reports a bad key name at the mapping: report it at the key itself
        enum = err.schema.get("enum") if isinstance(err.schema, dict) else None
        allowed = f"; allowed here: {', '.join(map(str, enum))}" if enum else ""
        return [*path, err.instance], f"unknown key {err.instance!r}{allowed}"
    return path, str(err.message)


def _json_path(path: Any) -> str:
    return "/".join(str(p) for p in path) or "(top level)"


def line_of(file: Path, path: list[Any]) -> int | None:
    """The line of the value at ``path`` in a YAML file already known to parse (None if unreadable)."""
    try:
        return _line_of(yaml.compose(file.read_text("utf-8")), path)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None


def load_yaml(file: Path, schema: str) -> dict[str, Any]:
    """Read one config file and validate it against its schema, or raise SchemaError."""
    try:
        text = file.read_text("utf-8")
    except FileNotFoundError:
        raise SchemaError("file not found", file=str(file)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SchemaError(f"cannot read: {exc}", file=str(file)) from None
    try:
        data = yaml.load(text, Loader=_Loader)
    except DuplicateKey as exc:
        mark = exc.problem_mark
        raise SchemaError(
            f"not valid config: {exc.problem}", file=str(file), line=mark.line + 1 if mark else None
        ) from None
    except yaml.YAMLError:
        try:  # the pure-Python parser words the problem and marks its line as this loader always has
            yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            raise SchemaError(
                f"not valid YAML: {getattr(exc, 'problem', exc)}", file=str(file), line=mark.line + 1 if mark else None
            ) from None
        raise SchemaError("not valid config: YAML this loader does not construct", file=str(file)) from None
    if not isinstance(data, dict):
        raise SchemaError("expected a mapping at the top level", file=str(file), line=1)
    count, bad = _survey(data)
    if count > MAX_VALUES:
        raise SchemaError(
            f"{count:,} values once its aliases are expanded (at most {MAX_VALUES:,}): write them out", file=str(file)
        )
    if bad is not None:  # JSON Schema's minimum/maximum let NaN through; none of ours means anything
        raise SchemaError(
            "not a finite number (.nan / .inf)",
            file=str(file),
            path=_json_path(bad),
            line=_line_of(yaml.compose(text), bad),
        )
    errors = sorted(_validator(schema).iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:  # only now the node tree, for the line (composing every file on every load cost ~2x)
        path, message = error_path(errors[0])
        raise SchemaError(message, file=str(file), path=_json_path(path), line=_line_of(yaml.compose(text), path))
    return data


def _survey(data: Any) -> tuple[int, list[Any] | None]:
    """(values counted with aliases expanded, the path of the first non-finite float or None).
    A shared (aliased) container is walked once and its size reused: linear in the file."""
    sizes: dict[int, int] = {}
    bad: list[list[Any]] = []

    def walk(value: Any, path: list[Any]) -> int:
        if isinstance(value, float):
            if not bad and not math.isfinite(value):
                bad.append(path)
            return 1
        if not isinstance(value, (dict, list)):
            return 1
        known = sizes.get(id(value))
        if known is not None:
            return known
        items = value.items() if isinstance(value, dict) else enumerate(value)
        total = 1 + sum(walk(v, [*path, k]) for k, v in items)
        sizes[id(value)] = total
        return total

    return walk(data, []), (bad[0] if bad else None)


def updated_text(original: str, new: Mapping[str, Any]) -> str:
    """``original`` (a YAML document) with its values replaced by ``new``'s, comments, key order and
    quoting kept: a round trip through ruamel.yaml (PyYAML drops comments), changed keys assigned,
    removed keys deleted, new keys appended. ``yaml.safe_load`` of the result equals ``new``."""
    import io

    from ruamel.yaml import YAML

    rt = YAML(typ="rt")
    rt.preserve_quotes = True
    rt.width = 4096  # never re-wrap a long line the user wrote
    doc = rt.load(original)
    if not isinstance(doc, MutableMapping):
        doc = {}
    _merge(doc, new)
    out = io.StringIO()
    rt.dump(doc, out)
    return out.getvalue()


def _merge(dst: MutableMapping[str, Any], src: Mapping[str, Any]) -> None:
    for key in [k for k in dst if k not in src]:
        del dst[key]
    for key, value in src.items():
        if isinstance(dst.get(key), MutableMapping) and isinstance(value, Mapping):
            _merge(dst[key], value)
        elif key not in dst or dst[key] != value:
            dst[key] = value
