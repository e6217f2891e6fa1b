"""``engine receipts verify``: is the receipt log intact? (DESIGN §5, docs/adr/0005).

Checks, for every receipt in the store or in its log of record:

* its signature verifies under a **pinned** key (:meth:`engine.keys.KeyRing.pinned`), never
  merely under the key the receipt names (a body re-signed with another key fails);
* every column the store indexes equals the signed body (an edited ``status`` fails);
* the store's copy equals the log's copy, it is in both (a deleted row is reported, and
  ``engine store repair`` restores it), and no id has two different copies in the log;
* each writer's chain runs ``seq`` 0, 1, 2… with every ``prev`` equal to the hash of its
  predecessor: the first break per chain is reported (deleted, reordered or forked receipts).

A damaged store does not stop the audit: the log of record is still checked, and the report
says the store could not be read and how to fix it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import StoreError
from .receipts import receipt_hash, verify_pinned
from .store import RECEIPT_COLUMNS, Store, StoredReceipt, receipt_columns
from .types import canonical_json


@dataclass
class AuditReport:
    checked: int = 0
    invalid: list[dict[str, Any]] = field(default_factory=list)  # {"receipt_id", "problems": [...]}
    breaks: list[dict[str, Any]] = field(default_factory=list)  # first break per chain
    chains: int = 0
    unchained: int = 0  # signed before receipts carried a chain (schema 1 stores)
    store: str = "ok"
    pinned_keys: int = 0
    not_found: bool = False

    @property
    def ok(self) -> bool:
        return not self.invalid and not self.breaks and self.store == "ok" and not self.not_found

    def to_dict(self) -> dict[str, Any]:
        return {
            "checked": self.checked,
            "valid": self.checked - len(self.invalid),
            "invalid": self.invalid,
            "chains": self.chains,
            "breaks": self.breaks,
            "unchained": self.unchained,
            "store": self.store,
            "pinned_keys": self.pinned_keys,
            "ok": self.ok,
        }


def _stored(store: Store, report: AuditReport) -> dict[str, StoredReceipt]:
    try:
        return {s.receipt_id: s for s in store.stored_receipts()}
    except StoreError as exc:
        report.store = exc.message
        return {}


def _logged(store: Store, problems: dict[str, list[str]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for body in store.logged_receipts():
        rid = str(body.get("receipt_id"))
        if rid in out and canonical_json(out[rid]) != canonical_json(body):
            problems.setdefault(rid, []).append("two different copies in the log of record")
        out.setdefault(rid, body)
    return out


def _check_copy(
    s: StoredReceipt | None, logged: dict[str, Any] | None, pinned: Collection[str] | Mapping[str, str | None]
) -> list[str]:
    found: list[str] = []
    if s is not None:
        if s.body is None:
            found.append(s.body_error or "stored body unreadable")
        else:
            if why := verify_pinned(s.body, pinned):
                found.append(why)
            signed = receipt_columns(s.body)
            for c in RECEIPT_COLUMNS:
                if s.columns.get(c) != signed[c]:
                    found.append(f"column {c} is {s.columns.get(c)!r} but the signed body says {signed[c]!r}")
            if logged is not None and canonical_json(s.body) != canonical_json(logged):
                found.append("the store's copy differs from the log of record")
    log_differs = s is None or s.body is None or canonical_json(s.body) != canonical_json(logged)
    if logged is not None and log_differs and (why := verify_pinned(logged, pinned)):
        found.append(f"log copy: {why}")
    return found


def _chain_breaks(bodies: Iterable[dict[str, Any]], report: AuditReport) -> dict[str, dict[str, Any]]:
    """The first break of each writer's chain, keyed by writer."""
    chains: dict[str, list[dict[str, Any]]] = {}
    for b in bodies:
        chain = b.get("chain")
        if isinstance(chain, dict) and isinstance(chain.get("writer"), str) and isinstance(chain.get("seq"), int):
            chains.setdefault(chain["writer"], []).append(b)
        else:
            report.unchained += 1
    report.chains = len(chains)
    breaks: dict[str, dict[str, Any]] = {}
    for writer, items in sorted(chains.items()):
        items.sort(key=lambda b: (b["chain"]["seq"], str(b.get("receipt_id"))))
        expected, prev = 0, None
        for b in items:
            seq = b["chain"]["seq"]
            reason = None
            if seq < expected:
                reason = f"seq {seq} appears twice (a forked or replayed chain)"
            elif seq > expected:
                missing = f"seq {expected}" if seq == expected + 1 else f"seq {expected}–{seq - 1}"
                reason = f"{missing} missing before this receipt (deleted?)"
            elif b["chain"].get("prev") != prev:
                reason = "prev does not match the hash of the receipt before it (changed or reordered?)"
            if reason:
                breaks[writer] = {"writer": writer, "seq": seq, "receipt_id": b.get("receipt_id"), "reason": reason}
                break
            expected, prev = seq + 1, receipt_hash(b)
    return breaks


def audit(
    store: Store, pinned: Collection[str] | Mapping[str, str | None], receipt_id: str | None = None
) -> AuditReport:
    """Verify the whole log (or one receipt and its chain up to it) against ``pinned`` public keys."""
    report = AuditReport(pinned_keys=len(pinned))
    problems: dict[str, list[str]] = {}
    # the log first, then the store (which ingests it): a receipt written meanwhile by a live
    # process shows up in the store only, so the log is read once more for those
    logged = _logged(store, problems)
    stored = _stored(store, report)
    if set(stored) - set(logged):
        logged = _logged(store, problems := {})
    ids = sorted(set(stored) | set(logged))
    if receipt_id is not None:
        ids = [i for i in ids if i == receipt_id]
        report.not_found = not ids
    for rid in ids:
        s, lg = stored.get(rid), logged.get(rid)
        found = problems.get(rid, []) + _check_copy(s, lg, pinned)
        if s is None and report.store == "ok":
            found.append("missing from the store (deleted?): `engine store repair` restores it from the log")
        if lg is None:
            found.append("not in the log of record (added to the store directly?)")
        if found:
            report.invalid.append({"receipt_id": rid, "problems": found})
    report.checked = len(ids)
    copies = dict(logged)
    for rid, s in stored.items():
        if rid not in copies and s.body is not None:
            copies[rid] = s.body
    breaks = _chain_breaks(copies.values(), report)
    if receipt_id is not None:
        target = copies.get(receipt_id, {}).get("chain") or {}
        br = breaks.get(str(target.get("writer")))
        breaks = {} if br is None or br["seq"] > target.get("seq", -1) else {br["writer"]: br}
    report.breaks = list(breaks.values())
    return report
