"""How many files the secrets detector flags on real trees, by rule (docs/adr/0008-secrets-detector.md).

A flagged file is withheld whole from every expert, so a false positive on a source module costs
answers. This counts flagged files per rule and lists the flagged files that are not tests.

Usage: python benchmarks/secrets_withheld.py [--engine-rules] [--all-files] DIR [DIR...]

``--engine-rules``: only the engine's own rules (``engine.secret_scan.ENGINE_RULES``, the ADR's
"measured false positives" counts), not detect-secrets' plugins. ``--all-files``: every file the
indexers read (not binary, at most 2,000,000 bytes; ``.git``, ``.engine``, ``node_modules``,
``__pycache__`` skipped), not only the common text suffixes.
"""

from __future__ import annotations

import argparse
import collections
import os
import time
from collections.abc import Iterator
from pathlib import Path

from engine.secret_scan import Detector, engine_findings

TEXT_SUFFIXES = {".py", ".md", ".rst", ".txt", ".yaml", ".yml", ".cfg", ".toml", ".json", ".js", ".ts"}
SKIPPED_DIRS = {".git", ".engine", "node_modules", "__pycache__"}
MAX_BYTES = 2_000_000  # the indexers' limit (engine.index.files.MAX_FILE_BYTES)


def texts(root: Path, all_files: bool) -> Iterator[tuple[Path, str]]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS)
        for name in sorted(filenames):
            f = Path(dirpath) / name
            if not all_files and f.suffix not in TEXT_SUFFIXES:
                continue
            try:
                data = f.read_bytes()
            except OSError:
                continue
            if len(data) > MAX_BYTES or b"\0" in data[:4096]:
                continue
            yield f, data.decode("utf-8", "replace")


def main(roots: list[Path], engine_only: bool, all_files: bool) -> None:
    detector = None if engine_only else Detector.get()
    by_rule: collections.Counter[str] = collections.Counter()
    files = 0
    flagged: list[tuple[str, list[str]]] = []
    started = time.perf_counter()
    for root in roots:
        for f, text in texts(root, all_files):
            files += 1
            found = engine_findings(text) if detector is None else list(detector.findings(text, f.name))
            rules = sorted({x.rule for x in found})
            if rules:
                flagged.append((str(f.relative_to(root.parent)), rules))
                by_rule.update(rules)
    print(f"{files} files, {len(flagged)} flagged, {time.perf_counter() - started:.1f} s")
    print(by_rule.most_common())
    source = [x for x in flagged if "test" not in x[0]]
    print(f"{len(source)} flagged outside tests:")
    for path, rules in source:
        print(f"  {path}  {', '.join(rules)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("roots", nargs="+", type=Path)
    parser.add_argument("--engine-rules", action="store_true", help="only the engine's own rules")
    parser.add_argument("--all-files", action="store_true", help="every file the indexers read")
    args = parser.parse_args()
    main(args.roots, args.engine_rules, args.all_files)
