"""How fast and how noisy is the secrets policy (engine/secrets.py), and does its prefilter change verdicts?

    .venv/bin/python benchmarks/secrets_detector.py DIR [DIR ...] [--compare N] [--json]

Walks the text files under DIR (< 2 MB, no NUL byte, ``.git`` skipped) and reports:

* **engine policy**: files/s and MB/s of ``SecretsPolicy.content_rule`` (prefilter + detect-secrets
  line analysis), and which files it flags, by rule — the files that would be withheld whole;
* **--compare N**: on the first N files, detect-secrets' own ``scan_file`` with the same plugins
  (no prefilter): its speed, and every file where the two verdicts differ (should be none);
* **all plugins**: how many files the plugins the policy leaves out (high-entropy strings, public
  IPs) would add, which is why they are left out;
* **--live QUESTION**: the live cost — ripgrep's items for QUESTION over the first DIR as a
  workspace, screened (engine/screen.py) with no saved verdict and with the verdicts
  ``engine index`` saved in its data dir (run ``engine index -w DIR`` first).

Numbers in docs/adr/0008-secrets-detector.md come from this script.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path
from typing import Any

from engine.secret_scan import NOISY_PLUGINS, Detector
from engine.secrets import SecretsPolicy


def text_files(roots: list[Path]) -> list[tuple[Path, str]]:
    out = []
    for root in roots:
        for f in sorted(root.rglob("*")):
            if ".git" in f.parts or not f.is_file() or f.is_symlink():
                continue
            try:
                data = f.read_bytes()
            except OSError:
                continue
            if len(data) > 2_000_000 or b"\x00" in data[:8192]:
                continue
            out.append((f, data.decode("utf-8", "replace")))
    return out


def engine_pass(files: list[tuple[Path, str]]) -> dict[str, Any]:
    policy = SecretsPolicy()
    started = time.perf_counter()
    Detector.get()
    init_s = time.perf_counter() - started
    started = time.perf_counter()
    flagged: dict[str, str] = {}
    for f, text in files:
        rule = policy.content_rule(text, f.name)
        if rule:
            flagged[str(f)] = rule
    seconds = time.perf_counter() - started
    mb = sum(len(t.encode("utf-8")) for _, t in files) / 1e6
    by_rule = collections.Counter(r.split(" (line")[0] for r in flagged.values())
    return {
        "files": len(files),
        "mb": round(mb, 2),
        "init_s": round(init_s, 3),
        "seconds": round(seconds, 3),
        "files_per_s": round(len(files) / seconds, 1) if seconds else None,
        "mb_per_s": round(mb / seconds, 2) if seconds else None,
        "flagged": len(flagged),
        "flagged_pct": round(100 * len(flagged) / max(1, len(files)), 2),
        "by_rule": dict(by_rule.most_common()),
        "flagged_files": flagged,
    }


def detect_secrets_pass(files: list[tuple[Path, str]], plugins: list[str]) -> tuple[dict[str, set[str]], float]:
    from detect_secrets.core.scan import scan_file
    from detect_secrets.settings import transient_settings

    found: dict[str, set[str]] = {}
    with transient_settings({"plugins_used": [{"name": n} for n in plugins]}):
        started = time.perf_counter()
        for f, _ in files:
            types = {s.type for s in scan_file(str(f))}
            if types:
                found[str(f)] = types
        seconds = time.perf_counter() - started
    return found, seconds


def live_pass(root: Path, question: str) -> dict[str, Any]:
    import anyio

    from engine.classifier import classify
    from engine.experts import ExpertEnv, adapter_class
    from engine.screen import screen
    from engine.spec import load_config
    from engine.types import Query, Scope
    from engine.workspace import Workspace

    ws = Workspace.open([root])
    cfg = load_config(Path(__file__).resolve().parent.parent)
    rg = adapter_class("ripgrep")(cfg.experts["ripgrep"], ExpertEnv(ws))
    c = classify(question, cfg.classifier, 0.5)
    query = Query(question, c.klass, c.features, Scope(), ws.projects, limit=60)
    items = anyio.run(rg.search, query, rg.plan(query))
    out: dict[str, Any] = {"items": len(items), "files": len({(i.project, i.path) for i in items})}
    for label, cache in (("no_saved_verdicts_ms", None), ("saved_verdicts_ms", ws.data_dir / "secrets")):
        policy = SecretsPolicy(cache_dir=cache)
        started = time.perf_counter()
        screen(items, ws.projects, policy, adapter="ripgrep", data_dir=ws.data_dir)
        out[label] = round((time.perf_counter() - started) * 1000, 2)
        started = time.perf_counter()
        screen(items, ws.projects, policy, adapter="ripgrep", data_dir=ws.data_dir)
        out[label.replace("_ms", "_again_ms")] = round((time.perf_counter() - started) * 1000, 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("roots", nargs="+", type=Path)
    ap.add_argument("--compare", type=int, default=0, help="also run detect-secrets' own scan_file on N files")
    ap.add_argument("--live", metavar="QUESTION", help="also time screening ripgrep's items for QUESTION")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.live:
        live = live_pass(args.roots[0], args.live)
        print(json.dumps(live) if args.json else f"live: {live}")
    files = text_files(args.roots)
    result: dict[str, Any] = {"engine": engine_pass(files)}
    if args.compare:
        sample = files[: args.compare]
        used = sorted(type(p).__name__ for p in Detector.get().plugins)
        theirs, seconds = detect_secrets_pass(sample, used)
        ours = {str(f) for f, _ in sample if str(f) in result["engine"]["flagged_files"]}
        result["detect_secrets_scan_file"] = {
            "files": len(sample),
            "seconds": round(seconds, 2),
            "files_per_s": round(len(sample) / seconds, 1),
            "flagged": len(theirs),
            "only_engine": sorted(ours - set(theirs)),
            "only_detect_secrets": sorted(set(theirs) - ours),
        }
        noisy, _ = detect_secrets_pass(sample, used + sorted(NOISY_PLUGINS))
        added = collections.Counter(t for f, ts in noisy.items() if f not in theirs for t in ts)
        result["with_noisy_plugins"] = {"files": len(sample), "flagged": len(noisy), "added_by": dict(added)}
    if args.json:
        json.dump(result, sys.stdout, indent=1)
        return
    e = result["engine"]
    print(
        f"engine policy: {e['files']} files, {e['mb']} MB in {e['seconds']} s = {e['files_per_s']} files/s, "
        f"{e['mb_per_s']} MB/s (detector init {e['init_s']} s); flagged {e['flagged']} ({e['flagged_pct']} %) "
        f"{e['by_rule']}"
    )
    if "detect_secrets_scan_file" in result:
        d = result["detect_secrets_scan_file"]
        print(
            f"detect-secrets scan_file, same plugins: {d['files']} files in {d['seconds']} s = {d['files_per_s']} "
            f"files/s; flagged {d['flagged']}; only engine {len(d['only_engine'])}, "
            f"only detect-secrets {len(d['only_detect_secrets'])}"
        )
        for f in d["only_engine"] + d["only_detect_secrets"]:
            print("   differs:", f)
        n = result["with_noisy_plugins"]
        print(f"with the noisy plugins too: flagged {n['flagged']} of {n['files']} ({n['added_by']})")


if __name__ == "__main__":
    main()
