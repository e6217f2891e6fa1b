"""Measure what finding adapters costs a fresh process: the module-name convention vs a package scan.

Usage::

    python scripts/measure_adapter_imports.py [--runs 7]

Each run is a new interpreter (the CLI's cold start): "convention" resolves ripgrep, bm25 and git
the way ``engine.experts.adapter_class`` does (one module each); "scan" imports every module of
``engine.experts`` the way a decorator-filled registry would have to before its first lookup.
Prints the median and the minimum in milliseconds (docs/adr/0006-adapter-registry.md).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONVENTION = (
    "import time; t = time.perf_counter(); from engine.experts import adapter_class; "
    "[adapter_class(n) for n in ('ripgrep', 'bm25', 'git')]; print((time.perf_counter() - t) * 1000)"
)
SCAN = (
    "import time; t = time.perf_counter(); import importlib, pkgutil, engine.experts as E; "
    "[importlib.import_module('engine.experts.' + m.name) for m in pkgutil.iter_modules(E.__path__)]; "
    "print((time.perf_counter() - t) * 1000)"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    for name, code in (("convention", CONVENTION), ("scan", SCAN)):
        times = [
            float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT).stdout)
            for _ in range(args.runs)
        ]
        print(f"{name:<11} median {statistics.median(times):7.1f} ms   min {min(times):7.1f} ms")


if __name__ == "__main__":
    main()
