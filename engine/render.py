"""Presentation of a response: ``json`` (the full contract), ``markdown`` (people), ``toon`` (agents).

``toon`` is one legend line, then one packed row per item (fields separated by ``|``, newlines
in content escaped as ``\\n``), then one receipt line. Fields are never dropped, only packed.
"""

from __future__ import annotations

import json
import re
from typing import Any

TOON_FIELDS = (
    "rank",
    "tier",
    "project",
    "path",
    "lines",
    "kind",
    "symbol",
    "sources",
    "score",
    "id",
    "flags",
    "nuance",
    "content",
)


def _lines(it: dict[str, Any]) -> str:
    r = it["range"]
    return f"{r['start_line']}-{r['end_line']}"


def _sources(it: dict[str, Any]) -> str:
    return ",".join(f"{s['expert']}#{s['rank']}" for s in it.get("sources", []))


def _esc(value: Any) -> str:
    if isinstance(value, list):
        value = ",".join(map(str, value))
    text = str(value if value is not None else "").replace("\r\n", "\n")
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", "\\n")


def receipt_line(receipt: dict[str, Any]) -> str:
    experts = " ".join(
        f"{n}:{e['status']}({e['latency_ms']:.0f}ms,{e['result_count']})"
        for n, e in receipt.get("per_expert", {}).items()
    )
    c = receipt.get("classifier", {})
    source = f"({receipt['config']['source']})" if "config" in receipt else ""
    return (
        f"receipt {receipt['receipt_id']} status={receipt['status']} class={c.get('class')}"
        f"{'(abstained)' if c.get('abstained') else ''} config={receipt['config_version'][:12]}{source} "
        f"cache={'hit' if receipt.get('cache', {}).get('hit') else 'miss'} "
        f"spent={receipt['budget']['spent']['latency_ms']:.0f}ms experts: {experts or '-'}"
    )


def confidence_text(conf: dict[str, Any]) -> str:
    """``high (0.91)``: the label and the probability that the first item is a right one."""
    return f"{conf.get('label')} ({float(conf.get('score', 0.0)):.2f})"


def to_toon(response: dict[str, Any]) -> str:
    items = response.get("items", [])
    out = [f"#toon items[{len(items)}]{{{','.join(TOON_FIELDS)}}}"]
    if response.get("confidence"):
        out.append(f"#confidence {confidence_text(response['confidence'])}")
    for it in items:
        row = {**it, "lines": _lines(it), "sources": _sources(it)}
        out.append("|".join(_esc(row.get(f)) for f in TOON_FIELDS))
    for name, sep in response.get("separate", {}).items():
        out.append(f"#separate {name} status={sep['status']} items[{len(sep['items'])}]")
        for it in sep["items"]:
            row = {"tier": "", "nuance": "", **it, "lines": _lines(it), "sources": name}
            out.append("|".join(_esc(row.get(f)) for f in TOON_FIELDS))
    if "error" in response:
        out.append(f"#error {response['error']['error']}: {_esc(response['error']['message'])}")
    out.append("#" + receipt_line(response["receipt"]))
    return "\n".join(out)


def to_markdown(response: dict[str, Any]) -> str:
    out: list[str] = []
    if "error" in response:
        out.append(f"**Error `{response['error']['error']}`**: {response['error']['message']}\n")
    items = response.get("items", [])
    if not items and "separate" not in response and "error" not in response:
        out.append("_No evidence found._\n")
    if items and response.get("confidence"):
        out.append(f"**Confidence: {confidence_text(response['confidence'])}** — how likely the first item answers.\n")
    for it in items:
        sym = f" `{it['symbol']}`" if it.get("symbol") else ""
        out.append(f"### {it['rank']}. {it['project']}/{it['path']}:{_lines(it)}{sym}")
        out.append(f"*{it['tier']}* — {it['nuance']} (score {it['score']}, sources: {_sources(it)})\n")
        out.append("```\n" + it.get("content", "").replace("```", "``\u200b`") + "\n```\n")
    for name, sep in response.get("separate", {}).items():
        out.append(f"## {name} ({sep['status']}, {len(sep['items'])} items)")
        for it in sep["items"]:
            out.append(f"- {it['rank']}. {it['project']}/{it['path']}:{_lines(it)} (score {it['score']})")
        out.append("")
    r = response["receipt"]
    out.append("---\n" + receipt_line(r))
    return "\n".join(out)


#: control characters a terminal acts on (ESC sequences can clear the screen, retitle the window
#: or write the clipboard): a file's content is shown, never obeyed. Newline and tab stay.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def terminal_safe(text: str) -> str:
    """``text`` with CRLF line ends as LF and every other control character as a visible ``\\xNN``."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text.replace("\r\n", "\n"))


def render(response: dict[str, Any], fmt: str) -> str:
    """The response as JSON (escaped by JSON itself), markdown or toon (:func:`terminal_safe`)."""
    if fmt == "markdown":
        return terminal_safe(to_markdown(response))
    if fmt == "toon":
        return terminal_safe(to_toon(response))
    return json.dumps(response, ensure_ascii=False, indent=2)


# ---------------------------------------------------------------------------------------------
# records (every verb that prints a list: index, receipts list, store stats, doctor, tune)

TABLE_FORMATS = ("text", "json", "markdown", "toon")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list | tuple):
        return ",".join(map(str, value))
    return str(value)


def render_table(rows: list[dict[str, Any]], columns: tuple[str, ...], fmt: str, data: Any = None) -> str:
    """Records in one of :data:`TABLE_FORMATS`, the same contract for every verb.

    ``text``: aligned columns under a header (people at a terminal); ``json``: ``data`` (default:
    the rows) in full, indented; ``markdown``: a table; ``toon``: one legend line then one packed
    row per record, like an answer's toon. Rows keep every column, whatever the format.
    """
    if fmt == "json":
        return json.dumps(rows if data is None else data, indent=2, ensure_ascii=False, default=str)
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    if fmt == "toon":
        return "\n".join([f"#toon rows[{len(rows)}]{{{','.join(columns)}}}", *("|".join(map(_esc, c)) for c in cells)])
    if fmt == "markdown":
        md = [f"| {' | '.join(columns)} |", "|" + "---|" * len(columns)]
        md += ["| " + " | ".join(v.replace("|", "\\|").replace("\n", " ") for v in c) + " |" for c in cells]
        return "\n".join(md)
    if fmt != "text":
        raise ValueError(f"unknown table format {fmt!r}")
    widths = [max([len(h), *(len(c[i]) for c in cells)]) for i, h in enumerate(columns)]
    lines = [[h.upper() for h in columns], *cells]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip() for line in lines)
