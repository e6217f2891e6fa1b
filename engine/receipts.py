"""Ed25519-signed receipts (DESIGN §5).

``signature`` = Ed25519 over the UTF-8 bytes of the canonical JSON of the receipt without its
``signature`` field (keys sorted, no insignificant whitespace, ``ensure_ascii=False``);
``public_key`` is the hex verify key, so anyone can verify with pynacl alone::

    from nacl.signing import VerifyKey
    body = {k: v for k, v in receipt.items() if k != "signature"}
    VerifyKey(bytes.fromhex(receipt["public_key"])).verify(
        json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(),
        bytes.fromhex(receipt["signature"]))

The signing key is created on first use in the data dir with mode 0600.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

from .errors import ReceiptError
from .types import canonical_json

KEY_FILE = "signing_key.ed25519"


def load_or_create_key(data_dir: Path) -> SigningKey:
    path = data_dir / KEY_FILE
    try:
        return SigningKey(bytes.fromhex(path.read_text().strip()))
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as exc:
        raise ReceiptError(f"signing key {path} is unreadable: {exc}") from exc
    data_dir.mkdir(parents=True, exist_ok=True)
    key = SigningKey.generate()
    try:  # O_EXCL: when two processes race to create it, one wins and the other reads it back
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        for _ in range(100):
            text = path.read_text().strip()
            if len(text) == 64:
                return SigningKey(bytes.fromhex(text))
            time.sleep(0.01)
        raise ReceiptError(f"signing key {path} is incomplete") from None
    with os.fdopen(fd, "w") as fh:
        fh.write(key.encode().hex())
        fh.flush()
        os.fsync(fh.fileno())
    return key


def portable(value: Any) -> Any:
    """Numbers every JSON implementation prints the same way: integral floats become ints and
    other floats are rounded to 4 decimals (no exponent form). A receipt re-serialised by a
    JavaScript client (``JSON.stringify`` prints ``1.0`` as ``1``) must still verify."""
    if isinstance(value, float):
        r = round(value, 4)
        return int(r) if r.is_integer() else r
    if isinstance(value, dict):
        return {k: portable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [portable(v) for v in value]
    return value


def signing_bytes(receipt: dict[str, Any]) -> bytes:
    return canonical_json({k: v for k, v in receipt.items() if k != "signature"}).encode("utf-8")


def sign(receipt: dict[str, Any], key: SigningKey) -> dict[str, Any]:
    """Return the receipt with ``public_key`` and ``signature`` set."""
    body: dict[str, Any] = portable({k: v for k, v in receipt.items() if k != "signature"})
    body["public_key"] = key.verify_key.encode().hex()
    body["signature"] = key.sign(signing_bytes(body)).signature.hex()
    return body


def verify(receipt: dict[str, Any]) -> bool:
    """True when the receipt's signature verifies under its own public key."""
    try:
        VerifyKey(bytes.fromhex(receipt["public_key"])).verify(
            signing_bytes(receipt), bytes.fromhex(receipt["signature"])
        )
        return True
    except (KeyError, ValueError, TypeError, BadSignatureError):
        return False
