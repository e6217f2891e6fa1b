"""Ed25519-signed, hash-chained receipts (DESIGN §5, docs/adr/0007-receipt-chain-and-log.md).

``signature`` = Ed25519 over the UTF-8 bytes of the canonical JSON of the receipt without its
``signature`` field (keys sorted, no insignificant whitespace, ``ensure_ascii=False``);
``public_key`` is the hex verify key. Anyone can verify with pynacl alone::

    from nacl.signing import VerifyKey
    body = {k: v for k, v in receipt.items() if k != "signature"}
    VerifyKey(bytes.fromhex(receipt["public_key"])).verify(
        json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(),
        bytes.fromhex(receipt["signature"]))

and must then check that ``public_key`` is one they trust (``engine keys list`` prints the data
dir's pinned keys): a signature proves only who signed, so a verifier never trusts the key a
receipt names by itself.

Each receipt also carries, inside the signed body, its place in its writer's chain::

    "chain": {"writer": "<32 hex: one per process and log>", "seq": 0, 1, 2…,
              "prev": null for seq 0, else sha256 hex of the predecessor's canonical JSON
                      *with* its signature}

so deleting, reordering or replacing a receipt breaks the chain of its writer
(``prev == hashlib.sha256(canonical(predecessor)).hexdigest()``, canonical as above with the
signature included). :class:`ReceiptLog` is the one way receipts are made: sign, chain and
store in one atomic step per process (written before the answer, fsync'ed right after it by
``Router.flush``: :meth:`~engine.store.port.Store.make_durable`).
"""

from __future__ import annotations

import hashlib
import math
import os
import secrets
import threading
from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any

from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

from .errors import ReceiptError, StoreError
from .keys import KeyRing
from .store import Store
from .types import canonical_bytes, canonical_json, sha256_hex


def portable(value: Any) -> Any:
    """Numbers every JSON implementation prints the same way: integral floats become ints, other
    floats are rounded to 4 decimals (no exponent form) and NaN/infinity become null (as
    ``JSON.stringify`` prints them). A receipt re-serialised by a JavaScript client (which prints
    ``1.0`` as ``1``) must still verify. Walks the body once per receipt, so the common types are
    tested by identity first."""
    t = type(value)
    if t is str or t is int or t is bool or value is None:
        return value
    if t is dict:
        return {k: portable(v) for k, v in value.items()}
    if t is float:
        return _portable_float(value)
    if t is list or t is tuple:
        return [portable(v) for v in value]
    if isinstance(value, float):
        return _portable_float(value)
    if isinstance(value, dict):
        return {k: portable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [portable(v) for v in value]
    return value


def _portable_float(value: float) -> float | int | None:
    if not math.isfinite(value):
        return None
    r = round(value, 4)
    return int(r) if r.is_integer() else r


def signing_bytes(receipt: Mapping[str, Any]) -> bytes:
    return canonical_json({k: v for k, v in receipt.items() if k != "signature"}).encode("utf-8")


def receipt_hash(receipt: Mapping[str, Any]) -> str:
    """What the next receipt in the chain names as ``prev``: sha256 of the canonical JSON, signature included."""
    return sha256_hex(canonical_json(dict(receipt)))


def sign(receipt: Mapping[str, Any], key: SigningKey) -> dict[str, Any]:
    """Return the receipt with ``public_key`` and ``signature`` set.

    The body is made :func:`portable` and serialised once, by :func:`~engine.types.canonical_bytes`
    (byte-equal to the documented ``json.dumps`` form for portable values, so a verifier using
    json, as above, checks the same bytes)."""
    body: dict[str, Any] = portable({k: v for k, v in receipt.items() if k != "signature"})
    body["public_key"] = key.verify_key.encode().hex()
    body["signature"] = key.sign(canonical_bytes(body)).signature.hex()
    return body


def verify(receipt: Mapping[str, Any]) -> bool:
    """True when the signature verifies under the key the receipt names (integrity only: pair it
    with :func:`verify_pinned` to know who signed)."""
    return verify_pinned(receipt, [str(receipt.get("public_key"))]) is None


def verify_pinned(receipt: Mapping[str, Any], pinned: Collection[str] | Mapping[str, str | None]) -> str | None:
    """None when ``receipt`` is signed by one of the ``pinned`` public keys; else why not.
    ``pinned`` may map each key to the last ``created_at`` it may sign
    (:meth:`engine.keys.KeyRing.verification_keys`: a retired key's retirement)."""
    key = receipt.get("public_key")
    if not isinstance(key, str) or key not in pinned:
        return f"signed by a key that is not pinned ({str(key)[:16]}…)"
    until = pinned.get(key) if isinstance(pinned, Mapping) else None
    if until is not None and _after(str(receipt.get("created_at", "")), until):
        return f"signed by a key retired before it was made (valid until {until})"
    try:
        VerifyKey(bytes.fromhex(key)).verify(signing_bytes(receipt), bytes.fromhex(str(receipt.get("signature"))))
    except (ValueError, TypeError, BadSignatureError):
        return "signature does not verify"
    return None


def _after(created_at: str, until: str) -> bool:
    """Is this receipt's time past the key's limit? An unreadable time is: it cannot be placed."""
    try:
        return datetime.fromisoformat(created_at) > datetime.fromisoformat(until)
    except (ValueError, TypeError):
        return True


class ReceiptLog:
    """Signs, chains and stores receipts: :meth:`append` is the only way one is made.

    One chain per log instance and process (a forked child starts its own). The lock makes
    sign + chain + store one step for concurrent requests of one server; a receipt that could
    not be stored does not advance the chain, so the chain has no hole for a failed request.
    """

    def __init__(self, store: Store, keys: KeyRing) -> None:
        self.store = store
        self.keys = keys
        self._lock = threading.Lock()
        self._key: SigningKey | None = None
        self._key_stamp: tuple[int, int] | None = None
        self._pid = -1
        self._writer = ""
        self._seq = 0
        self._prev: str | None = None
        self._unhashed: dict[str, Any] | None = None  # the last receipt, until :meth:`settle` hashes it

    def signing_key(self) -> SigningKey:
        """The key this log signs with (loaded once; created only in a fresh data dir).

        Raises:
            ReceiptError: the key is missing while receipts exist, or unreadable.
        """
        stamp = self.keys.stamp()
        if self._key is None or stamp != self._key_stamp:
            # (re)loaded when the key file changed: after `engine keys rotate` a running server signs
            # with the new key (a retired key verifies nothing made after its retirement)
            self._key_stamp = stamp
            key = self.keys.load()
            if key is None:
                # checked after the first load: a process that created the key wrote it before any
                # receipt, so if receipts are visible now, so is its key
                fresh = not self.store.holds_data()
                key = self.keys.signing_key(fresh=fresh)
            self._key = key
        return self._key

    def append(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Chain, sign and store one receipt body; return the signed receipt.

        Raises:
            ReceiptError: no usable key, or the receipt could not be written.
        """
        with self._lock:
            if self._pid != os.getpid():
                self._pid, self._writer, self._seq, self._prev = os.getpid(), secrets.token_hex(16), 0, None
                self._unhashed = None
            self._settle()
            unsigned = {k: v for k, v in body.items() if k not in ("signature", "public_key")}
            unsigned["chain"] = {"writer": self._writer, "seq": self._seq, "prev": self._prev}
            receipt = sign(unsigned, self.signing_key())
            try:
                self.store.put_receipt(receipt)
            except StoreError as exc:
                raise ReceiptError(f"receipt could not be stored: {exc.message}") from exc
            self._seq += 1
            self._unhashed = receipt  # its hash is the next receipt's `prev`: made by settle(), after the answer
            return receipt

    def settle(self) -> None:
        """Hash the last receipt for the next one's ``prev`` now (``Router.flush``, after the answer)
        rather than on the next request's path; :meth:`append` does it itself if nobody did."""
        with self._lock:
            self._settle()

    def _settle(self) -> None:
        if self._unhashed is not None:
            # receipt_hash(receipt), from the same fast canonical form the signature used
            self._prev = hashlib.sha256(canonical_bytes(self._unhashed)).hexdigest()
            self._unhashed = None
