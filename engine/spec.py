"""Config as data: load, validate and hash experts.yaml, priors.yaml and pipelines/*.yaml.

Two phases, like haystack's loader: ``yaml.safe_load`` + JSON Schema (shipped in
``engine/schemas``) → typed, frozen spec objects. A bad file fails with file, line, path and
reason (:class:`~engine.errors.SchemaError`). Graph checks (cycles, node kinds, expert names)
live in :mod:`engine.graph`. This module imports no runtime code.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jsonschema
import orjson

from .errors import GraphError, InvalidRequest, SchemaError, SpecError
from .types import Budget, Request, Scope, canonical_json, sha256_hex
from .workspace import LANGUAGES
from .yamlfile import _json_path, _validator, error_path, line_of, load_schema, load_yaml

if TYPE_CHECKING:
    from .classifier import ClassifierSpec
    from .confidence import ConfidenceSpec

__all__ = ["error_path", "line_of", "load_schema", "load_yaml"]  # re-exported: older callers import them here


def graph_error(pipeline: PipelineSpec, message: str, node_id: str | None = None, *field: Any) -> GraphError:
    """A graph error located in the pipeline file: the line of the node (first of that id), or of
    one of its fields (``"after", 0``, ``"settings", "routes", "docs"``)."""
    index = next((i for i, n in enumerate(pipeline.nodes) if n.id == node_id), None)
    path: list[Any] = [] if index is None else ["nodes", index, *field]
    return GraphError(
        message,
        pipeline=pipeline.file.name,
        node_id=node_id,
        file=str(pipeline.file),
        line=line_of(pipeline.file, path),
        path=_json_path(path) if path else None,
    )


# ---------------------------------------------------------------------------------------------
# typed specs


@dataclass(frozen=True, slots=True)
class ExpertSpec:
    name: str
    adapter: str
    precision_class: str
    timeout_ms: int
    enabled: bool = True
    freshness: str | None = None  # live | index | unknown; None: the adapter's default (engine.config)
    languages: tuple[str, ...] = ()
    settings: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""


@dataclass(frozen=True, slots=True)
class FusionSpec:
    k: int = 60
    overfetch: int = 30
    per_file_cap: int = 3
    doc_file_prior: float = 1.0
    test_file_prior: float = 1.0
    low_confidence_below: float = 0.35
    snippet_chars: int = 800
    method: str = "weighted_rrf"


@dataclass(frozen=True, slots=True)
class GateSpec:
    min_prior: float = 0.1
    single_expert_at: float = 1.0
    single_expert_others_below: float = 0.0
    max_experts: int = 8


@dataclass(frozen=True, slots=True)
class BanditSpec:
    """priors.yaml ``bandit`` (engine/bandit.py): off by default, so runs reproduce from config alone."""

    enabled: bool = False
    scope: str = "workspace"  # workspace | session
    min_factor: float = 0.5
    max_factor: float = 2.0
    prior: float = 5.0


@dataclass(frozen=True, slots=True)
class Priors:
    classes: Mapping[str, Mapping[str, float]]
    default_experts: tuple[str, ...]
    default_weights: Mapping[str, float]
    rule_weights: Mapping[str, Mapping[str, float]]
    abstain_below: float
    gate: GateSpec
    fusion: FusionSpec
    groups: Mapping[str, tuple[str, ...]]
    rerank: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # weight set → feature → weight
    confidence: ConfidenceSpec | None = None  # calibration (engine.confidence); None: the fused share
    bandit: BanditSpec = field(default_factory=BanditSpec)

    def weights_for(self, klass: str | None, rule: str | None = None) -> Mapping[str, float]:
        """The class's priors, with the weights of the classifier rule that fired laid over them."""
        if klass is None:
            return {e: self.default_weights.get(e, 1.0) for e in self.default_experts}
        return {**self.classes.get(klass, {}), **self.rule_weights.get(rule or "", {})}


@dataclass(frozen=True, slots=True)
class NodeSpec:
    id: str
    kind: str
    after: tuple[str, ...] = ()
    settings: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PipelineSpec:
    name: str
    version: int
    description: str
    klass: str | None
    nodes: tuple[NodeSpec, ...]
    file: Path
    raw: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ConfigSet:
    """Everything that can change an answer, loaded from one config folder."""

    root: Path
    experts: Mapping[str, ExpertSpec]
    priors: Priors
    pipelines: Mapping[str, PipelineSpec]  # by pipeline name
    raw_experts: Mapping[str, Any]
    raw_priors: Mapping[str, Any]
    classifier: ClassifierSpec
    #: why this folder was chosen (engine/configdir.py SOURCES; "api" when a caller passed it)
    source: str = "api"

    def pipeline_by_file(self, file: Path) -> PipelineSpec:
        file = file.resolve()
        for spec in self.pipelines.values():
            if spec.file.resolve() == file:
                return spec
        if file.suffix != ".yaml":  # pipelines/*.yml are not read: say so, not "move it there"
            raise SpecError(f"{file}: pipeline files end in .yaml; rename it", file=str(file))
        raise SpecError(
            f"{file} is not a pipeline of the config folder {self.root} ({self.source}); "
            "move it into that folder's pipelines/ or pass --config-dir",
            file=str(file),
        )

    def config_version(self, pipeline: PipelineSpec) -> str:
        """sha256 of the canonical JSON of everything that can change this pipeline's answers."""
        return sha256_hex(canonical_json(self.config_content(pipeline)))

    def config_content(self, pipeline: PipelineSpec) -> dict[str, Any]:
        """What :meth:`config_version` hashes: the pipelines it can reach, experts.yaml,
        priors.yaml and the classifier's rules (kept by the store as a config snapshot)."""
        involved = {pipeline.name: pipeline.raw}
        todo = [pipeline]
        while todo:  # every pipeline a dispatch can reach: its routes and its default, transitively
            for node in todo.pop().nodes:
                targets = [*node.settings.get("routes", {}).values(), node.settings.get("default")]
                for target in targets:
                    if isinstance(target, str) and target in self.pipelines and target not in involved:
                        involved[target] = self.pipelines[target].raw
                        todo.append(self.pipelines[target])
        return {
            "pipelines": involved,
            "experts": self.raw_experts,
            "priors": self.raw_priors,
            "classifier": self.classifier.raw,
        }


def _check_secret_patterns(raw: Mapping[str, Any], file: Path) -> None:
    """``secrets.patterns`` must compile: a bad regex fails at load, naming file and path."""
    for i, pattern in enumerate((raw.get("secrets") or {}).get("patterns", ())):
        try:
            re.compile(pattern)
        except re.error as exc:
            path = ["secrets", "patterns", i]
            raise SchemaError(
                f"not a valid regex: {exc}", file=str(file), path=_json_path(path), line=line_of(file, path)
            ) from None


def _expert_specs(raw: Mapping[str, Any]) -> dict[str, ExpertSpec]:
    return {
        name: ExpertSpec(
            name=name,
            adapter=e["adapter"],
            precision_class=e["precision_class"],
            timeout_ms=e["timeout_ms"],
            enabled=e.get("enabled", True),
            freshness=e.get("freshness"),
            languages=tuple(e.get("languages", ())),
            settings=dict(e.get("settings", {})),
            description=e.get("description", ""),
        )
        for name, e in raw["experts"].items()
    }


def _priors(raw: Mapping[str, Any], file: Path, experts: Mapping[str, ExpertSpec]) -> Priors:
    named: list[tuple[list[Any], str]] = [(["default_experts", i], e) for i, e in enumerate(raw["default_experts"])]
    named += [(["classes", c, e], e) for c, ws in raw["classes"].items() for e in ws]
    named += [(["default_weights", e], e) for e in raw.get("default_weights", {})]
    named += [(["rule_weights", r, e], e) for r, ws in raw.get("rule_weights", {}).items() for e in ws]
    for path, expert in named:
        if expert not in experts:
            raise SchemaError(
                f"unknown expert {expert!r}; experts.yaml defines {sorted(experts)}",
                file=str(file),
                path=_json_path(path),
                line=line_of(file, path),
            )
    return Priors(
        classes={c: dict(ws) for c, ws in raw["classes"].items()},
        default_experts=tuple(raw["default_experts"]),
        default_weights=dict(raw.get("default_weights", {})),
        rule_weights={r: dict(ws) for r, ws in raw.get("rule_weights", {}).items()},
        abstain_below=raw["classifier"].get("abstain_below", 0.5),
        gate=GateSpec(**raw["gate"]),
        fusion=FusionSpec(**raw["fusion"]),
        groups={g: tuple(ps) for g, ps in raw.get("groups", {}).items()},
        rerank={name: dict(ws) for name, ws in raw.get("rerank", {}).items()},
        confidence=_confidence(raw.get("confidence")),
        bandit=BanditSpec(**raw.get("bandit", {})),
    )


def _confidence(raw: Mapping[str, Any] | None) -> ConfidenceSpec | None:
    from .confidence import ConfidenceSpec

    if raw is None:
        return None
    return ConfidenceSpec(dict(raw.get("model", {})), raw.get("high_at", 0.8), raw.get("medium_at", 0.5))


def _pipeline(raw: Mapping[str, Any], file: Path) -> PipelineSpec:
    nodes = tuple(
        NodeSpec(id=n["id"], kind=n["kind"], after=tuple(n.get("after", ())), settings=dict(n.get("settings", {})))
        for n in raw["nodes"]
    )
    return PipelineSpec(
        name=raw["name"],
        version=raw["version"],
        description=raw["description"],
        klass=raw.get("class"),
        nodes=nodes,
        file=file,
        raw=raw,
    )


#: the files of a config folder besides ``pipelines/*.yaml`` (what `engine diff` compares and a
#: running Router watches)
CONFIG_FILES = ("experts.yaml", "priors.yaml", "classifier.yaml")


def load_config(root: Path) -> ConfigSet:
    """Load experts.yaml, priors.yaml and every pipelines/*.yaml under ``root``."""
    root = root.resolve()
    raw_experts = load_yaml(root / "experts.yaml", "experts")
    _check_secret_patterns(raw_experts, root / "experts.yaml")
    experts = _expert_specs(raw_experts)
    raw_priors = load_yaml(root / "priors.yaml", "priors")
    priors = _priors(raw_priors, root / "priors.yaml", experts)
    pipelines: dict[str, PipelineSpec] = {}
    for file in sorted((root / "pipelines").glob("*.yaml")):
        spec = _pipeline(load_yaml(file, "pipeline"), file)
        if spec.name in pipelines:
            raise SchemaError(
                f"pipeline name {spec.name!r} also used by {pipelines[spec.name].file.name}",
                file=str(file),
                path="name",
                line=line_of(file, ["name"]),
            )
        pipelines[spec.name] = spec
    if not pipelines:
        raise SpecError(f"no pipelines found in {root / 'pipelines'}")
    for stray in sorted((root / "pipelines").glob("*.yml")):  # silently ignored before: a user's lost edit
        raise SpecError(f"{stray}: pipeline files end in .yaml; rename it", file=str(stray))
    from .classifier import load_classifier

    classifier = load_classifier(root)
    _check_rule_weights(raw_priors, root / "priors.yaml", classifier.rule_names())
    _check_rerank_features(raw_priors, root / "priors.yaml")
    return ConfigSet(
        root=root,
        experts=experts,
        priors=priors,
        pipelines=pipelines,
        raw_experts=raw_experts,
        raw_priors=raw_priors,
        classifier=classifier,
    )


def _check_rerank_features(raw_priors: Mapping[str, Any], file: Path) -> None:
    """A rerank weight set may only weigh features the reranker computes (a typo would weigh nothing)."""
    from .rerank import known_feature

    for name, weights in (raw_priors.get("rerank") or {}).items():
        for feature in weights if isinstance(weights, Mapping) else ():
            if not known_feature(str(feature)):
                raise SchemaError(
                    f"rerank.{name} names unknown feature {feature!r}",
                    file=str(file),
                    path=f"rerank/{name}/{feature}",
                    line=line_of(file, ["rerank", name, feature]),
                )


def _check_rule_weights(raw_priors: Mapping[str, Any], file: Path, rules: tuple[str, ...]) -> None:
    """``rule_weights`` may only name rules the classifier has (a renamed rule must not go unnoticed)."""
    for rule in raw_priors.get("rule_weights", {}):
        if rule not in rules:
            raise SchemaError(
                f"unknown classifier rule {rule!r}; classifier.yaml has {list(rules)}",
                file=str(file),
                path=f"rule_weights/{rule}",
                line=line_of(file, ["rule_weights", rule]),
            )


# ---------------------------------------------------------------------------------------------
# requests


def escape_undecodable(text: str) -> str:
    """``text`` with every lone surrogate written out as an escape, so it can be encoded as UTF-8.

    Undecodable bytes reach us as surrogates: command-line bytes that are not UTF-8 are decoded
    with ``surrogateescape`` (byte 0xff → U+DCFF, written back as ``\\xff``) and JSON may carry a
    lone ``\\ud800`` (written back as ``\\ud800``). Everything else is kept as it is.
    """
    if not _SURROGATE.search(text):
        return text
    return _SURROGATE.sub(lambda m: _escape_one(ord(m.group(0))), text)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape_one(cp: int) -> str:
    return f"\\x{cp - 0xDC00:02x}" if 0xDC80 <= cp <= 0xDCFF else f"\\u{cp:04x}"


def _undecodable_field(data: Any, path: str = "") -> str | None:
    """The first field (dotted path) of a request holding text that is not valid Unicode."""
    if isinstance(data, str):
        return (path or "(request)") if _SURROGATE.search(data) else None
    if isinstance(data, dict):
        for key, value in data.items():
            key_s = escape_undecodable(str(key))
            found = _undecodable_field(value, f"{path}.{key_s}" if path else key_s)
            if found is None and key_s != str(key):
                found = f"{path}.{key_s}" if path else key_s
            if found:
                return found
    if isinstance(data, list):
        for i, value in enumerate(data):
            found = _undecodable_field(value, f"{path}[{i}]")
            if found:
                return found
    return None


def parse_request(data: Any) -> Request:
    """Validate a request dict against the request schema and build a Request, or raise InvalidRequest."""
    if not isinstance(data, dict):
        raise InvalidRequest("the request must be a JSON object", field="(request)")
    bad = _undecodable_field(data)
    if bad is not None:
        raise InvalidRequest(
            f"{bad}: not valid Unicode text (undecodable bytes or a lone surrogate; receipted escaped)", field=bad
        )
    errors = _request_errors(data)
    if errors:
        err = errors[0]
        path = list(err.absolute_path)
        if err.validator == "required":
            missing = err.message.split("'")[1] if "'" in err.message else "question"
            path = [missing]
        fld = ".".join(str(p) for p in path) or "(request)"
        raise InvalidRequest(f"{fld}: {_schema_message(err, fld)}", field=fld)
    _check_request_values(data)
    scope, budget = data.get("scope", {}), _integral(data.get("budget", {}), ("latency_ms", "max_experts"))
    intent = data.get("intent")
    return Request(
        question=data["question"],
        intent=None if intent in (None, "unknown") else intent,
        scope=Scope(**scope),
        budget=Budget(**budget),
        expected_shape=data.get("expected_shape", "ranked-evidence"),
        mode=data.get("mode", "fused"),
        limit=_integral(data, ("limit",)).get("limit", 10),
        format=data.get("format", "json"),
        session_id=data.get("session_id"),
        no_cache=data.get("no_cache", False),
    )


def _integral(d: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """``d`` with its integer fields as ints: JSON Schema's ``integer`` admits ``3.0`` and ``1e2``
    (a JSON client may send any number form), and a float limit broke slicing past the schema."""
    out = dict(d)
    for k in keys:
        v = out.get(k)
        if isinstance(v, float):  # validated: an integral value
            out[k] = int(v)
    return out


#: request shapes (every field but the question, canonical JSON) that passed the schema: a client
#: sends the same fields with a new question each time, and the full check costs ~0.12 ms
_VALID_SHAPES: dict[bytes, None] = {}
_VALID_SHAPES_MAX = 1024


def _request_errors(data: dict[str, Any]) -> list[jsonschema.ValidationError]:
    """The request schema's errors, first field first. The schema relates no field to another, so a
    question that meets its own rules in a shape seen valid before makes a valid request."""
    if _question_ok(data.get("question")):
        try:
            shape: bytes | None = orjson.dumps({**data, "question": ""}, option=orjson.OPT_SORT_KEYS)
        except TypeError:  # a value JSON has no exact twin for (a huge int, a non-string key)
            shape = None
        if shape in _VALID_SHAPES:
            return []
    else:
        shape = None
    errors = sorted(_validator("request").iter_errors(data), key=lambda e: list(e.absolute_path))
    if not errors and shape is not None:
        if len(_VALID_SHAPES) >= _VALID_SHAPES_MAX:
            _VALID_SHAPES.clear()
        _VALID_SHAPES[shape] = None
    return errors


def _question_ok(question: Any) -> bool:
    """The request schema's own rules for ``question`` (type, lengths in code points, pattern)."""
    rules = load_schema("request")["properties"]["question"]
    return (
        isinstance(question, str)
        and rules.get("minLength", 0) <= len(question) <= rules.get("maxLength", len(question))
        and re.search(rules.get("pattern", ""), question) is not None
    )


def _schema_message(err: jsonschema.ValidationError, fld: str) -> str:
    """A short, plain reason: never the caller's whole (maybe huge) value echoed back."""
    if fld == "question" and err.validator in ("minLength", "pattern"):
        return "question is empty or whitespace only"
    if err.validator == "maxLength" and isinstance(err.instance, str):
        return f"too long ({len(err.instance)} > {err.validator_value} characters)"
    if err.validator in ("maximum", "minimum"):
        side = "above the maximum" if err.validator == "maximum" else "below the minimum"
        return f"{err.instance!r} is {side} {err.validator_value}"
    msg = str(err.message)
    return msg[:300] + "…" if len(msg) > 300 else msg


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, f"{path}.{k}" if path else str(k))


def _check_request_values(data: dict[str, Any]) -> None:
    """What the schema cannot say: no NUL anywhere (it cannot reach a process or a path), a question
    with something to search for, a scope language the engine knows."""
    for fld, value in _strings(data, ""):
        if "\x00" in value:
            raise InvalidRequest(f"{fld}: contains a NUL character", field=fld)
    if not any(ch.isalnum() for ch in data["question"]):
        raise InvalidRequest("question: has no letter or digit to search for", field="question")
    language = (data.get("scope") or {}).get("language")
    if language is not None and language.lower() not in LANGUAGES:
        raise InvalidRequest(
            f"scope.language: unknown language {language!r}; known: {', '.join(sorted(LANGUAGES))}",
            field="scope.language",
        )


@cache
def response_validator() -> jsonschema.Draft202012Validator:
    """Validator for full responses: the self-contained response schema (receipt bundled), no registry."""
    from .schema_bundle import bundled_schema  # it imports this module

    return jsonschema.Draft202012Validator(bundled_schema("response"))
