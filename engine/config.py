"""A config folder loaded and checked against the adapters that will run it.

:func:`engine.spec.load_config` reads the files (YAML, the shipped JSON Schemas, typed specs)
and imports no runtime code. This module adds what only the adapter registry knows, so that a
config that loads is one every expert can run:

* every expert's ``adapter`` resolves (:func:`engine.experts.adapter_class`);
* every expert's ``settings`` match its adapter's ``settings_schema``;
* an expert without ``freshness`` gets its adapter's default (``index`` / ``live`` / ``unknown``).

A violation is a :class:`~engine.errors.SchemaError` naming experts.yaml, the line and the path
(``experts/<name>/settings/<key>``). An adapter whose module needs a package that is not
installed is left as it is: the config still loads and that expert reports ``unavailable``
when asked (a lean install must not lose every other expert).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonschema

from . import spec
from .errors import MissingDependency, SchemaError, SpecError
from .experts import adapter_class
from .spec import ConfigSet, ExpertSpec


def load_config(root: Path) -> ConfigSet:
    """Load experts.yaml, priors.yaml and pipelines/*.yaml under ``root`` and check every expert's adapter."""
    return check_experts(spec.load_config(root))


def check_experts(cfg: ConfigSet) -> ConfigSet:
    file = cfg.root / "experts.yaml"
    experts: dict[str, ExpertSpec] = {}
    for name, es in cfg.experts.items():
        try:
            cls = adapter_class(es.adapter)
        except SpecError as exc:
            raise _error(file, ["experts", name, "adapter"], exc.message) from None
        except MissingDependency:
            experts[name] = es
            continue
        validator = jsonschema.Draft202012Validator(cls.settings_schema)
        errors = sorted(validator.iter_errors(dict(es.settings)), key=lambda e: list(e.absolute_path))
        if errors:
            at, message = spec.error_path(errors[0])
            path: list[Any] = ["experts", name, "settings", *at]
            reason = message if at != list(errors[0].absolute_path) else _reason(errors[0])
            raise _error(file, path, f"{reason} (settings of the {es.adapter} adapter)")
        experts[name] = es if es.freshness is not None else replace(es, freshness=cls.default_freshness())
    return replace(cfg, experts=experts)


def _reason(err: jsonschema.ValidationError) -> str:
    """The validator's message, except where a schema idiom has a plainer way to say it."""
    alternatives = err.schema.get("oneOf") if isinstance(err.schema, dict) else None
    if err.validator == "oneOf" and alternatives and all(set(a) == {"required"} for a in alternatives):
        keys = [k for a in alternatives for k in a["required"]]
        return f"set exactly one of {', '.join(keys)}"
    return str(err.message)


def _error(file: Path, path: list[Any], message: str) -> SchemaError:
    return SchemaError(message, file=str(file), path="/".join(str(p) for p in path), line=spec.line_of(file, path))
