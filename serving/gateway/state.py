"""What every route shares: the configuration, the Triton client, the keys, the repository's tokenizer and manifest;
and the input and output steps the OpenAI and TEI routes have in common."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from serving.contract.manifest import (
    MANIFEST,
    REPOSITORY_INDEX,
    VerificationError,
    check_inside,
    entry_points,
)
from serving.gateway import errors
from serving.gateway.coalesce import Coalescer
from serving.gateway.config import GatewayConfig
from serving.gateway.metrics import Metrics
from serving.gateway.triton import Embedded, ModelInfo, Triton

log = logging.getLogger(__name__)

MAX_TEXT_BYTES = 64 * 1024  # what the models take per text (README: Errors)
PYTHON_TOKENIZER_JSON = "1/tokenizer/tokenizer.json"  # in the Python tokenizer model's directory (export/pipeline.py)
TASKS = ("embed", "rerank", "classify")  # in the order that picks the primary model


@dataclass
class Gateway:
    cfg: GatewayConfig
    triton: Triton
    keys: dict[str, str] | None = None  # key -> client name; None: no authentication
    # task -> the model its routes call, of the repository's entry points ({}: the text model alone); /health
    # answers 200 when every one of them is ready
    fronted: dict[str, str] = field(default_factory=dict)
    # model -> the tokenizers.Tokenizer it tokenizes with (truncating at its max_seq), of each model the routes call
    tokenizers: dict[str, Any] = field(default_factory=dict)
    manifests: dict[str, dict] = field(default_factory=dict)  # model -> its manifest (source, max_seq, labels, ...)
    metrics: Metrics = field(default_factory=Metrics)
    created: int = field(default_factory=lambda: int(time.time()))
    _warned: bool = False
    _coalescer: Coalescer | None = None

    async def embed(self, texts: list[bytes], truncate: bool) -> Embedded:
        """The texts' embeddings from the text model; concurrent requests may share a call (serving.gateway.coalesce)."""
        if not self.cfg.max_calls:
            return await self.triton.embed(texts, truncate)
        if self._coalescer is None:
            max_batch = (await self.triton.info()).max_batch
            self._coalescer = Coalescer(self.triton.embed, max_batch, self.cfg.max_calls)
        return await self._coalescer.embed(texts, truncate)

    def count_tokens(self, texts: list[str]) -> int:
        """Tokens of ``texts`` by the text model's tokenizer (the one the native model reproduces id for id), for a
        model that answers without TOKENS; 0 without a repository."""
        tokenizer = self.tokenizers.get(self.cfg.model)
        if tokenizer is None:
            return 0
        if not self._warned:
            log.warning("%s answers without TOKENS: usage is counted by the gateway's tokenizer", self.cfg.model)
            self._warned = True
        return sum(len(e.ids) for e in tokenizer.encode_batch(texts))

    @property
    def model_ids(self) -> list[str]:
        """The names ``/v1/embeddings`` takes: the embedder's (none where the repository serves no embedder)."""
        return [model for task, model in self.served if task == "embed"]

    @property
    def served(self) -> list[tuple[str, str]]:
        """(task, model) of every model the routes call, the primary first: the embedder, else the reranker, else
        the classifier (the text model alone when the gateway knows no repository index)."""
        if not self.fronted:
            return [("embed", self.cfg.model)]
        return [(task, self.fronted[task]) for task in TASKS if task in self.fronted]

    @property
    def primary(self) -> str:
        """The model TEI's one-model routes (``/tokenize``, ``/info``'s own fields) describe."""
        return self.served[0][1]

    @property
    def reranker(self) -> str | None:
        """The model the rerank routes call; None where the repository index lists no reranker."""
        if not self.fronted:
            return self.triton.rerank_model
        return self.fronted.get("rerank")


def fronted_models(repository: Path | None, text_model: str, rerank_model: str, classify_model: str) -> dict[str, str]:
    """Task -> the model the gateway's routes of that task call: the repository's entry points (its index), the one
    named as configured where the repository has several of a task; ({}: no repository index to read)."""
    index_path = repository / REPOSITORY_INDEX if repository is not None else None
    if index_path is None or not index_path.is_file():
        return {}
    entries = entry_points(json.loads(index_path.read_text()))
    out = {}
    for task, preferred in (("embed", text_model), ("rerank", rerank_model), ("classify", classify_model)):
        names = sorted(m for m, t in entries.items() if t == task)
        if names:
            out[task] = preferred if preferred in names else names[0]
            if len(names) > 1:
                log.info("the %s routes call %s (the repository's %s models: %s)", task, out[task], task, names)
    return out


def encoder_of(repository: Path, model: str) -> str:
    """The encoder that token ids for the embedder ``model`` go to, as its repository index records it."""
    index = json.loads((repository / REPOSITORY_INDEX).read_text())
    return index["models"][model].get("encoder", "bert")


def load_repository(repository: Path | None, models: list[str]) -> tuple[dict[str, Any], dict[str, dict]]:
    """Each model's tokenizer (the tokenizer.json the native one reproduces, truncating at its max_seq) and
    manifest; ({}, {}) without a repository. A model without a tokenizer is left out of the first (its /tokenize
    answers 503) and said so."""
    if repository is None:
        return {}, {}
    from tokenizers import Tokenizer

    tokenizers, manifests = {}, {}
    for model in models:
        manifest_path = repository / model / MANIFEST
        manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
        manifests[model] = manifest
        try:
            path = tokenizer_file(repository, model, manifest)
        except VerificationError as e:
            log.warning("%s", e)
            path = None
        if path is None or not path.is_file():
            log.warning("%s has no tokenizer for %s: its /tokenize will answer 503", repository, model)
            continue
        tokenizer = Tokenizer.from_file(str(path))
        tokenizer.no_padding()  # a tokenizer.json may pad (a cross-encoder's does, to max_seq): tokens are counted
        if "max_seq" in manifest:
            tokenizer.enable_truncation(int(manifest["max_seq"]))
        tokenizers[model] = tokenizer
    return tokenizers, manifests


def tokenizer_file(repository: Path, model: str, manifest: dict) -> Path | None:
    """The tokenizer.json ``model`` tokenizes with: the one its manifest names (a native model's own copy), else
    that of the Python tokenizer model its ensemble starts with (``tokenizer``, or ``NAME_tokenizer`` beside an
    embedder named NAME); None where the manifest says neither."""
    if rel := manifest.get("tokenizer"):
        check_inside(repository / model, rel)
        return repository / model / rel
    if steps := manifest.get("steps"):
        return repository / steps[0] / PYTHON_TOKENIZER_JSON
    return None


def encode_texts(texts: list[str], param: str) -> list[bytes]:
    """UTF-8 bytes of each text; an empty one is refused here, naming its index (the model checks the rest)."""
    out = []
    for i, text in enumerate(texts):
        if not text:
            raise errors.BadRequest(f"'{param}[{i}]' is an empty string", param)
        try:
            out.append(text.encode())
        except UnicodeEncodeError as e:
            raise errors.BadRequest(f"'{param}[{i}]' is not valid Unicode: {e.reason}", param) from e
    return out


def truncated_dimensions(vectors: np.ndarray, dimensions: int | None, info: ModelInfo) -> np.ndarray:
    """The first ``dimensions`` components, re-normalised, for a model trained for them (Matryoshka)."""
    if dimensions is None or dimensions == info.hidden:
        return vectors
    if dimensions not in info.matryoshka:
        if not info.matryoshka:
            why = "the model was not trained for truncated dimensions (Matryoshka)"
        else:
            why = f"the model was trained for {', '.join(map(str, info.matryoshka))}"
        raise errors.BadRequest(f"'dimensions' must be {info.hidden}: {why}", "dimensions")
    head = vectors[:, :dimensions]
    return np.ascontiguousarray(head / np.linalg.norm(head, axis=1, keepdims=True), dtype=np.float32)


def relevance(logits: np.ndarray) -> np.ndarray:
    """sigmoid(logit) in float64: a one-label cross-encoder's logit as a score in 0..1, the score TEI's /rerank gives
    by default and Cohere's relevance_score is."""
    return 1.0 / (1.0 + np.exp(-logits.astype(np.float64)))
