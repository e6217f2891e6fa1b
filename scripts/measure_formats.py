"""Measure what each answer format costs an agent: characters and tokens of json / toon / markdown.

Usage::

    python scripts/measure_formats.py --workspace DIR [--config-dir .] [--limit 10] [--tokenizer-dir DIR]

Runs a fixed set of questions through the router tool, renders each answer in every format and
prints characters and, when ``--tokenizer-dir`` holds ``npm install js-tiktoken
@anthropic-ai/tokenizer``, tokens (OpenAI o200k and the Claude tokenizer). Results go into
docs/serve.md by hand; this script is how they were measured.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import anyio

from engine.render import render
from engine.runtime import Router
from engine.workspace import Workspace

QUESTIONS = [
    'where is "load_config" defined',
    "how are receipts signed and verified",
    'find "snippet_chars"',
    "who calls expert_errors",
    "when was the store spool added",
    "how does the gate pick experts for a class",
]
FORMATS = ("json", "toon", "markdown")
COUNT_JS = """
const fs = require('fs'); const {countTokens} = require('@anthropic-ai/tokenizer');
const enc = require('js-tiktoken').getEncoding('o200k_base');
const texts = JSON.parse(fs.readFileSync(0, 'utf8'));
console.log(JSON.stringify(texts.map(t => [enc.encode(t).length, countTokens(t)])));
"""


def count_tokens(texts: list[str], tokenizer_dir: Path | None) -> list[tuple[int, int]] | None:
    if tokenizer_dir is None:
        return None
    out = subprocess.run(
        ["node", "-e", COUNT_JS], input=json.dumps(texts), capture_output=True, text=True, cwd=tokenizer_dir, check=True
    )
    return [tuple(x) for x in json.loads(out.stdout)]


async def answers(workspace: Path, config_dir: Path, limit: int) -> list[dict]:
    router = Router(config_dir, Workspace.open([workspace]))
    try:
        return [
            (await router.run("router", {"question": q, "limit": limit, "no_cache": True})).response for q in QUESTIONS
        ]
    finally:
        await router.aclose()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workspace", type=Path, required=True)
    ap.add_argument("--config-dir", type=Path, default=Path(__file__).resolve().parent.parent)
    ap.add_argument("--limit", type=int, default=10)
    ap.add_argument("--tokenizer-dir", type=Path)
    args = ap.parse_args()
    responses = anyio.run(answers, args.workspace, args.config_dir, args.limit)
    texts = {f: [render(r, f) for r in responses] for f in FORMATS}
    totals = {}
    for f in FORMATS:
        tokens = count_tokens(texts[f], args.tokenizer_dir)
        totals[f] = {
            "chars": sum(map(len, texts[f])),
            "o200k": sum(t[0] for t in tokens) if tokens else None,
            "claude": sum(t[1] for t in tokens) if tokens else None,
        }
    items = sum(len(r["items"]) for r in responses)
    print(json.dumps({"questions": len(QUESTIONS), "items": items, "limit": args.limit, "totals": totals}, indent=2))
    base = totals["json"]
    for f in FORMATS:
        rel = {k: f"{v / base[k]:.0%}" for k, v in totals[f].items() if v and base[k]}
        print(f"{f:<9} {totals[f]}  vs json: {rel}")


if __name__ == "__main__":
    main()
