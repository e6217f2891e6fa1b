"""The one secrets policy: what no expert may index or return (DESIGN §8), and why.

A file is **withheld whole** from every expert — indexers, ripgrep, git, external adapters —
when its *name* says it holds key material (``.env*``, ``*.pem``, ``id_rsa``, ``deploy_key``,
credentials files…, plus the workspace's own ``secrets.paths`` globs) or when its *content* holds
a secret. Content is judged by `detect-secrets <https://github.com/Yelp/detect-secrets>`_ (its
vendor-token plugins, private keys, basic-auth URLs and secret-sounding assignments, with its
false-positive filters and ``# pragma: allowlist secret``), plus the workspace's own
``secrets.patterns`` regexes. Text that is not a file (a commit subject, body or diff hunk, an
external tool's snippet) is *redacted* instead.

detect-secrets runs every plugin on every line through a dependency-injection layer: 14 files/s
over the requests sdist. Here each plugin's own regexes (and the keyword plugin's words) first
find the few candidate lines in C, and only those go through detect-secrets' full per-line
analysis with their context — same verdicts, ~200x faster (docs/adr/0005-secrets-detector.md).

Verdicts are cached per file by (real path, size, mtime) in memory and in
``<data dir>/secrets/verdicts-<policy>.json``, which ``engine index`` fills for the whole workspace, so a
live expert pays for a file once. A verdict is ``None`` (served) or a *rule*
(``name:*.pem``, ``content:AWS Access Key (line 3)``, ``pattern:ACME-…``) — never the secret.

Use :func:`policy_for` to get the policy of a workspace + config; everything else is methods.
"""

from __future__ import annotations

import bisect
import contextlib
import fnmatch
import hashlib
import json
import os
import re
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from .errors import SpecError

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
#: detect-secrets plugins left out: on ordinary source they flag hashes, fixtures and example IPs,
#: and a flag withholds a whole file (measured in docs/adr/0005-secrets-detector.md)
NOISY_PLUGINS = frozenset({"Base64HighEntropyString", "HexHighEntropyString", "IPPublicDetector"})
_PRIVATE_KEY_BLOCK = re.compile(
    r"-----BEGIN[A-Z ]*PRIVATE KEY[A-Z ]*-----.*?(?:-----END[A-Z ]*PRIVATE KEY[A-Z ]*-----|\Z)", re.DOTALL
)
REDACTED = "[REDACTED]"
FREE_TEXT_AS = ("text.py", "text.yaml")
MAX_SCAN_BYTES = 2_000_000  # larger files are never indexed or returned (workspace.MAX_FILE_BYTES)
_CACHE_VERSION = 1


@dataclass(frozen=True, slots=True)
class Finding:
    """One secret found in a text: where it is and which rule found it (never its value)."""

    line: int  # 1-based
    rule: str
    value: str  # the matched secret, kept only in memory for redaction; never reported

    def describe(self) -> str:
        return f"{self.rule} (line {self.line})"


_ASCII_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}


def _lower_pattern(pattern: str) -> str:
    """A case-insensitive regex as a lower-case one for ASCII-lowered text (escapes such as ``\\W`` kept)."""
    return re.sub(r"\\.|[A-Z]", lambda m: m.group(0) if m.group(0).startswith("\\") else m.group(0).lower(), pattern)


def _leading_group(pattern: str) -> str | None:
    """The balanced ``(...)`` group ``pattern`` starts with, or None."""
    depth, i = 0, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":  # a character class: parentheses inside are literal
            j = i + 1 + (pattern[i + 1 : i + 2] == "^")
            j += pattern[j : j + 1] == "]"
            while j < len(pattern) and pattern[j] != "]":
                j += 2 if pattern[j] == "\\" else 1
            i = j + 1
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return pattern[: i + 1]
        i += 1
    return None


def _weak_prefix_stripped(pattern: str) -> str:
    """Drop leading groups that are optional, zero-width or single characters (``(?:\\s|=|:|^)``).

    Any match of ``A·B`` contains a match of ``B`` on the same line, so the result is a superset
    prefilter; what it gains is a literal first token, which Python's regex engine scans for fast.
    """
    while pattern.startswith("(?:"):
        group = _leading_group(pattern)
        rest = pattern[len(group) :] if group else ""
        if not group or not rest or rest[0] in "?*+{":
            break
        body = group[3:-1]
        alternatives = body.split("|") if "(" not in body else []
        weak = (
            group.endswith("|)")
            or re.fullmatch(r"\(\?:(?:\(\?<[=!][^()]*\)\|?)+\)", group) is not None
            or (bool(alternatives) and all(len(a) <= 2 for a in alternatives))
        )
        if not weak:
            break
        pattern = rest
    return pattern


class _Detector:
    """detect-secrets, configured once per process, with a regex prefilter per plugin."""

    _lock = threading.Lock()
    _ready: _Detector | None = None

    def __init__(self) -> None:
        from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
        from detect_secrets.plugins.keyword import DENYLIST
        from detect_secrets.settings import get_plugins, get_settings

        classes: list[type] = list(get_mapping_from_secret_type_to_class().values())
        names = sorted(c.__name__ for c in classes)
        get_settings().configure_plugins([{"name": n} for n in names if n not in NOISY_PLUGINS])
        get_plugins.cache_clear()
        self.plugins = list(get_plugins())
        # (pattern, runs on ASCII-lowered text?) — Python's IGNORECASE matching costs ~25x, so a
        # case-insensitive plugin regex is lowered once and run on text lowered once
        prefilters: list[tuple[re.Pattern[str], bool]] = []
        for plugin in self.plugins:
            denylist = getattr(plugin, "denylist", None)
            if denylist is None:  # the keyword plugin: a line must name a secret-sounding word
                prefilters.append((re.compile("|".join(DENYLIST)), True))
                continue
            for rx in denylist:
                source = _weak_prefix_stripped(rx.pattern)
                if rx.flags & re.IGNORECASE:
                    prefilters.append((re.compile(_lower_pattern(source), rx.flags & ~re.IGNORECASE), True))
                else:
                    prefilters.append((re.compile(source, rx.flags), False))
        self.prefilters = prefilters
        from detect_secrets.__version__ import VERSION

        self.fingerprint = f"detect-secrets {VERSION}: " + ",".join(sorted(type(p).__name__ for p in self.plugins))

    @classmethod
    def get(cls) -> _Detector:
        with cls._lock:
            if cls._ready is None:
                cls._ready = cls()
            return cls._ready

    def findings(self, text: str, filename: str) -> Iterator[Finding]:
        """Secrets in ``text``, line by line (``filename`` picks the keyword plugin's file-type rules)."""
        from detect_secrets.core.scan import _is_filtered_out, _scan_line
        from detect_secrets.util.code_snippet import get_code_snippet

        starts = [0, *(m.end() for m in re.finditer("\n", text))]
        lowered = text.translate(_ASCII_LOWER)  # same length: match offsets stay valid
        candidates: set[int] = set()
        for rx, on_lowered in self.prefilters:
            for m in rx.finditer(lowered if on_lowered else text):
                candidates.add(bisect.bisect_right(starts, m.start()))  # 1-based line number
        if not candidates:
            return
        lines = text.split("\n")
        for n in sorted(candidates):
            line = lines[n - 1].rstrip()
            snippet = get_code_snippet(lines=lines, line_number=n)
            if _is_filtered_out(required_filter_parameters=["line"], filename=filename, line=line, context=snippet):
                continue
            for plugin in self.plugins:
                for secret in _scan_line(plugin=plugin, filename=filename, line=line, line_number=n, context=snippet):
                    if not _is_filtered_out(
                        required_filter_parameters=["context"],
                        filename=filename,
                        secret=secret.secret_value,
                        plugin=plugin,
                        line=line,
                        context=snippet,
                    ):
                        yield Finding(n, f"content:{secret.type}", secret.secret_value or "")


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


class SecretsPolicy:
    """Name rules, content detection, verdict cache and redaction for one workspace + config."""

    def __init__(
        self, *, extra_globs: Sequence[str] = (), extra_patterns: Sequence[str] = (), cache_dir: Path | None = None
    ) -> None:
        self.globs = tuple(NAME_GLOBS) + tuple(extra_globs)
        self.patterns = _compile_patterns(extra_patterns)
        # globs → one alternation per kind (file name / project-relative path), a named group each
        self._glob_of = {f"g{i}": g for i, g in enumerate(self.globs)}
        self._name_rx = _globs_regex({k: g for k, g in self._glob_of.items() if "/" not in g})
        self._path_rx = _globs_regex({k: g for k, g in self._glob_of.items() if "/" in g})
        # one file per policy: two configs sharing a data dir never overwrite each other's verdicts
        digest = hashlib.sha256(self.fingerprint.encode()).hexdigest()[:12]
        self.cache_file = cache_dir / f"verdicts-{digest}.json" if cache_dir is not None else None
        self._verdicts: dict[str, tuple[int, int, str | None]] = {}
        self._loaded = False
        self._dirty = False
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ names
    def name_rule(self, rel: str) -> str | None:
        """The name rule withholding project-relative ``rel``, or None (one compiled regex per kind)."""
        path = PurePosixPath(rel.replace("\\", "/"))
        for rx, target in ((self._name_rx, path.name), (self._path_rx, path.as_posix())):
            m = rx.match(target.lower()) if rx is not None else None
            if m is not None and m.lastgroup is not None:
                return f"name:{self._glob_of[m.lastgroup]}"
        return None

    # ------------------------------------------------------------------ content
    def findings(self, text: str, filename: str = "") -> list[Finding]:
        """Secrets in ``text``. Free text (no file name) is read with both the code rules
        (``key = "value"``) and the config rules (``key: value``) of the keyword plugin."""
        detector = _Detector.get()
        found = [f for name in ([filename] if filename else FREE_TEXT_AS) for f in detector.findings(text, name)]
        if self.patterns:
            starts = [0, *(m.end() for m in re.finditer("\n", text))]
            for rx in self.patterns:
                for m in rx.finditer(text):
                    found.append(Finding(bisect.bisect_right(starts, m.start()), f"pattern:{rx.pattern}", m.group(0)))
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
        prefilters = _Detector.get().prefilters
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
        return json.dumps([_CACHE_VERSION, VERSION, sorted(NOISY_PLUGINS), self.globs, patterns])

    def file_rule(self, full: Path, rel: str, data: bytes | None = None) -> str | None:
        """Why the file at ``full`` (shown as ``rel``) is withheld, or None. Cached by (path, size, mtime)."""
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
        self.cache_file.parent.mkdir(parents=True, exist_ok=True)
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


def policy_for(data_dir: Path, raw_experts: Mapping[str, Any] | None = None) -> SecretsPolicy:
    """The process-wide policy for a data dir and config (one verdict cache per data dir and config)."""
    globs, patterns = config_of(raw_experts or {})
    key = (str(data_dir), globs, patterns)
    with _POLICIES_LOCK:
        if key not in _POLICIES:
            _POLICIES[key] = SecretsPolicy(extra_globs=globs, extra_patterns=patterns, cache_dir=data_dir / "secrets")
        return _POLICIES[key]


def rules_text(rules: Iterable[tuple[str, str]]) -> list[str]:
    """``path: rule`` lines for reports (doctor)."""
    return [f"{path}: {rule}" for path, rule in rules]
