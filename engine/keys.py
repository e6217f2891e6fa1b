"""The data dir's signing key and the public keys a verifier pins (DESIGN §5).

* ``signing_key.ed25519``: the current Ed25519 seed, hex, 0600. Created on first use in a
  *fresh* data dir only: when receipts already exist, a missing key is an error (a silently new
  key would make every later receipt look as trustworthy as the lost ones), and only
  ``engine keys init --force`` makes a new one.
* ``signing_keys.pinned.json``: public keys still trusted for verification: keys retired by
  ``engine keys rotate`` and keys the user vouched for with ``engine keys trust``. Verification
  trusts these plus the current key, never the ``public_key`` a receipt names.

A running server keeps the key it loaded; after a rotation its receipts still verify (the old
key is pinned as retired). Restart servers to sign with the new key.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from nacl.signing import SigningKey

from .datadir import ensure_data_dir, write_private
from .errors import ReceiptError

KEY_FILE = "signing_key.ed25519"
PINNED_FILE = "signing_keys.pinned.json"
#: a retired key still verifies receipts made this long after its retirement (``since`` is kept
#: to the second): an answer signed as `engine keys rotate` ran — a Router reloads the key file
#: before each receipt, so nothing later is signed with the old key
RETIRE_GRACE_S = 5
INIT_FIX = (
    "restore signing_key.ed25519 from a backup; or `engine keys init --force` to start a new key "
    "(receipts signed by the lost key then verify only if you pin its public key: `engine keys trust HEX`)"
)


@dataclass(frozen=True, slots=True)
class PinnedKey:
    public_key: str  # hex
    role: str  # current | retired | trusted | revoked
    since: str | None = None


class KeyRing:
    """The keys of one data dir."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.key_path = data_dir / KEY_FILE
        self.pinned_path = data_dir / PINNED_FILE

    def stamp(self) -> tuple[int, int] | None:
        """The key file's (inode, mtime): a rotation replaces it (one ``stat``, ~2 µs)."""
        try:
            st = os.stat(self.key_path)
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns

    def load(self) -> SigningKey | None:
        """The current key, or None when there is none.

        Raises:
            ReceiptError: the key file exists but cannot be read as a key.
        """
        for attempt in range(2):
            try:
                text = self.key_path.read_text().strip()
                return SigningKey(bytes.fromhex(text))
            except FileNotFoundError:
                return None
            except (OSError, ValueError) as exc:
                if attempt == 0:  # a rotation replacing the file under us: read once more
                    time.sleep(0.01)
                    continue
                raise ReceiptError(f"signing key {self.key_path} is unreadable: {exc}") from exc
        return None  # unreachable: the loop returns or raises

    def signing_key(self, *, fresh: bool) -> SigningKey:
        """The key to sign with. ``fresh``: nothing was ever stored here, so a missing key may be created.

        Raises:
            ReceiptError: no key while receipts exist (names the fix), or an unreadable key.
        """
        key = self.load()
        if key is not None:
            return key
        if not fresh:
            raise ReceiptError(f"signing key {self.key_path} is missing but receipts exist; fix: {INIT_FIX}")
        return self.create()

    def create(self) -> SigningKey:
        """Create the key if there is none (atomic: a racing process reads the winner's key)."""
        ensure_data_dir(self.data_dir)
        key = SigningKey.generate()
        try:
            write_private(self.key_path, key.encode().hex().encode(), exclusive=True)
        except FileExistsError:
            existing = self.load()
            if existing is None:
                raise ReceiptError(f"signing key {self.key_path} vanished while being created") from None
            return existing
        return key

    def pinned(self) -> list[PinnedKey]:
        """Every public key verification trusts: the current one first, then retired and trusted ones.

        Raises:
            ReceiptError: the pinned-keys file is unreadable (verification cannot be trusted).
        """
        out: list[PinnedKey] = []
        key = self.load()
        if key is not None:
            out.append(PinnedKey(key.verify_key.encode().hex(), "current"))
        seen = {p.public_key for p in out}
        for p in self._read_pinned():
            if p.public_key not in seen:
                out.append(p)
                seen.add(p.public_key)
        return out

    def verification_keys(self) -> dict[str, str | None]:
        """Public key → the last ``created_at`` it may sign (None: no limit), for
        :func:`engine.receipts.verify_pinned`. A retired key signs nothing made after its retirement
        (and :data:`RETIRE_GRACE_S` for answers in flight): a rotation is the remedy for a leaked
        key, and a receipt forged with that key *now* verified as if nothing had happened. A
        revoked key (``engine keys rotate --revoke``) verifies nothing; a forger can backdate
        ``created_at``, so a leaked key is revoked, not only retired."""
        out: dict[str, str | None] = {}
        for p in self.pinned():
            if p.role == "revoked":
                continue
            until = None
            if p.role == "retired" and p.since:
                try:
                    until = (datetime.fromisoformat(p.since) + timedelta(seconds=RETIRE_GRACE_S)).isoformat()
                except ValueError:
                    until = None
            out[p.public_key] = until
        return out

    def _read_pinned(self) -> list[PinnedKey]:
        try:
            raw = json.loads(self.pinned_path.read_text())
            return [PinnedKey(str(d["public_key"]), str(d["role"]), d.get("since")) for d in raw]
        except FileNotFoundError:
            return []
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ReceiptError(f"pinned keys file {self.pinned_path} is unreadable: {exc}") from exc

    def _write_pinned(self, keys: list[PinnedKey]) -> None:
        data = [{"public_key": p.public_key, "role": p.role, "since": p.since} for p in keys]
        write_private(self.pinned_path, (json.dumps(data, indent=1) + "\n").encode())

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        ensure_data_dir(self.data_dir)
        fd = os.open(self.data_dir / "keys.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def rotate(self, revoke: bool = False) -> tuple[str | None, str]:
        """Retire the current key (its public key stays pinned: what it signed until now still
        verifies) — or, ``revoke``, distrust it altogether (a leaked key) — and start a new one.
        Returns (old public key or None, new public key)."""
        with self._locked():
            old = self.load()
            if old is not None:  # pin first: a crash before the swap leaves a pinned current key, harmless
                self._pin(old.verify_key.encode().hex(), "revoked" if revoke else "retired")
            new = SigningKey.generate()
            write_private(self.key_path, new.encode().hex().encode())
        return (old.verify_key.encode().hex() if old else None), new.verify_key.encode().hex()

    def trust(self, public_key: str) -> None:
        """Pin a public key the user vouches for (e.g. a lost key's, from a backup or a client's receipt).

        Raises:
            ReceiptError: ``public_key`` is not a 32-byte hex key.
        """
        try:
            if len(bytes.fromhex(public_key)) != 32:
                raise ValueError("an Ed25519 public key is 32 bytes (64 hex digits)")
        except ValueError as exc:
            raise ReceiptError(f"not a public key: {exc}") from exc
        with self._locked():
            self._pin(public_key.lower(), "trusted")

    def _pin(self, public_key: str, role: str) -> None:
        keys = self._read_pinned()
        now = datetime.now(UTC).isoformat(timespec="seconds")
        if all(p.public_key != public_key for p in keys):
            keys.append(PinnedKey(public_key, role, now))
        elif role in ("revoked", "trusted"):  # the user's word on a key pinned before wins
            keys = [PinnedKey(p.public_key, role, now) if p.public_key == public_key else p for p in keys]
        else:
            return
        self._write_pinned(keys)
