"""What reading the stored hints would cost on the hot path (docs/adr/0017-flywheel.md): the time
of one ``Store.list_hints()`` on a fresh DuckDB store holding N hint rows (a read brings the spool
in first). This is why the hints node reads memory only and the Router's flush loads the store.

    python benchmarks/hint_store_read.py 0 2000 20000
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from engine.store import Hint, open_store


def rows(n: int) -> list[Hint]:
    out = []
    for i in range(n):
        file = i % 2 == 1
        out.append(
            Hint(
                f"h{i}",
                "p",
                f"f{i % 300}.py" if file else None,
                None,
                "feedback",
                keys=(f"kw:w{i % 500}", f"class:c{i % 6}"),
                klass=f"c{i % 6}",
                expert=None if file else f"e{i % 5}",
                content_hash="0" * 64 if file else None,
                config_version="v",
                weight=1.0,
                receipt_id=f"r{i // 10}",
            )
        )
    return out


def main(sizes: list[int]) -> None:
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            store = open_store(Path(tmp))
            for h in rows(n):
                store.put_hint(h)
            store.sync()
            store.close()
            store = open_store(Path(tmp))
            started = time.perf_counter()
            got = store.list_hints()
            print(f"{n:>6} rows: list_hints {1000 * (time.perf_counter() - started):.1f} ms ({len(got)} read)")
            store.close()


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [0, 2000, 20000])
