"""The feedback bandit: per class, Thompson sampling over bounded multiplicative adjustments of the
priors (priors.yaml ``bandit``; docs/adr/0017-flywheel.md).

Each (scope, class, expert) is an arm with a Beta posterior over "this expert's items are the
useful ones when it runs": ``Beta(prior + reward, prior + pulls - reward)``. For a question, the
gate draws θ for each candidate expert and multiplies its prior by a factor in
``[min_factor, max_factor]``: ``max_factor^(2θ-1)`` above θ = 0.5, ``min_factor^(1-2θ)`` below,
so a fresh arm (θ near 0.5) keeps its prior and the factor is bounded whatever the data.

**Reproducible.** The draw's seed is a hash of the arms' *state version* (a hash of every arm of
that scope and class) and the request's hash, so ``config_version`` plus the bandit state gives
exactly the same weights, hence the same run. The receipt's ``bandit`` records the scope, state
version, seed, each factor and the weights actually used.

**Fed** by feedback on answers (the Router, after the answer) and so by eval judgments replayed as
feedback (``benchmarks/replay.py``): every expert that ran is pulled; it is rewarded when it
returned an item marked useful. Off by default (``enabled: false``): runs are then reproduced by
``config_version`` alone.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .spec import BanditSpec
from .store import BanditArm, Store
from .types import canonical_json, sha256_hex


def scope_of(spec: BanditSpec, session_id: str | None) -> str | None:
    """The arms' scope for a request: ``workspace``, ``session:<id>``, or None (session scope, no session)."""
    if spec.scope == "session":
        return f"session:{session_id}" if session_id else None
    return "workspace"


def arm_id(scope: str, klass: str, expert: str) -> str:
    return f"{scope}|{klass}|{expert}"


def factor(theta: float, spec: BanditSpec) -> float:
    """θ in [0, 1] → a multiplier in [min_factor, max_factor]; θ = 0.5 → 1."""
    if theta >= 0.5:
        return float(spec.max_factor ** (2 * theta - 1))
    return float(spec.min_factor ** (1 - 2 * theta))


@dataclass(frozen=True, slots=True)
class Draw:
    """One question's adjustments: what the receipt records to reproduce it."""

    scope: str
    state_version: str
    seed: int
    factors: Mapping[str, float]
    weights: Mapping[str, float]  # prior × factor: the weights actually used

    def to_receipt(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "state_version": self.state_version,
            "seed": self.seed,
            "factors": dict(sorted(self.factors.items())),
            "weights": dict(sorted(self.weights.items())),
        }


class Bandit:
    """Every arm of a store, in memory (draws are reads; updates come after the answer)."""

    def __init__(self, arms: Iterable[BanditArm] = (), *, loaded: bool = True) -> None:
        self._lock = threading.Lock()
        self._arms = {a.arm_id: a for a in arms}
        self.loaded = loaded  # False until the store's arms were read (after an answer)
        self.wanted = False  # a draw was made before they were

    def load(self, store: Store) -> bool:
        """Read the store's arms if a draw wanted them (after an answer, never on the hot path);
        arms this process updated since keep their newer state."""
        if self.loaded or not self.wanted:
            return False
        stored = store.list_bandit()
        with self._lock:
            for a in stored:
                mine = self._arms.get(a.arm_id)
                if mine is None or a.updated_at > mine.updated_at:
                    self._arms[a.arm_id] = a
            self.loaded = True
        return True

    def state_version(self, scope: str, klass: str) -> str:
        prefix = arm_id(scope, klass, "")
        with self._lock:
            rows = sorted((a.arm_id, a.pulls, a.reward) for a in self._arms.values() if a.arm_id.startswith(prefix))
        return sha256_hex(canonical_json(rows))[:16]

    def draw(self, spec: BanditSpec, scope: str, klass: str, priors: Mapping[str, float], request_hash: str) -> Draw:
        """Thompson-sample a factor for each expert of ``priors`` (in name order, one seeded stream)."""
        self.wanted |= not self.loaded
        version = self.state_version(scope, klass)
        seed = int(sha256_hex(f"{version}:{request_hash}")[:12], 16)
        rng = random.Random(seed)
        factors: dict[str, float] = {}
        with self._lock:
            for expert in sorted(priors):
                a = self._arms.get(arm_id(scope, klass, expert))
                pulls, reward = (a.pulls, a.reward) if a is not None else (0, 0.0)
                theta = rng.betavariate(spec.prior + reward, spec.prior + max(0.0, pulls - reward))
                factors[expert] = round(factor(theta, spec), 4)
        # rounded as the signed receipt keeps numbers, so the weights recorded are the weights used
        weights = {e: round(priors[e] * f, 4) for e, f in factors.items()}
        return Draw(scope, version, seed, factors, weights)

    def update(self, scope: str, klass: str, rewards: Mapping[str, bool]) -> list[BanditArm]:
        """One feedback: each expert that ran is pulled, rewarded if it returned a useful item."""
        out = []
        with self._lock:
            for expert, useful in sorted(rewards.items()):
                key = arm_id(scope, klass, expert)
                old = self._arms.get(key)
                pulls, reward = (old.pulls, old.reward) if old is not None else (0, 0.0)
                arm = BanditArm(key, klass, expert, pulls + 1, reward + (1.0 if useful else 0.0))
                self._arms[key] = arm
                out.append(arm)
        return out
