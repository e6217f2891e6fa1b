"""Issue 8 item 9: property and chaos tests. Whatever comes in — request JSON of any shape, questions
of arbitrary Unicode, YAML config files — ends in an answer or a classified error with a signed
receipt, never a traceback; experts killed or stalled mid-run lose nothing but their own items.

Run time is bounded: a few hundred examples in all, no per-example deadline (a run spawns rg).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.errors import EngineError, SchemaError, SpecError
from engine.runtime import Router
from engine.spec import load_config, parse_request, response_validator
from engine.workspace import Workspace
from tests.conftest import ALPHA, ROOT, make_repo
from tests.edge_support import command_expert, config_with
from tests.helpers import plain_pynacl_verify

STATUSES = {"ok", "timeout", "unavailable", "internal", "malformed", "unconfigured", "skipped"}
FUZZ = settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)


@pytest.fixture(scope="module")
def router_env(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("fuzz")
    repo = make_repo(tmp / "ws" / "alpha", {k: v for k, v in ALPHA.items() if k.endswith(".py")})
    cfg = tmp / "config"
    shutil.copytree(ROOT / "pipelines", cfg / "pipelines")
    for name in ("experts.yaml", "priors.yaml", "classifier.yaml"):
        shutil.copy(ROOT / name, cfg)
    return repo, cfg


def _run_many(repo: Path, cfg: Path, requests: list[Any]) -> list[dict[str, Any]]:
    """Every request through one Router (as a server would); no exception may escape."""

    async def go() -> list[dict[str, Any]]:
        router = Router(cfg, Workspace.open([repo]))
        out = []
        try:
            for req in requests:
                out.append((await router.run("router", req)).response)
        finally:
            await router.aclose()
        return out

    return anyio.run(go)


def _answered_or_classified(response: dict[str, Any]) -> None:
    receipt = response["receipt"]
    assert plain_pynacl_verify(receipt)
    if "error" in response:
        assert response["error"]["error"] in {"invalid_request", "zero_expert_gate"}
        assert "Traceback" not in json.dumps(response["error"])
    else:
        assert response_validator().is_valid(response)
    for outcome in receipt["per_expert"].values():
        assert outcome["status"] in STATUSES


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
FIELDS = ["question", "intent", "scope", "budget", "expected_shape", "mode", "limit", "format", "session_id"]
requests = st.one_of(
    json_values,  # not even an object
    st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=10), json_values, max_size=6),
    st.fixed_dictionaries(
        {"question": st.text(max_size=200)},
        optional={
            "intent": st.sampled_from(["identifier", "docs", "history", "unknown", "nope"]),
            "scope": st.fixed_dictionaries(
                {},
                optional={
                    "path": st.text(max_size=30) | st.sampled_from(["../..", "/etc/passwd", ".git", "alpha"]),
                    "language": st.text(max_size=10) | st.sampled_from(["python", "PYTHON", "cobol"]),
                    "project": st.text(max_size=10) | st.just("alpha"),
                },
            ),
            "limit": st.integers(-5, 500),
            "budget": st.fixed_dictionaries({}, optional={"latency_ms": st.integers(0, 3000)}),
        },
    ),
)


@FUZZ
@given(batch=st.lists(requests, min_size=1, max_size=3))
def test_any_request_json_ends_in_an_answer_or_a_classified_receipted_error(
    router_env: tuple[Path, Path], batch: list[Any]
) -> None:
    repo, cfg = router_env
    for response in _run_many(repo, cfg, [{**r, "no_cache": True} if isinstance(r, dict) else r for r in batch]):
        _answered_or_classified(response)


@settings(max_examples=150, deadline=None)
@given(question=st.text(min_size=0, max_size=300))
def test_parse_request_classifies_every_unicode_question(question: str) -> None:
    try:
        req = parse_request({"question": question})
    except EngineError as exc:
        assert exc.code == "invalid_request" and exc.to_dict()["field"] == "question"
    else:
        assert req.question == question and any(ch.isalnum() for ch in question)


request_values = st.none() | st.booleans() | st.integers(-5, 300) | st.floats(allow_nan=False) | st.text(max_size=8)
request_shapes = st.fixed_dictionaries(
    {},
    optional={
        "question": st.text(max_size=12) | st.integers(),
        "limit": st.integers(-2, 300) | st.floats(0, 50) | st.booleans(),
        "mode": st.sampled_from(["fused", "separate", "other", ""]),
        "scope": st.dictionaries(st.sampled_from(["path", "language", "project", "x"]), request_values, max_size=3),
        "budget": st.dictionaries(st.sampled_from(["latency_ms", "max_experts", "y"]), request_values, max_size=2),
        "no_cache": request_values,
        "extra": request_values,
    },
)


def _outcome(data: dict[str, object]) -> tuple[str, str | None]:
    try:
        return ("ok", repr(parse_request(data)))
    except EngineError as exc:
        return ("error", exc.message)


@settings(max_examples=300, deadline=None)
@given(first=request_shapes, second=request_shapes, question=st.text(max_size=12))
def test_the_request_shape_memo_never_changes_a_verdict(first: dict[str, object], second: dict[str, object],
                                                        question: str) -> None:  # fmt: skip
    """parse_request remembers request shapes that passed the schema (engine.spec._request_errors):
    every verdict, message included, must equal the one a cold check gives."""
    import engine.spec as spec

    for data in (first, {**first, "question": question}, second, {**second, "question": question}):
        warm = _outcome(data)
        spec._VALID_SHAPES.clear()
        assert _outcome(data) == warm, data


@FUZZ
@given(question=st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=120))
def test_arbitrary_unicode_questions_are_answered_with_a_receipt(router_env: tuple[Path, Path], question: str) -> None:
    repo, cfg = router_env
    [response] = _run_many(repo, cfg, [{"question": question, "no_cache": True, "budget": {"latency_ms": 3000}}])
    _answered_or_classified(response)
    assert response["receipt"]["request"]["question"] == question


yaml_docs = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    which=st.sampled_from(["experts.yaml", "priors.yaml", "classifier.yaml", "pipelines/router.yaml"]),
    doc=yaml_docs | st.text(max_size=200),
    keep=st.booleans(),
)
def test_any_yaml_config_loads_or_fails_with_file_and_reason(
    tmp_path_factory: pytest.TempPathFactory, which: str, doc: Any, keep: bool
) -> None:
    cfg = tmp_path_factory.mktemp("cfg")
    shutil.copytree(ROOT / "pipelines", cfg / "pipelines")
    for name in ("experts.yaml", "priors.yaml", "classifier.yaml"):
        shutil.copy(ROOT / name, cfg)
    target = cfg / which
    if keep and isinstance(doc, dict):  # a real file with one key replaced: the schema's edges
        data = yaml.safe_load(target.read_text())
        data.update(doc)
        target.write_text(yaml.safe_dump(data))
    else:
        target.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    try:
        load_config(cfg)
    except SchemaError as exc:
        assert exc.file and exc.code == "invalid_config" and "Traceback" not in exc.message
    except SpecError as exc:
        assert exc.code == "invalid_config"


# ------------------------------------------------------------------------------------------ chaos

CRASH = "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"  # killed mid-run
STALL = "import time\ntime.sleep(30)\n"  # stalls past its deadline
GARBAGE = "import sys\nsys.stdout.buffer.write(bytes(range(256)) * 50)\n"  # not the promised shape
GOOD = "print('alpha/storage.py:4:class FileSystemStorage:')\n"


@pytest.mark.slow
def test_chaos_experts_killed_and_stalled_mid_run_lose_nothing(tmp_path: Path) -> None:
    """Four command experts (crash, stall, garbage, good) beside ripgrep, 12 requests: every one is
    answered with a verifying receipt naming every expert with a classified status; the good ones
    still bring their items; nothing is left running."""
    repo = make_repo(tmp_path / "ws" / "alpha", {k: v for k, v in ALPHA.items() if k.endswith(".py")})
    experts = {
        "crash": command_expert(CRASH),
        "stall": command_expert(STALL, timeout_ms=600),
        "garbage": command_expert(GARBAGE),
        "good": command_expert(GOOD),
    }
    cfg = config_with(tmp_path / "cfg", experts)
    priors = yaml.safe_load((cfg / "priors.yaml").read_text())
    priors["classes"]["identifier"]["ripgrep"] = 1.0
    (cfg / "priors.yaml").write_text(yaml.safe_dump(priors, sort_keys=False))
    reqs = [{"question": 'find "FileSystemStorage"', "intent": "identifier", "no_cache": True}] * 12
    responses = _run_many(repo, cfg, reqs)
    assert len(responses) == len(reqs)
    ids = set()
    for response in responses:
        receipt = response["receipt"]
        assert plain_pynacl_verify(receipt) and "error" not in response
        ids.add(receipt["receipt_id"])
        per = receipt["per_expert"]
        assert set(per) == {"crash", "stall", "garbage", "good", "ripgrep"}
        assert per["crash"]["status"] == "internal" and per["stall"]["status"] == "timeout"
        assert per["garbage"]["status"] in {"malformed", "ok"} and per["good"]["status"] == "ok"
        assert per["ripgrep"]["status"] == "ok"
        assert any(it["path"] == "alpha/storage.py" for it in response["items"])
    assert len(ids) == len(reqs)  # one receipt per request, none lost or shared
