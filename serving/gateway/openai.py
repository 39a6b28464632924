"""OpenAI's embeddings API: ``POST /v1/embeddings``, and ``GET /v1/models``: every model the routes call."""

from __future__ import annotations

import base64

import numpy as np

from serving.gateway import errors
from serving.gateway.schemas import EmbeddingsRequest
from serving.gateway.state import Gateway, encode_texts, truncated_dimensions


async def embeddings(gw: Gateway, req: EmbeddingsRequest) -> dict:
    if req.model not in gw.model_ids:
        tasks = dict((model, task) for task, model in gw.served)
        if req.model in tasks:
            raise errors.BadRequest(
                f"The model '{req.model}' is a {tasks[req.model]} model; /v1/embeddings takes {gw.model_ids}", "model"
            )
        served = f"this server serves {gw.model_ids}" if gw.model_ids else "this server serves no embedding model"
        raise errors.ModelNotFound(f"The model '{req.model}' does not exist; {served}", "model")
    inputs = [req.input] if isinstance(req.input, str) else req.input
    if not inputs:
        raise errors.BadRequest("'input' must not be empty", "input")
    if len(inputs) > gw.cfg.max_inputs:
        raise errors.BadRequest(f"'input' has {len(inputs)} elements; at most {gw.cfg.max_inputs} are taken", "input")
    if isinstance(inputs[0], int):
        inputs = [inputs]  # one array of token ids
    if isinstance(inputs[0], list):
        if empty := [i for i, seq in enumerate(inputs) if not seq]:
            raise errors.BadRequest(f"'input[{empty[0]}]' is an empty array of token ids", "input")
        out = await gw.triton.embed_ids(inputs)
    else:
        out = await gw.embed(encode_texts(inputs, "input"), truncate=False)
    vectors = truncated_dimensions(out.vectors, req.dimensions, await gw.triton.info())
    if req.encoding_format == "base64":
        data = [
            {"object": "embedding", "index": i, "embedding": base64.b64encode(v.astype("<f4", copy=False)).decode()}
            for i, v in enumerate(vectors)
        ]
    else:
        data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
    tokens = int(np.sum(out.tokens)) if out.tokens is not None else gw.count_tokens(inputs)
    return {
        "object": "list",
        "data": data,
        "model": req.model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


async def models(gw: Gateway, _req: None) -> dict:
    """Every model the routes call (the embedder, the reranker, the classifier), as vLLM lists its served models."""
    return {
        "object": "list",
        "data": [{"id": m, "object": "model", "created": gw.created, "owned_by": "bertserve"} for _, m in gw.served],
    }
