"""Hints: what earlier answers taught about similar questions (docs/adr/0017-flywheel.md).

**Keys.** A question is keyed by its features (:func:`question_keys`): ``id:<identifier>``,
``path:<path>``, ``lit:<quoted literal>``, ``kw:<keyword>`` (the first few) and ``class:<class>``.
Two questions are *similar* when they share keys.

**Recording** (after the answer, never on the hot path: :class:`Observation` is taken in the
Router's after-answer queue and turned into :class:`~engine.store.records.Hint` rows by its
flush). A *file* hint says a file answered questions of these keys: +1 when it was corroborated
across precision classes or marked useful by feedback, -1 when feedback marked it not useful. An
*expert* hint says how much an expert that ran contributed: its largest share of such an item
(1 / the experts that found it; 1.0 alone, 0 none). Every
hint carries the config version that produced it and, for a file, its content hash then.

**Expiry.** A hint counts only under the config version that produced it, and a file hint only
while the file's content hash is the one recorded (a changed file expires its hints; re-confirmed,
it earns new ones under its new hash).

**Use** (the ``hints`` node, :mod:`engine.nodes.hints`): :meth:`HintBook.plan` builds a
:class:`HintPlan`: a labelled lane of previously confirmed files (fused as the lane ``hints``)
and the experts that contributed nothing to similar questions, which the gate may skip within the
YAML bounds (:class:`SkipBounds`).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .store import Hint, Store
from .types import Classification, Evidence, sha256_hex

HINT_LANE = "hints"  # the lane's (and its outcome's) name in fusion, sources and the receipt
OBSERVED_ITEMS = 10  # the answer's first items an observation keeps (nDCG@10's window)
MAX_KEYWORDS = 6
REWARD_TOP = 3  # the bandit rewards an expert that ranked a useful item this high in its own list
KEY_KINDS = ("identifiers", "paths", "literals", "keywords", "class")
SKIP_KEYS = ("min_observations", "max_rate", "keep_at_least", "max_skipped", "protect", "min_share", "evidence")


def question_keys(c: Classification) -> tuple[str, ...]:
    """The feature keys a question's hints are filed under (lower-cased, deduplicated, in order)."""
    f = c.features
    keys = [f"id:{i}" for i in f.identifiers]
    keys += [f"path:{p}" for p in f.paths]
    keys += [f"lit:{lit}" for lit in f.literals]
    named = {i.lower() for i in f.identifiers}
    keys += [f"kw:{k}" for k in [k for k in f.keywords if k.lower() not in named][:MAX_KEYWORDS]]
    keys.append(f"class:{c.klass}")
    return tuple(dict.fromkeys(k.lower() for k in keys))


def key_kind(key: str) -> str:
    return {"id": "identifiers", "path": "paths", "lit": "literals", "kw": "keywords"}.get(
        key.split(":", 1)[0], "class"
    )


class FileHashes:
    """sha256 and line count of workspace files, memoised by (mtime, size): a stat per lookup."""

    def __init__(self) -> None:
        self._memo: dict[str, tuple[int, int, str, int]] = {}

    def get(self, file: Path) -> tuple[str, int] | None:
        try:
            st = os.stat(file)
        except OSError:
            return None
        key = str(file)
        hit = self._memo.get(key)
        if hit is not None and hit[0] == st.st_mtime_ns and hit[1] == st.st_size:
            return hit[2], hit[3]
        try:
            data = file.read_bytes()
        except OSError:
            return None
        digest, lines = hashlib.sha256(data).hexdigest(), data.count(b"\n") + 1
        self._memo[key] = (st.st_mtime_ns, st.st_size, digest, lines)
        return digest, lines


@dataclass(frozen=True, slots=True)
class SkipBounds:
    """How far hints may thin the gate's selection (the hints node's ``settings.skip``)."""

    min_observations: int = 8  # an expert needs this many runs on similar questions to be judged
    max_rate: float = 0.0  # ... and to have contributed to at most this share of them
    min_share: float = 0.0  # credit: an expert contributed when its share of a confirmed item (1 / the
    # experts that found it) is above this; 0: any part in one, 0.5: it alone found it
    evidence: str = "feedback"  # which answers judge an expert: feedback | all (agreement too)
    keep_at_least: int = 2  # never skip below this many experts
    max_skipped: int = 1  # never skip more than this many per question
    protect: tuple[str, ...] = ()  # never skipped

    @classmethod
    def from_settings(cls, raw: Mapping[str, Any] | None) -> SkipBounds | None:
        if not raw:
            return None
        if not isinstance(raw, Mapping):
            raise ValueError(f"must be a mapping ({', '.join(SKIP_KEYS)})")
        unknown = set(raw) - set(SKIP_KEYS)
        if unknown:
            raise ValueError(f"unknown keys {sorted(unknown)}")
        d = cls()
        b = cls(
            min_observations=int(raw.get("min_observations", d.min_observations)),
            max_rate=float(raw.get("max_rate", d.max_rate)),
            min_share=float(raw.get("min_share", d.min_share)),
            keep_at_least=int(raw.get("keep_at_least", d.keep_at_least)),
            max_skipped=int(raw.get("max_skipped", d.max_skipped)),
            protect=tuple(raw.get("protect", ())),
            evidence=str(raw.get("evidence", d.evidence)),
        )
        if b.min_observations < 1 or b.keep_at_least < 1 or b.max_skipped < 0 or not 0.0 <= b.max_rate < 1.0:
            raise ValueError("min_observations >= 1, keep_at_least >= 1, max_skipped >= 0, 0 <= max_rate < 1")
        if not 0.0 <= b.min_share < 1.0:
            raise ValueError("0 <= min_share < 1")
        if b.evidence not in ("feedback", "all"):
            raise ValueError("evidence: feedback | all")
        return b


@dataclass(frozen=True, slots=True)
class LaneFile:
    project: str
    path: str
    score: float
    keys: tuple[str, ...]  # the question keys that named it
    lines: int


@dataclass
class HintPlan:
    """What the hints node found for one question; the gate applies :meth:`apply_skips`."""

    keys: tuple[str, ...]
    weight: float
    precision_class: str
    lane: list[LaneFile] = field(default_factory=list)
    expired: int = 0  # file hints not used because the file changed since
    stats: dict[str, tuple[int, int]] = field(
        default_factory=dict
    )  # expert → (similar answers it ran on, contributed to)
    bounds: SkipBounds | None = None
    skipped: dict[str, str] = field(default_factory=dict)  # expert → why the gate skipped it
    loaded: bool = True  # False: this process had not read the store's hints yet (only its own)

    @property
    def learns_agreement(self) -> bool:
        """Does anything this node does read agreement hints (the lane, or skips judged on all answers)?
        If not, answers without feedback are not recorded (a long-lived process would only grow)."""
        return bool(self.weight > 0 or (self.bounds is not None and self.bounds.evidence == "all"))

    def apply_skips(self, experts: dict[str, float], reasons: dict[str, str]) -> None:
        """Drop, from the gate's selection, experts that contributed nothing to similar questions,
        within the bounds (never below ``keep_at_least``, at most ``max_skipped``, never a protected one)."""
        b = self.bounds
        if b is None:
            return
        idle = []
        for name, prior in experts.items():
            runs, hits = self.stats.get(name, (0, 0))
            if name not in b.protect and runs >= b.min_observations and hits <= b.max_rate * runs:
                idle.append((hits / runs, prior, name, runs, hits))
        for _, _, name, runs, hits in sorted(idle)[: b.max_skipped]:
            if len(experts) <= b.keep_at_least:
                break
            del experts[name]
            why = f"skipped by hints: contributed to {hits} of {runs} similar questions"
            reasons[name] = self.skipped[name] = why

    def evidence(self) -> list[Evidence]:
        return [
            Evidence(f.project, f.path, "file", 1, f.lines, "", round(f.score, 4), flags=("hint",)) for f in self.lane
        ]

    def to_receipt(self) -> dict[str, Any]:
        out: dict[str, Any] = {"keys": list(self.keys), "expired": self.expired}
        if not self.loaded:
            out["loaded"] = False
        if self.lane:
            out["lane"] = [
                {"project": f.project, "path": f.path, "score": round(f.score, 4), "keys": list(f.keys)}
                for f in self.lane
            ]
        if self.skipped:
            out["skipped"] = dict(sorted(self.skipped.items()))
        if self.stats:
            out["experts"] = {e: list(v) for e, v in sorted(self.stats.items())}
        return out


@dataclass(frozen=True, slots=True)
class AnsweredItem:
    item_id: str
    project: str
    path: str
    experts: tuple[str, ...]  # the experts (lane keys mapped to their expert) that returned it
    precision: frozenset[str]  # their precision classes
    ranks: tuple[int, ...] = ()  # each of ``experts``' best rank of it in its own list


@dataclass(frozen=True, slots=True)
class Observation:
    """What one answer can teach, taken after it went out (no I/O): the hints are made from it in
    the flush (content hashes), and again when feedback on its receipt arrives."""

    receipt_id: str
    config_version: str
    klass: str | None
    keys: tuple[str, ...]
    items: tuple[AnsweredItem, ...]  # the answer's first items, best first
    ran: tuple[str, ...]  # experts that answered (status ok or partial)
    roots: Mapping[str, Path]  # project → root
    bandit: tuple[str, str] | None = None  # (scope, class) of the bandit draw the run used, if any

    def agreement(self) -> list[tuple[AnsweredItem, float]]:
        """Items corroborated across precision classes (the hint lane itself is no witness)."""
        return [(it, 1.0) for it in self.items if len(it.precision) >= 2]

    def judged(self, useful: Iterable[str], not_useful: Iterable[str]) -> list[tuple[AnsweredItem, float]]:
        good, bad = set(useful), set(not_useful)
        return [(it, 1.0 if it.item_id in good else -1.0) for it in self.items if it.item_id in good | bad]

    def rewards(self, useful: Iterable[str], top: int = REWARD_TOP) -> dict[str, bool]:
        """Per expert that ran: did it rank an item marked useful among its own first ``top`` (the
        bandit's reward: an expert that puts the right file first deserves more weight in fusion)?"""
        good = set(useful)
        helped = {
            e for it in self.items if it.item_id in good for e, r in zip(it.experts, it.ranks, strict=True) if r <= top
        }
        return {e: e in helped for e in self.ran}

    def hints(
        self, origin: str, source: str, judged: Sequence[tuple[AnsweredItem, float]], hashes: FileHashes
    ) -> list[Hint]:
        """File hints for ``judged`` items and an expert hint for every expert that ran."""
        out: list[Hint] = []
        seen: set[tuple[str, str]] = set()
        for it, weight in judged:
            if (it.project, it.path) in seen or it.project not in self.roots:
                continue
            seen.add((it.project, it.path))
            got = hashes.get(self.roots[it.project] / it.path)
            if got is None:
                continue
            out.append(self._hint(origin, source, it.project, it.path, None, got[0], weight, ",".join(it.experts)))
        share: dict[str, float] = {}  # expert → its largest share of a confirmed item (1: found it alone)
        for it, w in judged:
            for e in it.experts if w > 0 else ():
                share[e] = max(share.get(e, 0.0), 1.0 / len(it.experts))
        for expert in self.ran:
            out.append(self._hint(origin, source, "", None, expert, None, round(share.get(expert, 0.0), 4), expert))
        return out

    def _hint(
        self,
        origin: str,
        source: str,
        project: str,
        path: str | None,
        expert: str | None,
        digest: str | None,
        weight: float,
        experts: str,
    ) -> Hint:
        hint_id = sha256_hex(f"{origin}|{project}|{path}|{expert}")[:32]
        return Hint(
            hint_id,
            project,
            path,
            None,
            source,
            keys=self.keys,
            klass=self.klass,
            expert=expert if path is None else experts,
            content_hash=digest,
            config_version=self.config_version,
            weight=weight,
            receipt_id=self.receipt_id,
        )


class HintBook:
    """Every hint of a store, indexed in memory by config version and key (lookups are dict reads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: set[str] = set()
        # version → key → (project, path, content hash) → net weight
        self._files: dict[str, dict[str, dict[tuple[str, str, str], float]]] = {}
        # version → key → expert → answer (receipt id) → (its share, from feedback): an answer
        # counts once per expert, and what feedback said about it wins over agreement
        self._experts: dict[str, dict[str, dict[str, dict[str, tuple[float, bool]]]]] = {}
        self.hashes = FileHashes()
        self.loaded: set[str] = set()  # config versions whose stored hints are in memory
        self.wanted: set[str] = set()  # versions asked for before they were loaded (load after the answer)

    def load(self, store: Store) -> int:
        """Bring the stored hints of every wanted version into memory (after an answer, never on
        the hot path: a store read can wait on its ingest). Returns the versions loaded."""
        with self._lock:  # the hot path adds to `wanted` from another thread
            versions = self.wanted - self.loaded
        if versions:
            self.add(h for h in store.list_hints() if h.config_version in versions)
            with self._lock:
                self.loaded |= versions
        return len(versions)

    def add(self, hints: Iterable[Hint]) -> None:
        with self._lock:
            for h in hints:
                if h.hint_id in self._seen or not h.config_version or not h.keys:
                    continue
                self._seen.add(h.hint_id)
                for key in h.keys:
                    if h.path is not None and h.content_hash:
                        by_file = self._files.setdefault(h.config_version, {}).setdefault(key, {})
                        at = (h.project, h.path, h.content_hash)
                        by_file[at] = by_file.get(at, 0.0) + h.weight
                    elif h.expert:
                        tally = self._experts.setdefault(h.config_version, {}).setdefault(key, {})
                        answers = tally.setdefault(h.expert, {})
                        answer, judged = h.receipt_id or h.hint_id, h.source == "feedback"
                        if judged or not answers.get(answer, (0.0, False))[1]:
                            answers[answer] = (h.weight, judged)

    def __len__(self) -> int:
        return len(self._seen)

    def plan(
        self,
        keys: Sequence[str],
        version: str,
        roots: Mapping[str, Path],
        *,
        key_weights: Mapping[str, float],
        max_files: int,
        min_score: float,
        weight: float,
        precision_class: str,
        bounds: SkipBounds | None,
    ) -> HintPlan:
        """The lane of confirmed, unchanged files in ``roots`` and every expert's record on these keys."""
        plan = HintPlan(tuple(keys), weight, precision_class, bounds=bounds)
        scores: dict[tuple[str, str], float] = {}
        named: dict[tuple[str, str], list[str]] = {}
        lines: dict[tuple[str, str], int] = {}
        seen: dict[str, dict[str, tuple[float, bool]]] = {}  # expert → the similar answers it ran on
        with self._lock:
            plan.loaded = version in self.loaded
            if not plan.loaded:
                self.wanted.add(version)
            files, experts = self._files.get(version, {}), self._experts.get(version, {})
            for key in keys:
                w = key_weights.get(key_kind(key), 0.0)
                entries = files.get(key, {}) if w > 0 else {}
                confirmed = [(at, net) for at, net in entries.items() if net > 0 and at[0] in roots]
                for (project, path, digest), net in confirmed:
                    got = self.hashes.get(roots[project] / path)
                    if got is None or got[0] != digest:
                        plan.expired += 1
                        continue
                    # a key that many files answered says less about each of them
                    scores[(project, path)] = scores.get((project, path), 0.0) + w * net / len(confirmed)
                    named.setdefault((project, path), []).append(key)
                    lines[(project, path)] = got[1]
                for expert, answers in experts.get(key, {}).items():
                    seen.setdefault(expert, {}).update(answers)
        credit = bounds.min_share if bounds is not None else 0.0
        judged_only = bounds is not None and bounds.evidence == "feedback"
        for e, answers in sorted(seen.items()):
            shares = [w for w, judged in answers.values() if judged or not judged_only]
            if shares:
                plan.stats[e] = (len(shares), sum(w > credit for w in shares))
        ranked = sorted(((-s, at) for at, s in scores.items() if s >= min_score))[:max_files]
        plan.lane = [LaneFile(p, f, -s, tuple(named[(p, f)]), lines[(p, f)]) for s, (p, f) in ranked]
        return plan
