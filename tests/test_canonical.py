"""The fast canonical form (orjson) is byte-equal to the documented one (json.dumps) for receipts.

DESIGN §5: the signature is over ``json.dumps(body, sort_keys=True, separators=(",", ":"),
ensure_ascii=False)``. The hot path signs, hashes and spools with :func:`engine.types.canonical_bytes`
instead (issue 10); these properties check, over generated receipts (non-ASCII text, control
characters, floats made portable, big integers, nested objects), that the bytes are the same and
that a receipt signed that way verifies with pynacl and json alone, as engine/receipts.py documents.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from nacl.signing import SigningKey, VerifyKey

from engine.receipts import portable, sign
from engine.types import canonical_bytes, canonical_json


def documented(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)  # no lone surrogates
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)  # past 64 bits orjson refuses: json decides
    | st.floats(allow_nan=True, allow_infinity=True)
    | TEXT
)
JSON = st.recursive(
    SCALARS, lambda kids: st.lists(kids, max_size=5) | st.dictionaries(TEXT, kids, max_size=5), max_leaves=40
)


@settings(max_examples=400, deadline=None)
@given(JSON)
def test_portable_values_serialise_byte_equal(value: Any) -> None:
    value = portable(value)
    assert canonical_bytes(value) == documented(value)
    assert canonical_json(value).encode() == documented(value)


RECEIPT = st.fixed_dictionaries(
    {
        "receipt_id": st.text("0123456789abcdef", min_size=32, max_size=32),
        "created_at": st.just("2026-12-01T05:00:00.000+00:00"),
        "request": st.fixed_dictionaries({"question": TEXT, "limit": st.integers(1, 200)}),
        "classifier": st.fixed_dictionaries(
            {"class": st.sampled_from(["conceptual", "identifier"]), "confidence": st.floats(0, 1), "rule": TEXT}
        ),
        "experts_selected": st.fixed_dictionaries({"why": st.dictionaries(TEXT, TEXT, max_size=6)}),
        "per_expert": st.dictionaries(
            st.sampled_from(["bm25", "ripgrep", "semantic", "ñandú", "検索"]),
            st.fixed_dictionaries(
                {
                    "status": st.sampled_from(["ok", "partial", "timeout"]),
                    "latency_ms": st.floats(0, 1e7, allow_nan=False),
                    "result_count": st.integers(0, 1000),
                    "deadline": st.fixed_dictionaries(
                        {"planned_ms": st.floats(0, 1e5), "actual_ms": st.floats(0, 1e5)}
                    ),
                }
            ),
            max_size=5,
        ),
        "fusion": st.fixed_dictionaries({"k": st.integers(1, 200), "weights": st.dictionaries(TEXT, st.floats())}),
        "heads": st.dictionaries(TEXT, st.none() | st.text("0123456789abcdef", min_size=40, max_size=40)),
    }
)


@settings(max_examples=150, deadline=None)
@given(RECEIPT)
def test_signed_receipts_verify_with_pynacl_and_json(body: dict[str, Any]) -> None:
    key = SigningKey.generate()
    receipt = sign(body, key)
    unsigned = {k: v for k, v in receipt.items() if k != "signature"}
    assert canonical_bytes(unsigned) == documented(unsigned)
    # exactly the check engine/receipts.py documents, on the receipt as a JSON client reads it back
    wire = json.loads(json.dumps(receipt, ensure_ascii=False))
    body_back = {k: v for k, v in wire.items() if k != "signature"}
    VerifyKey(bytes.fromhex(wire["public_key"])).verify(documented(body_back), bytes.fromhex(wire["signature"]))


def test_portable_makes_numbers_json_prints_alike() -> None:
    assert portable({"a": 1.0, "b": 2.00016, "c": 1e-07, "d": float("nan"), "e": [float("inf"), 3]}) == {
        "a": 1,
        "b": 2.0002,
        "c": 0,
        "d": None,
        "e": [None, 3],
    }
    # orjson and json disagree only on exponents below 1e-4, which portable() never leaves
    assert canonical_bytes(1e-07) != documented(1e-07)
