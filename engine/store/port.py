"""The store port: everything the engine may ask of a store, and what it promises back.

Implementations: :class:`~engine.store.duckdb_store.DuckDBStore` (the default, DESIGN §8) and
:class:`~engine.store.memory.MemoryStore` (its in-memory twin). Both pass one contract suite,
``tests/store/store_contract.py``; a new backend (PostgreSQL, say) is done when it passes it too.

Promises every backend keeps:

* **Receipts are written when** :meth:`Store.put_receipt` **returns** (a crash of the process
  loses none) **and durable after** :meth:`Store.make_durable` (surfaces call it once the answer
  is out), and are never changed after: the first copy of a ``receipt_id`` wins. Indexed columns
  are derived from the signed body (:func:`~engine.store.records.receipt_columns`), never supplied
  beside it.
* **A log of record** (:meth:`Store.logged_receipts`) holds every receipt ever put, apart from
  the queryable tables, so :meth:`Store.repair` can rebuild them without losing or duplicating
  one, and a verifier can compare the two.
* **Reads see every durable write** of any process on the same store (a backend that buffers
  writes, as DuckDB's spool does, brings them in first).
* **The hot path never waits on a damaged or busy store**: :meth:`Store.cache_get` is a miss
  instead, :meth:`Store.put_receipt` never reads the tables.
* Failures raise :class:`~engine.errors.StoreError` (the fix in its message). Feedback naming a
  receipt the store does not hold, or an item id not in that receipt's answer, is the caller's
  error: :class:`~engine.errors.InvalidRequest` with the field (:func:`~.records.check_feedback`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol

from .records import (
    BanditArm,
    BenchmarkEvent,
    CacheEntry,
    ConfigSnapshot,
    EventQuery,
    Experiment,
    ExpertStats,
    Feedback,
    Hint,
    ReceiptMix,
    ReceiptQuery,
    ReceiptSummary,
    RepairReport,
    StoredReceipt,
    StoreHealth,
)


class Store(Protocol):
    # ------------------------------------------------------------------ receipts
    def put_receipt(self, receipt: Mapping[str, Any]) -> None:
        """Record one signed receipt: written so that it survives this process before returning,
        durable against power loss before returning or at the next :meth:`make_durable`.

        Raises:
            StoreError: the receipt could not be written (the caller fails the request).
        """

    def make_durable(self) -> None:
        """Make every receipt put so far durable against power loss: called after the answer is
        out (``Router.flush``), so the ``fsync`` is not on the hot path (DuckDB's spool); a no-op
        for a backend whose ``put_receipt`` already waits for the disk (PostgreSQL).

        Raises:
            StoreError: the disk refused.
        """

    def get_receipt(self, receipt_id: str) -> dict[str, Any] | None:
        """The receipt's body as stored, or None."""

    def list_receipts(self, query: ReceiptQuery = ReceiptQuery()) -> list[ReceiptSummary]:
        """Newest first (``created_at`` descending, then ``receipt_id``), filtered by ``query``."""

    def receipt_mix(self, query: ReceiptQuery = ReceiptQuery()) -> ReceiptMix:
        """Receipts matching ``query`` counted by class and status, and the cache hits among
        them (``cache.hit`` of the signed body). ``query.limit`` is ignored."""

    # ------------------------------------------------------------------ verification reads
    def stored_receipts(self, receipt_id: str | None = None) -> Iterator[StoredReceipt]:
        """Every receipt the queryable store holds (or one), with its columns exactly as stored."""

    def logged_receipts(self) -> Iterator[dict[str, Any]]:
        """Every receipt in the log of record, independent of the queryable tables. A receipt
        may appear more than once (a crash between compaction steps); callers dedupe by id."""

    def holds_data(self) -> bool:
        """Has anything ever been written here? Cheap (no table read); decides whether a missing
        signing key is a fresh start or a lost key."""

    # ------------------------------------------------------------------ benchmark events
    def record_events(self, events: Iterable[BenchmarkEvent]) -> None:
        """Record expert-call events (not fsync'ed: losing the last few to a crash is acceptable)."""

    def list_events(self, query: EventQuery = EventQuery()) -> list[BenchmarkEvent]:
        """Events in ``created_at``, ``event_id`` order."""

    def expert_stats(self, query: EventQuery = EventQuery()) -> list[ExpertStats]:
        """Per expert over the window: count, p50/p95 latency, timeout and error rates, hit rate;
        sorted by expert id. ``query.limit`` is ignored."""

    # ------------------------------------------------------------------ answer cache
    def cache_get(self, key: str, *, now: float | None = None) -> CacheEntry | None:
        """A fresh (``expires_at > now``) entry or None. Never raises and never waits long: a
        damaged or busy store is a miss."""

    def cache_put(self, entry: CacheEntry) -> None:
        """Store or replace an entry (the newest ``created_at`` wins)."""

    # ------------------------------------------------------------------ feedback, experiments, hints, bandit
    def put_feedback(self, feedback: Feedback) -> None:
        """Durably record feedback on an existing receipt, naming only items of its answer.

        Raises:
            InvalidRequest: ``receipt_id`` names no stored receipt (``field="receipt_id"``), or an
                id is not in that receipt's ``item_ids`` (``field="useful_item_ids"``).
        """

    def list_feedback(self, receipt_id: str | None = None) -> list[Feedback]:
        """In ``created_at``, ``feedback_id`` order."""

    def put_experiment(self, experiment: Experiment) -> None: ...

    def list_experiments(self, suite: str | None = None) -> list[Experiment]:
        """In ``created_at``, ``experiment_id`` order."""

    def put_hint(self, hint: Hint) -> None:
        """Record a hint (advisory, written after the answer: not fsync'ed, like events; the
        first copy of a ``hint_id`` wins)."""

    def list_hints(self, project: str | None = None) -> list[Hint]:
        """In ``created_at``, ``hint_id`` order."""

    def put_bandit(self, arm: BanditArm) -> None:
        """Store or replace an arm's state (the newest ``updated_at`` wins)."""

    def get_bandit(self, arm_id: str) -> BanditArm | None: ...

    def list_bandit(self, task_class: str | None = None) -> list[BanditArm]:
        """In ``arm_id`` order."""

    # ------------------------------------------------------------------ config snapshots
    def put_config_snapshot(self, snapshot: ConfigSnapshot) -> None:
        """Keep the content of a config version (the first copy of a version wins: same hash,
        same content)."""

    def get_config_snapshot(self, config_version: str) -> ConfigSnapshot | None: ...

    def list_config_snapshots(self) -> list[ConfigSnapshot]:
        """In ``created_at``, ``config_version`` order."""

    # ------------------------------------------------------------------ upkeep
    def sync(self, timeout_s: float = 30.0) -> int:
        """Bring buffered writes into the queryable tables (no-op for unbuffered backends).
        Returns rows moved; 0 when another process holds the store past ``timeout_s``.

        Raises:
            StoreError: the queryable store is damaged (``repair`` fixes it).
        """

    def health(self) -> StoreHealth:
        """Can the store be read and written, and if not, what fixes it? Never raises."""

    def repair(self) -> RepairReport:
        """Rebuild the queryable tables from the log of record: every logged receipt exactly
        once, whatever state the tables were in. Rows only the old tables held are first
        salvaged into the log, so a repair never loses what it could still read."""

    def close(self) -> None: ...
