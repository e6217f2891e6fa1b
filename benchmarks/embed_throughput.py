#!/usr/bin/env python
"""Semantic indexing throughput against a bare onnxruntime loop: same chunks, model, CPU, one run.

    python benchmarks/embed_throughput.py REPO                    # max_len 128, 3 repetitions
    python benchmarks/embed_throughput.py REPO --max-len 128 192 256 --quality
    python benchmarks/embed_throughput.py REPO --chunks 600 --reps 5 --json out.json

Chunks: the files of REPO (``git ls-files``, shuffled with a fixed seed) are taken until they
hold ``--chunks`` syntax chunks (engine.index.chunking, what the semantic index embeds). Arms,
run in rotating order in every repetition so each sees the same machine load:

* **bare** — what the model can do: ``onnxruntime.InferenceSession`` with default options (intra-op
  threads = cores, spinning on), the same tokenizer with truncation at max_len, texts
  length-sorted, batches of 32 padded to their longest, ``session.run``; nothing else.
* **embed** — ``engine.embedding.Embedder.embed`` (token-budgeted batches, concurrent runs, pooling).
* **index** — ``SemanticIndexer.add`` + ``commit`` over the same files into a temp dir: chunking,
  embedding, the vector store and its checkpoint, i.e. what ``engine index`` spends per chunk.

Prints per-repetition chunks/s and the ratios to bare (the machine is shared: compare ratios,
not absolute numbers), then a Markdown table. ``--quality`` adds CoSQA dev nDCG@10 / Acc@5 per
max_len (benchmarks/embed_cosqa.py; data in ../shared/eval/cosqa).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from engine.embedding import MODELS, Embedder, _distribution_file, packaged_tokenizer  # noqa: E402
from engine.experts.semantic import SemanticIndexer  # noqa: E402
from engine.index.chunking import chunk_file  # noqa: E402
from engine.index.files import SourceFile  # noqa: E402

BARE_BATCH = 32


def pick_files(repo: Path, want_chunks: int) -> tuple[list[tuple[SourceFile, bytes]], list[str]]:
    paths = subprocess.run(["git", "ls-files"], cwd=repo, capture_output=True, text=True, check=True).stdout.split()
    random.Random(0).shuffle(paths)
    files: list[tuple[SourceFile, bytes]] = []
    texts: list[str] = []
    for p in paths:
        try:
            data = (repo / p).read_bytes()
        except OSError:
            continue
        if b"\0" in data[:4096] or len(data) > 1_000_000:
            continue
        chunks = chunk_file(p, data)
        if not chunks:
            continue
        files.append((SourceFile("bench", p, len(data), 0, str(len(files))), data))
        texts += [c.text for c in chunks]
        if len(texts) >= want_chunks:
            break
    return files, texts


class Bare:
    """The bare loop: default onnxruntime session, sorted batches of 32, session.run.

    ``intra_op``/``spinning`` set, it is the engine's previous design instead (one session, an
    intra-op pool of 2, spinning off, sequential batches of 32) — the ``--variants`` arm ``pool2``.
    """

    def __init__(self, max_len: int, intra_op: int | None = None, spinning: bool | None = None) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        spec = MODELS["minilm-l6-int8"]
        onnx = _distribution_file(spec.distribution, spec.onnx_file, spec.pip)
        opts = ort.SessionOptions()
        if intra_op is not None:
            opts.intra_op_num_threads = intra_op
        if spinning is not None:
            opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
        self.session = ort.InferenceSession(str(onnx), sess_options=opts, providers=["CPUExecutionProvider"])
        self.tok = Tokenizer.from_file(str(packaged_tokenizer()))
        self.tok.no_padding()
        self.tok.enable_truncation(max_length=max_len)
        self.cap = max_len * 32  # same pre-cut of very long texts as the engine: tokenizing them is waste

    def run(self, texts: list[str]) -> None:
        ids = [e.ids for e in self.tok.encode_batch([t[: self.cap] for t in texts])]
        order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
        for start in range(0, len(order), BARE_BATCH):
            idx = order[start : start + BARE_BATCH]
            width = len(ids[idx[0]])
            arr = np.zeros((len(idx), width), dtype=np.int64)
            mask = np.zeros_like(arr)
            for r, i in enumerate(idx):
                arr[r, : len(ids[i])] = ids[i]
                mask[r, : len(ids[i])] = 1
            self.session.run(None, {"input_ids": arr, "attention_mask": mask, "token_type_ids": np.zeros_like(arr)})


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def index_once(emb: Embedder, files: list[tuple[SourceFile, bytes]]) -> int:
    with tempfile.TemporaryDirectory() as d:
        idx = SemanticIndexer(Path(d), emb, 1200, 256)
        idx.open()
        n = idx.add(files)
        idx.commit()
        idx.close()
    return n


def quality(max_len: int, data: Path) -> dict[str, float]:
    sys.path.insert(0, str(REPO / "benchmarks"))
    import embed_cosqa

    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        embed_cosqa.main([str(data), "--split", "dev", "--max-len", str(max_len), "--json", out.name])
        result: dict[str, float] = json.loads(Path(out.name).read_text())
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("repo", type=Path, help="a git repository to take chunks from")
    ap.add_argument("--chunks", type=int, default=1200)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--max-len", type=int, nargs="+", default=[128])
    ap.add_argument("--quality", action="store_true", help="also CoSQA dev nDCG@10 per max_len")
    ap.add_argument(
        "--variants",
        type=int,
        nargs="*",
        metavar="BUDGET",
        help="also Embedder.embed at these token budgets, and the previous design (pool2: one run at a "
        "time, 2 intra-op threads, no spinning, batches of 32)",
    )
    ap.add_argument(
        "--cosqa",
        type=Path,
        default=next(
            (p for p in (r / "shared" / "eval" / "cosqa" for r in REPO.parents) if p.is_dir()),
            REPO.parent / "shared" / "eval" / "cosqa",
        ),
        help="CoSQA in BEIR layout (default: shared/eval/cosqa in a parent folder)",
    )
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    files, texts = pick_files(args.repo, args.chunks)
    print(f"{len(texts)} chunks from {len(files)} files of {args.repo}", flush=True)
    rows = []
    for max_len in args.max_len:
        bare, emb = Bare(max_len), Embedder(max_len=max_len, threads=2)
        emb.load()
        bare.run(texts[:64])  # warm both: first runs pay allocations
        emb.embed(texts[:64])
        arms: dict[str, Callable[[], object]] = {
            "bare": lambda b=bare: b.run(texts),
            "embed": lambda e=emb: e.embed(texts),
            "index": lambda e=emb: index_once(e, files),
        }
        if args.variants is not None:
            pool2 = Bare(max_len, intra_op=2, spinning=False)
            pool2.run(texts[:64])
            arms["pool2"] = lambda b=pool2: b.run(texts)
            for budget in args.variants:
                arms[f"embed@{budget}"] = lambda e=emb, b=budget: e.embed(texts, token_budget=b)
        rates: dict[str, list[float]] = {k: [] for k in arms}
        names = list(arms)
        for rep in range(args.reps):
            shift = rep % len(names)
            for name in names[shift:] + names[:shift]:
                rates[name].append(len(texts) / timed(arms[name]))
            r = {k: v[-1] for k, v in rates.items()}
            print(
                f"max_len {max_len} rep {rep + 1}: bare {r['bare']:.1f}/s  "
                + "  ".join(f"{k} {v:.1f}/s ({v / r['bare']:.2f}x)" for k, v in r.items() if k != "bare"),
                flush=True,
            )
        row = {
            "max_len": max_len,
            "chunks": len(texts),
            **{f"{k}_per_s": round(statistics.median(v), 1) for k, v in rates.items()},
            **{
                f"{k}_ratio": round(statistics.median([a / b for a, b in zip(v, rates["bare"], strict=True)]), 2)
                for k, v in rates.items()
                if k != "bare"
            },
            "reps": args.reps,
        }
        if args.quality:
            q = quality(max_len, args.cosqa)
            row |= {"cosqa_dev_ndcg10": q["nDCG@10"], "cosqa_dev_acc5": q["Acc@5"]}
        rows.append(row)
    print(
        "\n| max_len | bare ORT loop | Embedder.embed | ratio | index path | ratio |"
        + (" CoSQA dev nDCG@10 | Acc@5 |" if args.quality else "")
    )
    print("|---|---|---|---|---|---|" + ("---|---|" if args.quality else ""))
    for r in rows:
        line = (
            f"| {r['max_len']} | {r['bare_per_s']} chunks/s | {r['embed_per_s']} | **{r['embed_ratio']}x** "
            f"| {r['index_per_s']} | {r['index_ratio']}x |"
        )
        if args.quality:
            line += f" {r['cosqa_dev_ndcg10']:.3f} | {r['cosqa_dev_acc5']:.3f} |"
        print(line)
    print(f"\n(median of {args.reps} repetitions, {rows[0]['chunks']} chunks; ratios per repetition, then median)")
    if args.variants is not None:
        print("\n| max_len | variant | chunks/s | ratio to bare |\n|---|---|---|---|")
        for r in rows:
            for k in [k[: -len("_per_s")] for k in r if k.endswith("_per_s")]:
                print(f"| {r['max_len']} | {k} | {r[k + '_per_s']} | {r.get(k + '_ratio', 1.0)}x |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
