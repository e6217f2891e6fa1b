"""The one secrets policy: what no expert may index or return (DESIGN §8), and why.

A file is **withheld whole** from every expert — indexers, ripgrep, git, external adapters —
when its *name* says it holds key material (``.env*``, ``*.pem``, ``id_rsa``, ``deploy_key``,
credentials files…, plus the workspace's own ``secrets.paths`` globs) or when its *content* holds
a secret. Content is judged by `detect-secrets <https://github.com/Yelp/detect-secrets>`_ (its
vendor-token plugins, private keys, basic-auth URLs and secret-sounding assignments, with its
false-positive filters and ``# pragma: allowlist secret``), plus the workspace's own
``secrets.patterns`` regexes. Text that is not a file (a commit subject, body or diff hunk, an
external tool's snippet) is *redacted* instead.

Content scanning is :class:`engine.secret_scan.Detector`: detect-secrets behind a prefilter made
of its own regexes — the same verdicts, 30–40x faster than its ``scan_file``
(docs/adr/0008-secrets-detector.md).

Verdicts are cached per file by (real path, size, mtime) in memory and in
``<data dir>/secrets/verdicts-<policy>.json``, which ``engine index`` fills for the whole
workspace, so a live expert pays for a file once. A verdict is ``None`` (served) or a *rule*
(``name:*.pem``, ``content:AWS Access Key (line 3)``, ``pattern:ACME-…``) — never the secret.

Use :func:`policy_for` to get the policy of a workspace + config; everything else is methods.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from .datadir import ensure_data_dir, private_dir
from .errors import SpecError
from .frames import encode_frame, read_frame
from .secret_scan import (
    ENGINE_RULES,
    HEURISTIC_RULES,
    MIN_GENERATED_CHARS,
    MIN_URL_PASSWORD_CHARS,
    NOISY_PLUGINS,
    Detector,
    Finding,
    engine_findings,
    line_numbers,
)

#: file names that hold key material or credentials (matched case-insensitively against the file
#: name, or against the project-relative path when the glob has a ``/``). ``id_*`` is limited to
#: ssh key names so ``id_utils.py`` stays searchable; any other key file is caught by content.
NAME_GLOBS = (
    ".env",
    ".env.*",
    "*.env",
    ".envrc",
    "*.pem",
    "*.key",
    "*.pfx",
    "*.p12",
    "*.jks",
    "*.keystore",
    "*.kdbx",
    "*.gpg",
    "*.ppk",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    "*_rsa",
    "*_dsa",
    "*_ecdsa",
    "*_ed25519",
    "*_key",
    "*-key",
    "*deploy_key*",
    "*deploy-key*",
    "*private_key*",
    "signing_key*",
    "credentials",
    "credentials.json",
    "*.credentials",
    ".git-credentials",
    ".netrc",
    "_netrc",
    ".pgpass",
    ".pypirc",
    ".htpasswd",
    "*.tfstate",
    "*.tfstate.*",
    "service-account*.json",
)
_PRIVATE_KEY_BLOCK = re.compile(
    r"-----BEGIN[A-Z ]*PRIVATE KEY[A-Z ]*-----.*?(?:-----END[A-Z ]*PRIVATE KEY[A-Z ]*-----|\Z)", re.DOTALL
)
REDACTED = "[REDACTED]"
FREE_TEXT_AS = ("text.py", "text.yaml")
MAX_SCAN_BYTES = 2_000_000  # larger files are never indexed or returned (workspace.MAX_FILE_BYTES)
#: below this much text to judge, a second process costs more (~0.4 s to start) than it saves
PARALLEL_SCAN_CHARS = 8_000_000
WORKER_START_CHARS = 4_000_000  # what a scan worker's start costs, in characters scanned meanwhile
WORKER_TIMEOUT_S = 600.0
_CACHE_VERSION = 1
_NAMES_MEMO = 100_000


def _globs_regex(globs: Mapping[str, str]) -> re.Pattern[str] | None:
    if not globs:
        return None
    return re.compile("|".join(f"(?P<{k}>{fnmatch.translate(g.lower())})" for k, g in globs.items()))


def _compile_patterns(patterns: Sequence[str]) -> tuple[re.Pattern[str], ...]:
    out = []
    for i, p in enumerate(patterns):
        try:
            out.append(re.compile(p))
        except re.error as exc:
            raise SpecError(f"experts.yaml secrets.patterns[{i}] {p!r} is not a valid regex: {exc}") from None
    return tuple(out)


class NotJudged(Exception):
    """A file has no cached verdict (asked with ``cached_only``): judging it means a content scan."""


class SecretsPolicy:
    """Name rules, content detection, verdict cache and redaction for one workspace + config."""

    def __init__(
        self, *, extra_globs: Sequence[str] = (), extra_patterns: Sequence[str] = (), cache_dir: Path | None = None
    ) -> None:
        self.globs = tuple(NAME_GLOBS) + tuple(extra_globs)
        self.patterns = _compile_patterns(extra_patterns)
        self._extra = (tuple(extra_globs), tuple(extra_patterns))  # what a scan worker rebuilds it from
        # globs → one alternation per kind (file name / project-relative path), a named group each
        self._glob_of = {f"g{i}": g for i, g in enumerate(self.globs)}
        self._name_rx = _globs_regex({k: g for k, g in self._glob_of.items() if "/" not in g})
        self._path_rx = _globs_regex({k: g for k, g in self._glob_of.items() if "/" in g})
        # one file per policy: two configs sharing a data dir never overwrite each other's verdicts
        digest = hashlib.sha256(self.fingerprint.encode()).hexdigest()[:12]
        self.cache_file = cache_dir / f"verdicts-{digest}.json" if cache_dir is not None else None
        self._verdicts: dict[str, tuple[int, int, str | None]] = {}
        self._names: dict[str, str | None] = {}
        self._loaded = False
        self._dirty = False
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ names
    def name_rule(self, rel: str) -> str | None:
        """The name rule withholding project-relative ``rel``, or None (one compiled regex per kind).
        Answers are remembered: a name's verdict never changes, and every served item asks."""
        if rel in self._names:
            return self._names[rel]
        path = PurePosixPath(rel.replace("\\", "/"))
        rule = None
        for rx, target in ((self._name_rx, path.name), (self._path_rx, path.as_posix())):
            m = rx.match(target.lower()) if rx is not None else None
            if m is not None and m.lastgroup is not None:
                rule = f"name:{self._glob_of[m.lastgroup]}"
                break
        if len(self._names) < _NAMES_MEMO:
            self._names[rel] = rule
        return rule

    # ------------------------------------------------------------------ content
    def findings(self, text: str, filename: str = "") -> list[Finding]:
        """Secrets in ``text``. Free text (no file name) is read with both the code rules
        (``key = "value"``) and the config rules (``key: value``) of the keyword plugin."""
        detector = Detector.get()
        found = [f for name in ([filename] if filename else FREE_TEXT_AS) for f in detector.findings(text, name)]
        found += engine_findings(text, free_text=not filename)
        if self.patterns:
            matches = [(m.start(), rx.pattern, m.group(0)) for rx in self.patterns for m in rx.finditer(text)]
            offsets = sorted({at for at, _, _ in matches})
            line_of = dict(zip(offsets, line_numbers(text, offsets), strict=True))
            found += [Finding(line_of[at], f"pattern:{p}", v) for at, p, v in matches]
        return sorted(found, key=lambda f: f.line)

    def content_rule(self, text: str, filename: str = "") -> str | None:
        """The first secret's rule in ``text`` (``content:<type> (line N)``), or None."""
        found = self.findings(text, filename)
        return found[0].describe() if found else None

    def redact(self, text: str, filename: str = "") -> tuple[str, int]:
        """``text`` with every secret value (whole private-key blocks) replaced by ``[REDACTED]``."""
        count = 0

        def block(_m: re.Match[str]) -> str:
            nonlocal count
            count += 1
            return REDACTED

        text = _PRIVATE_KEY_BLOCK.sub(block, text)
        lines = text.split("\n")
        prefilters = Detector.get().prefilters
        for f in self.findings(text, filename):
            line = lines[f.line - 1]
            # the whole token a plugin matched (its reported value may be only a prefix group)
            spans = [m.group(0) for rx, _ in prefilters for m in rx.finditer(line) if f.value and f.value in m.group(0)]
            for value in sorted({f.value, *spans} - {""}, key=len, reverse=True):
                # widen to the whole token, so a plugin that matches a fixed-length prefix leaves no tail
                line = re.sub(rf"[\w+/-]*{re.escape(value)}[\w+/=-]*", REDACTED, line)
            if line != lines[f.line - 1]:
                count += 1
                lines[f.line - 1] = line
        return "\n".join(lines), count

    # ------------------------------------------------------------------ files
    @property
    def fingerprint(self) -> str:
        """What a cached verdict depends on (cheap: loading detect-secrets costs ~0.2 s)."""
        from detect_secrets.__version__ import VERSION

        patterns = [p.pattern for p in self.patterns]
        return json.dumps(
            [
                _CACHE_VERSION,
                VERSION,
                sorted(NOISY_PLUGINS),
                sorted(HEURISTIC_RULES),
                MIN_GENERATED_CHARS,
                MIN_URL_PASSWORD_CHARS,
                [rx.pattern for _, rx, _ in ENGINE_RULES],
                self.globs,
                patterns,
            ]
        )

    def file_rule(self, full: Path, rel: str, data: bytes | None = None, *, cached_only: bool = False) -> str | None:
        """Why the file at ``full`` (shown as ``rel``) is withheld, or None. Cached by (path, size, mtime).

        Raises:
            NotJudged: with ``cached_only``, when the verdict would need a content scan (the caller
                then scans off the event loop).
        """
        rule = self.name_rule(rel) or self.name_rule(full.name)
        if rule:
            return rule
        try:
            st = full.stat()
        except OSError:
            return None  # gone: nothing to serve either
        key = str(full)
        with self._lock:
            self._load()
            hit = self._verdicts.get(key)
        if hit is not None and hit[0] == st.st_size and hit[1] == st.st_mtime_ns:
            return hit[2]
        if cached_only:
            raise NotJudged(key)
        if data is None:
            try:
                with open(full, "rb") as fh:
                    data = fh.read(MAX_SCAN_BYTES + 1)
            except OSError:
                return None
        verdict = None if len(data) > MAX_SCAN_BYTES else self.content_rule(data.decode("utf-8", "replace"), rel)
        with self._lock:
            self._verdicts[key] = (st.st_size, st.st_mtime_ns, verdict)
            self._dirty = True
        return verdict

    def prejudge(self, files: Sequence[tuple[Path, str, bytes]]) -> int:
        """Judge, ahead of :meth:`file_rule`, the ``(real path, rel, data)`` files it would scan,
        a share of them in a second process while this one scans the rest: the content scan of a
        fresh repository was a third of ``engine index`` on one core of two. Verdicts go into the
        cache exactly as :meth:`file_rule` makes them (the worker runs the same policy); a worker
        that fails leaves its files to :meth:`file_rule`. Returns how many the worker judged."""
        todo: list[tuple[str, int, int, str, str]] = []  # (cache key, size, mtime, rel, text)
        for full, rel, data in files:
            if len(data) > MAX_SCAN_BYTES:  # never scanned (file_rule: served as too big to hold one)
                continue
            try:
                self.file_rule(full, rel, cached_only=True)  # a name rule, a cached verdict, a gone file
                continue
            except NotJudged:
                pass
            try:
                st = full.stat()
            except OSError:
                continue
            todo.append((str(full), st.st_size, st.st_mtime_ns, rel, data.decode("utf-8", "replace")))
        if len(todo) < 2 or sum(len(t[4]) for t in todo) < PARALLEL_SCAN_CHARS:
            return 0
        # the larger files first, each to the side with less to do; the worker starts behind by
        # what its start-up costs (a Python start, detect-secrets' plugins: ~0.4 s of scanning)
        theirs: list[tuple[str, int, int, str, str]] = []
        mine: list[tuple[str, int, int, str, str]] = []
        theirs_chars, mine_chars = WORKER_START_CHARS, 0
        for t in sorted(todo, key=lambda t: -len(t[4])):
            if theirs_chars < mine_chars:
                theirs.append(t)
                theirs_chars += len(t[4])
            else:
                mine.append(t)
                mine_chars += len(t[4])
        if not theirs:
            return 0
        reply: list[list[str | None] | None] = []
        worker = threading.Thread(
            target=lambda: reply.append(_judge_elsewhere(self._extra, [(t[3], t[4]) for t in theirs])),
            name="secrets-scan-worker",
            daemon=True,
        )
        worker.start()
        judged = [(t, self.content_rule(t[4], t[3])) for t in mine]
        worker.join()
        elsewhere = reply[0] if reply else None
        if elsewhere is not None and len(elsewhere) == len(theirs):
            judged += list(zip(theirs, elsewhere, strict=True))
        with self._lock:
            for (key, size, mtime, _, _), verdict in judged:
                self._verdicts[key] = (size, mtime, verdict)
            self._dirty = True
        return len(theirs) if elsewhere is not None else 0

    def withheld(self) -> dict[str, str]:
        """Every cached withheld file (real path → rule)."""
        with self._lock:
            self._load()
            return {k: v[2] for k, v in self._verdicts.items() if v[2]}

    def _load(self) -> None:
        if self._loaded or self.cache_file is None:
            self._loaded = True
            return
        self._loaded = True
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
            raw = json.loads(self.cache_file.read_text("utf-8"))
            if raw.get("fingerprint") == self.fingerprint:
                for k, v in raw["files"].items():
                    self._verdicts.setdefault(k, (int(v[0]), int(v[1]), v[2]))

    def save(self) -> None:
        """Write the verdict cache (atomic; a concurrent writer's entries may be lost, never corrupted)."""
        if self.cache_file is None:
            return
        with self._lock:
            if not self._dirty:
                return
            payload = {"fingerprint": self.fingerprint, "files": {k: list(v) for k, v in self._verdicts.items()}}
            self._dirty = False
        ensure_data_dir(self.cache_file.parent.parent)  # 0700 + .gitignore when this is the first write
        private_dir(self.cache_file.parent)
        tmp = self.cache_file.with_name(f".{self.cache_file.name}.{os.getpid()}.{threading.get_ident()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(payload, fh, separators=(",", ":"))
        os.replace(tmp, self.cache_file)

    def save_soon(self) -> None:
        """Save from a non-daemon thread: off the answer's path, yet finished before the process exits."""
        if self._dirty and self.cache_file is not None:
            threading.Thread(target=self.save, name="secrets-verdicts").start()


def config_of(raw_experts: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(extra globs, extra patterns) from experts.yaml's optional ``secrets:`` block."""
    block = raw_experts.get("secrets") or {}
    return tuple(block.get("paths", ())), tuple(block.get("patterns", ()))


_POLICIES: dict[tuple[str, tuple[str, ...], tuple[str, ...]], SecretsPolicy] = {}
_POLICIES_LOCK = threading.Lock()


def _judge_elsewhere(
    extra: tuple[tuple[str, ...], tuple[str, ...]], items: list[tuple[str, str]]
) -> list[str | None] | None:
    """Each ``(rel, text)``'s content rule from a scan worker (:mod:`engine.secret_worker`), or None
    when the worker failed (its files are then judged here, by the caller)."""
    # through files, not pipes: feeding a pipe from this thread takes the GIL for every 64 KB, and
    # the caller holds it scanning its own half (31 MB took 4.5 s to hand over that way)
    try:
        with tempfile.TemporaryFile() as request, tempfile.TemporaryFile() as reply:
            request.write(encode_frame((extra, items)))
            request.seek(0)
            done = subprocess.run(
                [sys.executable, "-m", "engine.secret_worker"],
                stdin=request,
                stdout=reply,
                stderr=subprocess.DEVNULL,
                timeout=WORKER_TIMEOUT_S,
                check=False,
            )
            if done.returncode != 0:
                return None
            reply.seek(0)
            out = read_frame(reply)
    except Exception:  # noqa: BLE001 - no worker, a timeout, an unreadable reply: judged here instead
        return None
    return out if isinstance(out, list) else None


def policy_for(data_dir: Path, raw_experts: Mapping[str, Any] | None = None) -> SecretsPolicy:
    """The process-wide policy for a data dir and config (one verdict cache per data dir and config)."""
    globs, patterns = config_of(raw_experts or {})
    key = (str(data_dir), globs, patterns)
    with _POLICIES_LOCK:
        if key not in _POLICIES:
            _POLICIES[key] = SecretsPolicy(extra_globs=globs, extra_patterns=patterns, cache_dir=data_dir / "secrets")
        return _POLICIES[key]
