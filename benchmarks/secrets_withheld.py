"""How many files the secrets detector flags on real trees, by rule (docs/adr/0008-secrets-detector.md).

A flagged file is withheld whole from every expert, so a false positive on a source module costs
answers. This counts flagged files per rule and lists the flagged files that are not tests.

Usage: python benchmarks/secrets_withheld.py DIR [DIR...]
"""

from __future__ import annotations

import collections
import sys
import time
from pathlib import Path

from engine.secret_scan import Detector

TEXT_SUFFIXES = {".py", ".md", ".rst", ".txt", ".yaml", ".yml", ".cfg", ".toml", ".json", ".js", ".ts"}


def main(roots: list[Path]) -> None:
    detector = Detector.get()
    by_rule: collections.Counter[str] = collections.Counter()
    files = 0
    flagged: list[tuple[str, list[str]]] = []
    started = time.perf_counter()
    for root in roots:
        for f in sorted(root.rglob("*")):
            if not f.is_file() or f.suffix not in TEXT_SUFFIXES:
                continue
            try:
                text = f.read_text("utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            files += 1
            rules = sorted({x.rule for x in detector.findings(text, f.name)})
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
    main([Path(p) for p in sys.argv[1:]])
