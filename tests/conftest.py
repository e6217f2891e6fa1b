"""Shared fixtures: real git repos in temp dirs, a copy of the repo's config to edit, a Router."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

ALPHA = {
    "README.md": "# Alpha\n\nAlpha handles uploads.\n\n## Install\n\nRun `make install` to set it up.\n",
    "alpha/__init__.py": "",
    "alpha/storage.py": (
        "import os\n\n\n"
        "class FileSystemStorage:\n"
        '    """Stores uploaded files on the local disk."""\n\n'
        "    def save(self, name, content):\n"
        "        path = os.path.join(self.location, name)\n"
        "        with open(path, 'wb') as fh:\n"
        "            fh.write(content)\n"
        "        os.chmod(path, FILE_UPLOAD_PERMISSIONS)\n"
        "        return path\n\n\n"
        "FILE_UPLOAD_PERMISSIONS = 0o644\n"
    ),
    "alpha/retry.py": (
        "class RetryPolicy:\n"
        '    """Decides how often a failed request is retried, with exponential backoff."""\n\n'
        "    def __init__(self, attempts=3):\n"
        "        self.attempts = attempts\n\n"
        "    def should_retry(self, attempt, error):\n"
        "        if attempt >= self.attempts:\n"
        "            raise RuntimeError('retry budget exhausted for request')\n"
        "        return True\n"
    ),
    "alpha/config.py": "DEFAULTS = {\n    'upload.max_size_mb': 25,\n    'retry.attempts': 3,\n}\n",
    "tests/test_storage.py": (
        "from alpha.storage import FileSystemStorage\n\n\ndef test_save():\n    assert FileSystemStorage\n"
    ),
    ".gitignore": "build/\n*.log\n",
    "build/generated.py": "class FileSystemStorage:  # generated copy, ignored by git\n    pass\n",
    "debug.log": "FileSystemStorage log line\n",
    ".env": "SECRET_TOKEN=FileSystemStorage-super-secret\n",
    "deploy/id_rsa": "-----BEGIN OPENSSH PRIVATE KEY-----\nFileSystemStorage\n-----END OPENSSH PRIVATE KEY-----\n",
    "notes/leak.txt": "aws key AKIAABCDEFGHIJKLMNOP FileSystemStorage\n",
}
BETA = {
    "beta/client.js": (
        "import { RetryPolicy } from './retry.js';\n\n"
        "export class UploadClient {\n"
        "  constructor() { this.policy = new RetryPolicy(); }\n"
        "  upload(file) {\n"
        "    if (!file) { throw new Error('upload requires a file'); }\n"
        "    return this.policy.run(() => fetch('/upload', { method: 'POST', body: file }));\n"
        "  }\n"
        "}\n"
    ),
    "beta/retry.js": "export class RetryPolicy {\n  run(fn) { return fn(); }\n}\n",
    "beta/storage.py": 'class FileSystemStorage:\n    """Beta\'s own storage with the same name."""\n    pass\n',
    "docs/guide.md": "# Guide\n\n## Uploading files\n\nHow do I upload a file? Use `UploadClient.upload`.\n",
}


def git(cwd: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "Ada",
        "GIT_AUTHOR_EMAIL": "ada@example.com",
        "GIT_COMMITTER_NAME": "Ada",
        "GIT_COMMITTER_EMAIL": "ada@example.com",
        "HOME": str(cwd),
        "PATH": "/usr/bin:/bin:/usr/local/bin",
    }
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env).stdout


def make_repo(root: Path, files: dict[str, str], message: str = "initial import", date: str | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    commit_files(root, files, message, date)
    return root


def commit_files(root: Path, files: dict[str, str], message: str, date: str | None = None) -> str:
    """Write ``files`` and commit them all (authored at ``date``, ISO 8601, when given); the new sha."""
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", message, *([f"--date={date}"] if date else []))
    return git(root, "rev-parse", "HEAD").strip()


@pytest.fixture
def workspace_dir(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    make_repo(ws / "alpha", ALPHA)
    make_repo(ws / "beta", BETA)
    # a second commit in alpha so history has something to find
    (ws / "alpha" / "alpha" / "retry.py").write_text(ALPHA["alpha/retry.py"] + "\n# backoff jitter added\n")
    git(ws / "alpha", "commit", "-qam", "Add jitter to the retry backoff")
    return ws


@pytest.fixture
def config_dir(tmp_path: Path) -> Path:
    """A private copy of the repo's config, safe to edit."""
    dst = tmp_path / "config"
    dst.mkdir()
    shutil.copy(ROOT / "experts.yaml", dst)
    shutil.copy(ROOT / "priors.yaml", dst)
    shutil.copy(ROOT / "classifier.yaml", dst)
    shutil.copytree(ROOT / "pipelines", dst / "pipelines")
    return dst


@pytest.fixture
def indexed(workspace_dir: Path, config_dir: Path) -> Path:
    from engine.indexing import index_workspace
    from engine.spec import load_config
    from engine.workspace import Workspace

    index_workspace(Workspace.open([workspace_dir]), load_config(config_dir), only=["bm25"], progress=False)
    return workspace_dir
