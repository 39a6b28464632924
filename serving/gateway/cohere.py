"""Cohere's and Jina's rerank API: ``POST /v1/rerank`` (Cohere v1, Jina) and ``POST /v2/rerank`` (Cohere v2, the
same body), served by the repository's reranker (a cross-encoder).

The request is the subset Cohere's rerank (v1 and v2) and Jina's agree on:

- accepted: ``query``; ``documents``, each a string or an object with a string ``text`` (other keys of the object
  are not read); ``model`` (optional, as Jina has it: when given, the served reranker's name, else 404);
  ``top_n`` (at least 1; more than the documents returns them all); ``return_documents`` (default false, as
  Cohere's: Jina's default is true); ``max_tokens_per_doc`` (Cohere v2) at or above the reranker's max length,
  where it cuts nothing the model would not; ``rank_fields`` (Cohere v1) of ``["text"]`` alone;
- refused with 400 naming the field: ``max_tokens_per_doc`` below the max length (only the pair as a whole is
  cut), ``rank_fields`` other than ``["text"]``, ``max_chunks_per_doc`` (Cohere v1: nothing is chunked),
  ``return_embeddings: true`` (Jina: the reranker computes none), ``relevant_spans`` (Cohere v2: no spans are
  found). Other unknown fields (Cohere v2's ``priority``) are ignored, as on the other routes.

The answer: ``id``, ``model``, ``results`` (``index``, ``relevance_score`` and, with ``return_documents``,
``document: {"text"}``), highest score first, cut to ``top_n``; ``usage.total_tokens``, the tokens of every
(query, document) pair as the model saw them (counted by its tokenizer; absent without a repository).

``relevance_score`` is sigmoid(logit) in 0..1, the score TEI's ``/rerank`` gives by default (its ``raw_scores``
off) and what Cohere's scores are, so the two routes give equal scores for equal input. Pairs longer than the
reranker's max length are cut (``longest_first``, the model's default), as Cohere and Jina cut long documents rather
than refuse them: the scores equal ``/rerank``'s with ``truncate: true``.

Errors in the OpenAI error object the ``/v1`` routes use: a bad field 400 with ``param`` naming it (a document's
problem names its index), a ``model`` that is not the reranker 404, no reranker served or ready 503, the reranker
shedding load 429 with ``Retry-After`` (the gateway's one mapping of a shed request).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import numpy as np

from serving.gateway import errors
from serving.gateway.schemas import CohereRerankRequest
from serving.gateway.state import Gateway, encode_texts, relevance


async def rerank(gw: Gateway, req: CohereRerankRequest) -> dict:
    model = gw.reranker
    if model is None:
        served = ", ".join(m for _, m in gw.served)
        raise errors.NotReady(f"this server serves no reranker (its models: {served})")
    if req.model is not None and req.model != model:
        raise errors.ModelNotFound(
            f"The model '{req.model}' does not exist; this server's reranker is '{model}'", "model"
        )
    _refuse_unsupported(gw, model, req)
    texts = _document_texts(req.documents, gw.cfg.max_inputs)
    if not req.query:
        raise errors.BadRequest("'query' is an empty string", "query")
    (query,) = encode_texts([req.query], "query")
    documents = encode_texts(texts, "documents")
    logits, tokens = await asyncio.gather(
        gw.triton.rerank(query, documents, truncate=True, param="documents"),
        _pair_tokens(gw.tokenizers.get(model), req.query, texts),
    )
    scores = relevance(logits)
    order = np.argsort(-scores, kind="stable")[: req.top_n]
    results = [
        {
            "index": int(i),
            "relevance_score": float(scores[i]),
            **({"document": {"text": texts[i]}} if req.return_documents else {}),
        }
        for i in order
    ]
    usage = {"total_tokens": tokens} if tokens is not None else {}
    return {"id": str(uuid.uuid4()), "model": model, "results": results, "usage": usage}


def _refuse_unsupported(gw: Gateway, model: str, req: CohereRerankRequest) -> None:
    max_seq = gw.manifests.get(model, {}).get("max_seq")
    if req.max_tokens_per_doc is not None and (max_seq is None or req.max_tokens_per_doc < max_seq):
        limit = f"the reranker's max length of {max_seq} tokens" if max_seq else "the reranker's max length"
        raise errors.BadRequest(
            f"'max_tokens_per_doc' of {req.max_tokens_per_doc} is not supported: each (query, document) pair is cut "
            f"to {limit} as a whole; give at least that, or leave it out",
            "max_tokens_per_doc",
        )
    if req.rank_fields is not None and req.rank_fields != ["text"]:
        raise errors.BadRequest(
            f"'rank_fields' {req.rank_fields} is not supported: documents are ranked by their 'text'", "rank_fields"
        )
    if req.max_chunks_per_doc is not None:
        raise errors.BadRequest(
            "'max_chunks_per_doc' is not supported: a long document is cut to the max length, not chunked",
            "max_chunks_per_doc",
        )
    if req.relevant_spans is not None:
        raise errors.BadRequest("'relevant_spans' is not supported: the reranker scores whole pairs", "relevant_spans")
    if req.return_embeddings:
        raise errors.BadRequest(
            "'return_embeddings' is not supported: the reranker computes no embeddings", "return_embeddings"
        )


def _document_texts(documents: list[Any], max_inputs: int) -> list[str]:
    """Each document's text: a string, or an object's string ``text``."""
    if not documents:
        raise errors.BadRequest("'documents' must not be empty", "documents")
    if len(documents) > max_inputs:
        raise errors.BadRequest(
            f"'documents' has {len(documents)} elements; at most {max_inputs} are taken", "documents"
        )
    texts = []
    for i, document in enumerate(documents):
        text = document.get("text") if isinstance(document, dict) else document
        if not isinstance(text, str):
            raise errors.BadRequest(f"'documents[{i}]' must be a string or an object with a string 'text'", "documents")
        texts.append(text)
    return texts


async def _pair_tokens(tokenizer: Any, query: str, texts: list[str]) -> int | None:
    """Tokens of every (query, document) pair as the reranker encodes them (special tokens, cut to its max_seq),
    counted on a thread while the model runs; None without the reranker's tokenizer."""
    if tokenizer is None:
        return None
    pairs = [(query, t) for t in texts]
    return await asyncio.to_thread(lambda: sum(len(e.ids) for e in tokenizer.encode_batch(pairs)))
