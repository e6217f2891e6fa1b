"""Build the dev question set's multi-repo workspace: pinned registry packages, one git repo each.

    python benchmarks/devset/build_workspace.py DEST [--downloads DIR] [--no-npm] [--force]

Each project below is fetched with its registry's ordinary client (``pip download --no-deps
--no-binary :all:`` for a PyPI sdist, ``npm pack`` for an npm tarball), checked against a pinned
sha256, unpacked into ``DEST/<project>/`` and made a git repo with a single commit whose author,
committer, date and message are fixed, so the same inputs give the same commit hash on any
machine (the expected hashes are pinned too and checked). ``DEST/workspace.json`` records what
was built. ``engine index -w DEST`` then sees one project per repo, named as below; the qrels
of the question set name files as ``<project>/<path inside the package>``.

Only the standard library, ``pip`` (this interpreter's) and ``npm``/``git`` on PATH are used.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath


@dataclass(frozen=True)
class Package:
    project: str  # folder under DEST and the project name the engine reports
    registry: str  # pypi | npm
    name: str
    version: str
    sha256: str  # of the downloaded archive
    commit: str  # the import commit this script makes from it (fixed author/date/message)
    licence: str


PACKAGES: tuple[Package, ...] = (
    Package(
        "marshmallow",
        "pypi",
        "marshmallow",
        "4.4.0",
        "9e6ffa8511012ca89732324c1c253efd7b4d35632dcbdf80aa793fe01804af3e",
        "42533890aa45158d849e51abd49baeafed61b3a6",
        "MIT",
    ),
    Package(
        "webargs",
        "pypi",
        "webargs",
        "8.7.1",
        "799bf9039c76c23fd8dc1951107a75a9e561203c15d6ae8f89c1e46e234636c1",
        "cbd71339bf21272d2b459026f723811ecd12338f",
        "MIT",
    ),
    Package(
        "apispec",
        "pypi",
        "apispec",
        "6.10.1",
        "46896cb0cab23b4e853e528528937719739f836358832bb8610edd14db1d9c01",
        "4b78ceca40173e41eb86c3a4a2612fe3dc4704bf",
        "MIT",
    ),
    Package(
        "attrs",
        "pypi",
        "attrs",
        "26.1.0",
        "d03ceb89cb322a8fd706d4fb91940737b6642aa36998fe130a9bc96c985eff32",
        "2b38052af7a4bd12ed555413341014a922877094",
        "MIT",
    ),
    Package(
        "cattrs",
        "pypi",
        "cattrs",
        "26.2.1",
        "679132bfdc225c5ee40c024fc42519954767c387f950dc6751946c586bccdc6d",
        "7a46760816279be639aaf6bfbd3652abd963abf1",
        "MIT",
    ),
    Package(
        "ajv",
        "npm",
        "ajv",
        "8.17.1",
        "f09dae78b8cc984dbf178eba92a7b19bff9e5f7c990508f3af0bf8f118770308",
        "b97c9cce7e71d85bae62e62ee1385985f6e2c06d",
        "MIT",
    ),
)

#: one fixed identity and instant for every import commit (determinism, not attribution)
COMMIT_ENV = {
    "GIT_AUTHOR_NAME": "devset",
    "GIT_AUTHOR_EMAIL": "devset@example.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+00:00",
    "GIT_COMMITTER_NAME": "devset",
    "GIT_COMMITTER_EMAIL": "devset@example.invalid",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+00:00",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}


class BuildError(RuntimeError):
    pass


def sha256_of(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def download(pkg: Package, into: Path) -> Path:
    """The package's archive in ``into`` (reused when already there with the pinned hash)."""
    into.mkdir(parents=True, exist_ok=True)
    ext = ".tgz" if pkg.registry == "npm" else ".tar.gz"
    stem = pkg.name.lstrip("@").replace("/", "-") if pkg.registry == "npm" else pkg.name.replace("-", "_")
    candidates = [into / f"{stem}-{pkg.version}{ext}", into / f"{pkg.name}-{pkg.version}{ext}"]
    found = next((c for c in candidates if c.is_file() and sha256_of(c) == pkg.sha256), None)
    if found:
        return found
    if pkg.registry == "pypi":
        argv = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:"]
        argv += ["-d", str(into), f"{pkg.name}=={pkg.version}"]
    elif pkg.registry == "npm":
        argv = ["npm", "pack", "--silent", "--pack-destination", str(into), f"{pkg.name}@{pkg.version}"]
    else:
        raise BuildError(f"{pkg.project}: unknown registry {pkg.registry!r}")
    res = subprocess.run(argv, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise BuildError(f"{pkg.project}: {' '.join(argv[:4])} … failed: {res.stderr.strip()[-500:]}")
    found = next((c for c in candidates if c.is_file()), None)
    if found is None:
        raise BuildError(f"{pkg.project}: download left none of {[c.name for c in candidates]} in {into}")
    got = sha256_of(found)
    if got != pkg.sha256:
        raise BuildError(f"{pkg.project}: {found.name} has sha256 {got}, pinned {pkg.sha256}")
    return found


def unpack(archive: Path, dest: Path) -> None:
    """Extract the archive's single top folder (``name-version/`` or npm's ``package/``) as ``dest``."""
    with tarfile.open(archive, "r:gz") as tar:
        members = tar.getmembers()
        tops = {PurePosixPath(m.name).parts[0] for m in members if m.name.strip("/")}
        if len(tops) != 1:
            raise BuildError(f"{archive.name}: expected one top folder, found {sorted(tops)[:5]}")
        with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
            tar.extractall(tmp, filter="data")  # "data" refuses links out of the tree and absolute paths
            (Path(tmp) / tops.pop()).rename(dest)


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, **COMMIT_ENV, "HOME": str(repo)}
    res = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise BuildError(f"git {' '.join(args)} in {repo}: {res.stderr.strip()[-300:]}")
    return res.stdout.strip()


def commit(repo: Path, pkg: Package) -> str:
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--no-gpg-sign", "-m", f"import {pkg.name} {pkg.version} from {pkg.registry}")
    return git(repo, "rev-parse", "HEAD")


def build(dest: Path, downloads: Path, *, npm: bool = True, force: bool = False) -> dict[str, dict[str, str]]:
    dest.mkdir(parents=True, exist_ok=True)
    built: dict[str, dict[str, str]] = {}
    for pkg in PACKAGES:
        if pkg.registry == "npm" and not npm:
            continue
        target = dest / pkg.project
        if target.exists():
            if not force:
                raise BuildError(f"{target} exists; pass --force to rebuild it")
            shutil.rmtree(target)
        archive = download(pkg, downloads)
        unpack(archive, target)
        head = commit(target, pkg)
        if pkg.commit and head != pkg.commit:
            raise BuildError(f"{pkg.project}: import commit {head} differs from the pinned {pkg.commit}")
        built[pkg.project] = {
            "registry": pkg.registry,
            "package": f"{pkg.name}=={pkg.version}" if pkg.registry == "pypi" else f"{pkg.name}@{pkg.version}",
            "sha256": pkg.sha256,
            "commit": head,
            "licence": pkg.licence,
        }
        print(f"{pkg.project:12} {built[pkg.project]['package']:22} {head}", file=sys.stderr)
    (dest / "workspace.json").write_text(json.dumps(built, indent=1) + "\n")
    return built


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dest", type=Path, help="workspace folder to create (one git repo per project inside)")
    ap.add_argument("--downloads", type=Path, help="keep archives here and reuse them (default: a temp folder)")
    ap.add_argument("--no-npm", action="store_true", help="skip the npm package(s)")
    ap.add_argument("--force", action="store_true", help="replace projects already in DEST")
    args = ap.parse_args(argv)
    try:
        if args.downloads:
            build(args.dest.resolve(), args.downloads.resolve(), npm=not args.no_npm, force=args.force)
        else:
            with tempfile.TemporaryDirectory() as tmp:
                build(args.dest.resolve(), Path(tmp), npm=not args.no_npm, force=args.force)
    except BuildError as exc:
        print(f"build_workspace: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
