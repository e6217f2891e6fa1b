"""One build step beside pyproject.toml: ship the default config inside the package.

The repository-root ``experts.yaml``, ``priors.yaml``, ``classifier.yaml`` and ``pipelines/*.yaml`` are the one home
of the defaults. A wheel build copies them to ``engine/defaults/`` so that ``pip install .`` gives
an ``engine run router`` that works from any directory (engine/configdir.py). An editable install
copies nothing: it reads the repository-root files directly.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


def default_config_files() -> list[Path]:
    """The default config, relative to the repository root."""
    pipelines = sorted(p.relative_to(ROOT) for p in ROOT.glob("pipelines/*.yaml"))
    return [Path("experts.yaml"), Path("priors.yaml"), Path("classifier.yaml"), *pipelines]


def copy_defaults(package_dir: Path) -> None:
    """Copy the default config into ``<package_dir>/defaults`` (tests/test_config_resolution.py runs this)."""
    for rel in default_config_files():
        (package_dir / "defaults" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / rel, package_dir / "defaults" / rel)


class BuildWithDefaults(build_py):
    def run(self) -> None:
        super().run()
        if not getattr(self, "editable_mode", False):
            copy_defaults(Path(self.build_lib) / "engine")


if __name__ == "__main__":  # setuptools' build backend runs this file as __main__
    setup(cmdclass={"build_py": BuildWithDefaults})
