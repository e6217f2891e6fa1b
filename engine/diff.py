"""``engine diff A B``: a semantic comparison of two config sets (folders or git revisions).

Reports per-class prior changes (old → new), experts added / removed / changed (field by
field), gate and fusion lever changes, classifier rules added / removed / changed / moved and
feature regex or limit changes (each side's own classifier.yaml), pipeline nodes and edges added
/ removed / changed, and both sides' ``config_version`` for every pipeline. A side can also be a
config snapshot kept by the store (:func:`materialize_snapshot`): the web UI compares two versions
seen in receipts.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .errors import SpecError
from .spec import CONFIG_FILES, ConfigSet, load_config

#: what a git revision may look like (a name, a hash, HEAD~2, v1.0^, main@{1}): never an option
REVISION = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./~^@{}:+-]{0,199}$")


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, Mapping):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        out.update(_flatten(v, key) if isinstance(v, Mapping) and v else {key: v})
    return out


def _changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[dict[str, Any]]:
    fo, fn = _flatten(old), _flatten(new)
    return [
        {"field": k, "old": fo.get(k), "new": fn.get(k)} for k in sorted(set(fo) | set(fn)) if fo.get(k) != fn.get(k)
    ]


def materialize_revision(repo: Path, rev: str, dest: Path) -> Path:
    """Write the config files of ``rev`` (relative to the repo root) into ``dest``."""
    if not REVISION.match(rev) or ".." in rev.replace("...", ""):
        raise SpecError(f"{rev!r} is not a git revision")

    def git(*args: str) -> str:
        res = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=False)
        if res.returncode != 0:
            raise SpecError(f"cannot read git revision {rev!r} in {repo}: {res.stderr.strip()[-300:]}")
        return res.stdout

    prefix = git("rev-parse", "--show-prefix").strip()
    names = [n for n in git("ls-tree", "-r", "--name-only", rev, "--", ".").splitlines()]
    wanted = [
        n
        for n in names
        if n[len(prefix) :] in CONFIG_FILES or (n[len(prefix) :].startswith("pipelines/") and n.endswith(".yaml"))
    ]
    if not wanted:
        raise SpecError(f"revision {rev!r} has no experts.yaml / priors.yaml / pipelines/ under {repo}")
    for n in wanted:
        target = dest / n[len(prefix) :]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(git("show", f"{rev}:{n}"))
    return dest


def _load(side: str, repo: Path, tmp: Path) -> ConfigSet:
    p = Path(side)
    if p.is_dir():
        return load_config(p)
    dest = materialize_revision(repo, side, tmp / "rev")
    try:
        return load_config(dest)
    except SpecError as exc:  # name the revision's file (`HEAD~1:priors.yaml:20`), not the temp copy
        here = str(dest) + "/"
        file = str(exc.context.get("file") or "").replace(here, f"{side}:")
        raise SpecError(exc.message.replace(here, f"{side}:"), **({"file": file} if file else {})) from None


def materialize_snapshot(content: Mapping[str, Any], dest: Path) -> Path:
    """Write a config snapshot's files (experts.yaml, priors.yaml, classifier.yaml, the pipelines it involves) into
    ``dest``, so it loads as a config folder."""
    import yaml

    try:
        files = {"experts.yaml": content["experts"], "priors.yaml": content["priors"]}
        files.update({f"pipelines/{name}.yaml": raw for name, raw in content["pipelines"].items()})
        classifier = content.get("classifier")
        if isinstance(classifier, Mapping) and "rules" in classifier:
            # snapshots taken before the rules moved to classifier.yaml load with the packaged rules
            files["classifier.yaml"] = classifier
    except (KeyError, AttributeError, TypeError):
        raise SpecError("the config snapshot lacks experts, priors or pipelines") from None
    for rel, data in files.items():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return dest


def _pipelines(a: ConfigSet, b: ConfigSet) -> dict[str, Any]:
    out: dict[str, Any] = {
        "added": sorted(set(b.pipelines) - set(a.pipelines)),
        "removed": sorted(set(a.pipelines) - set(b.pipelines)),
        "changed": {},
    }
    for name in sorted(set(a.pipelines) & set(b.pipelines)):
        pa, pb = a.pipelines[name], b.pipelines[name]
        na = {n.id: {"kind": n.kind, "settings": dict(n.settings)} for n in pa.nodes}
        nb = {n.id: {"kind": n.kind, "settings": dict(n.settings)} for n in pb.nodes}
        ea = {(d, n.id) for n in pa.nodes for d in n.after}
        eb = {(d, n.id) for n in pb.nodes for d in n.after}
        change = {
            "nodes_added": sorted(set(nb) - set(na)),
            "nodes_removed": sorted(set(na) - set(nb)),
            "nodes_changed": {i: _changes(na[i], nb[i]) for i in sorted(set(na) & set(nb)) if na[i] != nb[i]},
            "edges_added": [f"{x} → {y}" for x, y in sorted(eb - ea)],
            "edges_removed": [f"{x} → {y}" for x, y in sorted(ea - eb)],
            "fields": _changes(
                {k: v for k, v in pa.raw.items() if k != "nodes"}, {k: v for k, v in pb.raw.items() if k != "nodes"}
            ),
        }
        if any(change.values()):
            out["changed"][name] = change
    return out


def _classifier(a: ConfigSet, b: ConfigSet) -> dict[str, Any]:
    """Rules by name (added, removed, changed field by field, order), then everything else in the file."""
    ra = {r["name"]: r for r in a.classifier.raw["rules"]}
    rb = {r["name"]: r for r in b.classifier.raw["rules"]}
    common_a = [n for n in ra if n in rb]
    common_b = [n for n in rb if n in ra]
    return {
        "files": {"a": str(a.classifier.file), "b": str(b.classifier.file)},
        "rules_added": [{"position": list(rb).index(n) + 1, **rb[n]} for n in rb if n not in ra],
        "rules_removed": [n for n in ra if n not in rb],
        "rules_changed": {n: _changes(ra[n], rb[n]) for n in common_a if ra[n] != rb[n]},
        "order": {"a": common_a, "b": common_b} if common_a != common_b else None,
        "other": _changes(
            {k: v for k, v in a.classifier.raw.items() if k != "rules"},
            {k: v for k, v in b.classifier.raw.items() if k != "rules"},
        ),
    }


def diff_configs(a: str, b: str, repo: Path = Path(".")) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as ta, tempfile.TemporaryDirectory() as tb:
        return diff_sets(_load(a, repo, Path(ta)), _load(b, repo, Path(tb)), a, b)


def diff_sets(ca: ConfigSet, cb: ConfigSet, a: str, b: str) -> dict[str, Any]:
    """The semantic diff of two loaded config sets, labelled ``a`` and ``b``."""
    classes = sorted(set(ca.raw_priors["classes"]) | set(cb.raw_priors["classes"]))
    priors = {}
    for c in classes:
        wa, wb = ca.raw_priors["classes"].get(c, {}), cb.raw_priors["classes"].get(c, {})
        ch = {e: {"old": wa.get(e), "new": wb.get(e)} for e in sorted(set(wa) | set(wb)) if wa.get(e) != wb.get(e)}
        if ch:
            priors[c] = ch
    other = {k: v for k, v in ca.raw_priors.items() if k != "classes"}
    other_b = {k: v for k, v in cb.raw_priors.items() if k != "classes"}
    ea, eb = ca.raw_experts["experts"], cb.raw_experts["experts"]
    names = sorted(set(ca.pipelines) | set(cb.pipelines))
    return {
        "a": a,
        "b": b,
        "config_version": {
            n: {
                "a": ca.config_version(ca.pipelines[n]) if n in ca.pipelines else None,
                "b": cb.config_version(cb.pipelines[n]) if n in cb.pipelines else None,
            }
            for n in names
        },
        "priors": priors,
        "priors_other": _changes(other, other_b),
        "experts": {
            "added": sorted(set(eb) - set(ea)),
            "removed": sorted(set(ea) - set(eb)),
            "changed": {e: _changes(ea[e], eb[e]) for e in sorted(set(ea) & set(eb)) if ea[e] != eb[e]},
        },
        "classifier": _classifier(ca, cb),
        "pipelines": _pipelines(ca, cb),
    }


def format_diff(d: dict[str, Any]) -> str:
    lines = [f"engine diff {d['a']} → {d['b']}", ""]
    lines.append("config_version:")
    for name, v in d["config_version"].items():
        mark = "=" if v["a"] == v["b"] else "≠"
        lines.append(f"  {name:<20} {str(v['a'])[:12]} {mark} {str(v['b'])[:12]}")
    lines.append("priors:" if d["priors"] or d["priors_other"] else "priors: unchanged")
    for c, ch in d["priors"].items():
        for e, v in ch.items():
            lines.append(f"  {c}.{e}: {v['old']} → {v['new']}")
    for ch in d["priors_other"]:
        lines.append(f"  {ch['field']}: {ch['old']} → {ch['new']}")
    ex = d["experts"]
    lines.append("experts:" if any(ex.values()) else "experts: unchanged")
    lines += [f"  + {e}" for e in ex["added"]] + [f"  - {e}" for e in ex["removed"]]
    for e, chs in ex["changed"].items():
        lines += [f"  ~ {e}.{c['field']}: {c['old']} → {c['new']}" for c in chs]
    cl = d["classifier"]
    changed = cl["rules_added"] or cl["rules_removed"] or cl["rules_changed"] or cl["order"] or cl["other"]
    lines.append("classifier:" if changed else "classifier: unchanged")
    lines += [f"  + rule {r['name']} (#{r['position']}): {_rule_text(r)}" for r in cl["rules_added"]]
    lines += [f"  - rule {n}" for n in cl["rules_removed"]]
    for n, chs in cl["rules_changed"].items():
        lines += [f"  ~ rule {n}.{c['field']}: {c['old']} → {c['new']}" for c in chs]
    if cl["order"]:
        lines.append(f"  ~ rule order: {', '.join(cl['order']['a'])} → {', '.join(cl['order']['b'])}")
    lines += [f"  ~ {c['field']}: {c['old']} → {c['new']}" for c in cl["other"]]
    p = d["pipelines"]
    lines.append("pipelines:" if any(p.values()) else "pipelines: unchanged")
    lines += [f"  + {n}" for n in p["added"]] + [f"  - {n}" for n in p["removed"]]
    for n, ch in p["changed"].items():
        lines.append(f"  ~ {n}")
        lines += [f"      + node {x}" for x in ch["nodes_added"]] + [f"      - node {x}" for x in ch["nodes_removed"]]
        for node, chs in ch["nodes_changed"].items():
            lines += [f"      ~ node {node}.{c['field']}: {c['old']} → {c['new']}" for c in chs]
        lines += [f"      + edge {x}" for x in ch["edges_added"]] + [f"      - edge {x}" for x in ch["edges_removed"]]
        lines += [f"      ~ {c['field']}: {c['old']} → {c['new']}" for c in ch["fields"]]
    return "\n".join(lines)


def _rule_text(rule: dict[str, Any]) -> str:
    conditions = ", ".join(f"{k}={v}" for k, v in rule.items() if k not in ("name", "class", "confidence", "position"))
    return f"class {rule['class']} at {rule['confidence']} when {conditions or 'always'}"
