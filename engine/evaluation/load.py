"""``engine bench --load``: a load ladder, a soak and a chaos slice against router replicas
sharing one PostgreSQL store (docs/scale.md).

* **Ladder:** for each replica count and each concurrency c, c MCP clients over streamable HTTP
  (spread round-robin over the replicas) ask questions back to back for ``duration_s``; per cell:
  requests, throughput, errors, p50/p95/p99.
* **Soak:** one long cell; p95 per window and its drift (last window vs first).
* **Chaos:** a replica SIGKILLed mid-load (its clients fail over; the others must not fail), an
  expert stalled mid-load (a config hot-reload adds a ``sleep`` expert to every class; answers
  must keep coming within its deadline) and PostgreSQL restarted mid-load (requests fail loudly
  while it is down, never answer without a stored receipt, and recover).
* **Receipts:** after every cell, each answered request's receipt is looked up: it must be stored
  exactly once (one row, one log record) and verify under the pinned key; at the end the whole
  log is audited (every replica's chain intact).

Loopback only, bounded in count and time; every process is ours and ended by its pid.
"""

from __future__ import annotations

import random
import shutil
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import yaml

from ..audit import audit
from ..keys import KeyRing
from ..mcp_client import http_tools
from ..receipts import verify_pinned
from ..store import Store
from .metrics import percentiles
from .replicas import Replica, start_replicas

#: the stalled expert of the chaos slice: never answers, so its deadline decides
STALL_EXPERT = {"adapter": "command", "precision_class": "lexical", "timeout_ms": 300}


@dataclass
class Sample:
    started: float  # seconds since the cell began
    ms: float
    replica: int
    ok: bool
    receipt_id: str | None = None
    error: str | None = None


@dataclass
class Cell:
    name: str
    replicas: int
    concurrency: int
    duration_s: float
    samples: list[Sample] = field(default_factory=list)
    events: dict[str, float] = field(default_factory=dict)  # chaos event → seconds into the cell

    def summary(self) -> dict[str, Any]:
        ok = [s for s in self.samples if s.ok]
        errors = Counter(s.error or "error" for s in self.samples if not s.ok)
        return {
            "cell": self.name,
            "replicas": self.replicas,
            "concurrency": self.concurrency,
            "duration_s": self.duration_s,
            "requests": len(self.samples),
            "answered": len(ok),
            "rps": round(len(ok) / self.duration_s, 2) if self.duration_s else None,
            "errors": sum(errors.values()),
            "error_kinds": dict(errors.most_common(5)),
            "latency_ms": percentiles([s.ms for s in ok]),
            "events": self.events,
        }


async def drive(
    replicas: list[Replica],
    concurrency: int,
    duration_s: float,
    questions: list[dict[str, Any]],
    *,
    tool: str = "router",
    chaos: Callable[[float], None] | None = None,
) -> list[Sample]:
    """``concurrency`` clients asking back to back until ``duration_s`` passes; a client whose
    replica fails moves to the next live one. ``chaos(elapsed)`` is called every 0.25 s."""
    samples: list[Sample] = []
    t0 = time.monotonic()
    stop_at = t0 + duration_s

    async def client(i: int) -> None:
        rng = random.Random(i)
        target = i % len(replicas)
        while time.monotonic() < stop_at:
            live = [r for r in replicas if r.alive()]
            if not live:
                return
            rep = replicas[target] if replicas[target].alive() else live[target % len(live)]
            try:
                async with http_tools(rep.url, timeout_s=120) as call:
                    while time.monotonic() < stop_at:
                        q = rng.choice(questions)
                        started = time.monotonic()
                        out = await call(tool, {**q, "no_cache": True, "limit": 10, "format": "json"})
                        ms = (time.monotonic() - started) * 1000
                        structured = out.structured if isinstance(out.structured, dict) else {}
                        rid = (structured.get("receipt") or {}).get("receipt_id")
                        err = None if not out.is_error else (out.text.split(":", 1)[0] or "tool_error")
                        samples.append(Sample(started - t0, ms, rep.index, not out.is_error, rid, err))
            except Exception as exc:  # noqa: BLE001 - a dead replica or a dropped connection: counted, then fail over
                samples.append(Sample(time.monotonic() - t0, 0.0, rep.index, False, None, type(exc).__name__))
                target = (target + 1) % len(replicas)
                await anyio.sleep(0.1)

    async def ticker() -> None:
        while chaos is not None and time.monotonic() < stop_at:
            chaos(time.monotonic() - t0)
            await anyio.sleep(0.25)

    async with anyio.create_task_group() as tg:
        for i in range(concurrency):
            tg.start_soon(client, i)
        tg.start_soon(ticker)
    return samples


def check_receipts(store: Store, samples: list[Sample], pinned: Mapping[str, str | None]) -> dict[str, Any]:
    """Every answered request: exactly one stored row and one log record, verifying under a pinned key."""
    answered = [s.receipt_id for s in samples if s.ok and s.receipt_id]
    stored = {s.receipt_id: s for s in store.stored_receipts()}
    logged = Counter(str(b.get("receipt_id")) for b in store.logged_receipts())
    missing = [r for r in answered if r not in stored]
    not_once = [r for r in answered if logged[r] != 1]
    invalid = [
        r for r in answered if r in stored and (stored[r].body is None or verify_pinned(stored[r].body or {}, pinned))
    ]
    return {
        "answered": len(answered),
        "answered_without_receipt_id": sum(1 for s in samples if s.ok and not s.receipt_id),
        "missing": len(missing),
        "not_logged_exactly_once": len(not_once),
        "invalid": len(invalid),
        "ok": not missing and not not_once and not invalid and all(s.receipt_id for s in samples if s.ok),
    }


def p95_drift(samples: list[Sample], window_s: float) -> dict[str, Any]:
    """p95 per window of ``window_s``; drift = last full window's p95 over the first's, minus 1."""
    windows: dict[int, list[float]] = {}
    for s in samples:
        if s.ok:
            windows.setdefault(int(s.started // window_s), []).append(s.ms)
    series = [percentiles(windows[k])["p95"] for k in sorted(windows)]
    full = [p for p in series[:-1] if p is not None] or [p for p in series if p is not None]
    drift = round(full[-1] / full[0] - 1, 3) if len(full) >= 2 and full[0] else None
    return {"window_s": window_s, "p95_ms": series, "drift": drift}


def stall_config(config_dir: Path, dest: Path) -> Path:
    """A copy of the config with the stalled expert defined (selected by no class yet)."""
    shutil.copytree(config_dir, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".engine", ".git"))
    experts = yaml.safe_load((dest / "experts.yaml").read_text())
    experts["experts"]["stalled"] = {**STALL_EXPERT, "settings": {"argv": ["sleep", "60"], "ok_codes": [0]}}
    (dest / "experts.yaml").write_text(yaml.safe_dump(experts, sort_keys=False))
    return dest


def set_stall(config_dir: Path, on: bool) -> None:
    """Add (or remove) the stalled expert to every class's priors: the replicas hot-reload it."""
    path = config_dir / "priors.yaml"
    priors = yaml.safe_load(path.read_text())
    for weights in priors["classes"].values():
        if on:
            weights["stalled"] = 1.0
        else:
            weights.pop("stalled", None)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(priors, sort_keys=False))
    tmp.replace(path)


def pinned_keys(data_dir: Path) -> dict[str, str | None]:
    return KeyRing(data_dir).verification_keys()


def final_audit(store: Store, data_dir: Path) -> dict[str, Any]:
    report = audit(store, pinned_keys(data_dir))
    d = report.to_dict()
    return {k: d[k] for k in ("checked", "valid", "chains", "ok")} | {"breaks": d["breaks"][:3]}


__all__ = [
    "Cell",
    "Sample",
    "check_receipts",
    "drive",
    "final_audit",
    "p95_drift",
    "pinned_keys",
    "set_stall",
    "stall_config",
    "start_replicas",
]
