"""Write a copy of the repo's config for very large corpora: semantic indexes one vector per file.

    python benchmarks/large_corpus_config.py /tmp/large-config
    engine eval ../shared/eval/swebench-lite-files --config-dir /tmp/large-config

swebench-lite-files is 31 snapshots / 18,101 files: one vector per syntax chunk (~289k chunks)
would take ~85 min to embed on 2 cores, one per file (`units: files`, path + defined names +
first words) takes ~6.5 min. The `typed` expert is off: jedi's index-time analysis took 15 min
of one core for 704 of django@3.0's 2,577 files (2026-12-01), i.e. hours for the 31 snapshots, and
no swebench question reaches it (all 121 are `conceptual`, whose pipeline has no typed lane), so
the answers are the same with or without it. Everything else is the repo's config unchanged.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "priors.yaml", out / "priors.yaml")
    shutil.copy(ROOT / "classifier.yaml", out / "classifier.yaml")
    shutil.copytree(ROOT / "pipelines", out / "pipelines", dirs_exist_ok=True)
    experts = yaml.safe_load((ROOT / "experts.yaml").read_text())
    experts["experts"]["semantic"]["settings"]["units"] = "files"
    experts["experts"]["typed"]["enabled"] = False
    (out / "experts.yaml").write_text(yaml.safe_dump(experts, sort_keys=False))
    print(out)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
