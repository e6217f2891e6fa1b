"""The last gate every expert's items pass, whatever the expert: containment and the secrets policy.

Fan-out calls :func:`screen` on each expert's list before anything else sees it, so one rule
holds for built-in and external experts alike (DESIGN §7, §8):

* an item whose path resolves (symlinks included) outside its project, into ``.git`` or the data
  dir, or that names a project the request does not cover, is **dropped** (``outside-project``);
* an item from a file the secrets policy withholds (by name or content) is **dropped** (``secret``);
* an external expert's item must name a file its project has (else ``outside-project``), outside
  the folders no index holds (``node_modules``, build output …: ``excluded``); its snippet *and*
  symbol are scanned; a URL's ``user:password@`` is redacted;
* commit text (subject, body, diff hunks — ``content`` and every string in ``meta``), external
  documentation and the snippets of external experts are scanned; commit and documentation text is
  **redacted** in place (flag ``redacted``), an external file snippet holding a secret is dropped;
* a commit's file list loses the withheld files; a commit item about a withheld file (its
  ``meta.diff_of``) loses that file's diff hunk and points at another file.

The counts go to the receipt (``per_expert.<e>.withheld``); the dropped items never leave.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .secrets import NotJudged, SecretsPolicy
from .types import Evidence, Project
from .workspace import PRIVATE_DIRS, contained, in_excluded_dir, is_excluded

#: adapters whose snippets are read from files the policy has already judged (live, or when the
#: index was built); anything else (mcp, http, command, fake) has its text scanned too
TRUSTED_CONTENT = frozenset({"ripgrep", "bm25", "semantic", "symbols", "typed", "docs"})
#: the adapters whose items come from a program or server the config names: their paths are only
#: names (a file of that project must exist, outside the excluded folders)
EXTERNAL_ADAPTERS = frozenset({"command", "mcp", "http"})
_URL = re.compile(r"^https?://")
_URL_CREDENTIALS = re.compile(r"^(https?://)[^/@\s]*@")


@dataclass
class Screened:
    items: list[Evidence] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)


def screen(
    items: Sequence[Evidence],
    projects: Sequence[Project],
    policy: SecretsPolicy,
    *,
    adapter: str = "",
    data_dir: Path | None = None,
    cached_only: bool = False,
    memo: dict[tuple[str, str], str | None] | None = None,
) -> Screened:
    """Drop, redact and count; see the module docstring. Pure apart from reading the files judged.

    ``memo`` keeps each file's verdict for the rest of a request (its experts return the same
    files): pass one dict per request. ``cached_only`` is for the event loop: it screens a
    :data:`TRUSTED_CONTENT` adapter's file items whose verdicts are cached (the usual case, ~10 µs
    a file) and raises at the first item that would need a content scan, which the caller then
    runs in a worker thread (a thread hop costs milliseconds on a busy machine, more than this).

    Raises:
        NotJudged: with ``cached_only``, at the first item that needs a content scan.
    """
    by_name = {p.name: p for p in projects}
    out = Screened()
    scan_text = adapter not in TRUSTED_CONTENT
    external = adapter in EXTERNAL_ADAPTERS
    # an expert returns many regions of one file, and a request's experts the same files
    reasons: dict[tuple[str, str], str | None] = {} if memo is None else memo
    dirs: dict[str, str | None] = {}  # folders' real paths, for this batch
    for e in items:
        if cached_only and (e.kind == "commit" or scan_text):
            raise NotJudged(e.path)
        if e.kind == "commit":
            out.items.append(_commit(e, by_name, policy, data_dir, out.counts))
            continue
        project = by_name.get(e.project)
        if project is None and _URL.match(e.path):  # external documentation named by URL
            if cached_only:
                raise NotJudged(e.path)
            if _URL_CREDENTIALS.match(e.path):  # `https://user:password@host/…`: the credentials go
                e = dataclasses.replace(e, path=_URL_CREDENTIALS.sub(r"\1[REDACTED]@", e.path))
                out.counts["redacted"] += 1
            out.items.append(_redacted(e, policy, out.counts))
            continue
        key = (e.project, e.path)
        if key not in reasons:
            reasons[key] = _file_reason(project, e.path, policy, data_dir, cached_only, dirs, must_exist=external)
        reason = reasons[key]
        if reason is None and external and (is_excluded(e.path) or in_excluded_dir(e.path)):
            reason = "excluded"  # what no index holds and ripgrep never reads (node_modules, build …)
        if reason is None and scan_text and policy.findings(f"{e.content}\n{e.symbol or ''}", e.path):
            reason = "secret"
        if reason:
            out.counts[reason] += 1
            continue
        out.items.append(e)
    return out


def _file_reason(
    project: Project | None,
    rel: str,
    policy: SecretsPolicy,
    data_dir: Path | None,
    cached_only: bool = False,
    dirs: dict[str, str | None] | None = None,
    *,
    must_exist: bool = False,
) -> str | None:
    """Why the file ``rel`` of ``project`` may not be served (``outside-project`` | ``secret``), or None.
    ``must_exist``: an external expert's path must name a file of that project (a path it made up, or
    one of another project re-homed into this one, carries content this project does not hold)."""
    if project is None or not rel:
        return "outside-project"
    if any(part in PRIVATE_DIRS for part in rel.split("/")):  # PurePosixPath(rel).parts, without the cost
        return "outside-project"
    real = contained(project.root, rel, dirs=dirs)
    if real is None or (data_dir is not None and real.is_relative_to(data_dir)):
        return "outside-project"
    if must_exist and not real.exists():
        return "outside-project"
    if policy.name_rule(rel) or policy.file_rule(real, rel, cached_only=cached_only):
        return "secret"
    return None


def _commit(
    e: Evidence, by_name: Mapping[str, Project], policy: SecretsPolicy, data_dir: Path | None, counts: Counter[str]
) -> Evidence:
    project = by_name.get(e.project)
    meta = dict(e.meta)
    files = meta.get("files")
    if isinstance(files, list):
        kept = [f for f in files if isinstance(f, str) and _file_reason(project, f, policy, data_dir) is None]
        if len(kept) < len(files):
            counts["secret"] += len(files) - len(kept)
            meta["files"] = kept
            content = "\n".join(line for line in e.content.split("\n") if line.strip() not in set(files) - set(kept))
            e = dataclasses.replace(e, content=content)
    path = e.path
    if path and _file_reason(project, path, policy, data_dir) is not None:
        if meta.pop("diff_of", None) == path:  # the item's content is that file's diff: only the header stays
            counts["secret"] += 1
            e = dataclasses.replace(e, content=e.content.split("\n", 1)[0], start_line=1, end_line=1)
        path = next(iter(meta.get("files") or []), "")
    return _redacted(dataclasses.replace(e, path=path, meta=meta), policy, counts)


def _redacted(e: Evidence, policy: SecretsPolicy, counts: Counter[str]) -> Evidence:
    """``e`` with every secret in its text (content, string meta values) replaced by ``[REDACTED]``."""
    content, n = policy.redact(e.content)
    meta: dict[str, Any] = {}
    for k, v in e.meta.items():
        if isinstance(v, str):
            v, m = policy.redact(v)
            n += m
        meta[k] = v
    if not n:
        return e
    counts["redacted"] += n
    flags = e.flags if "redacted" in e.flags else (*e.flags, "redacted")
    return dataclasses.replace(e, content=content, meta=meta, flags=flags)
