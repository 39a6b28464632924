"""text-embeddings-inference's routes: ``POST /embed``, ``POST /rerank``, ``POST /predict``, ``POST /tokenize``,
``GET /info``, ``GET /health``."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from serving.gateway import errors
from serving.gateway.schemas import EmbedRequest, PredictRequest, RerankRequest, TokenizeRequest
from serving.gateway.state import Gateway, encode_texts, relevance, truncated_dimensions

VERSION = "bertserve"


def _inputs(gw: Gateway, req: EmbedRequest | TokenizeRequest) -> list[str]:
    """The request's texts as a list, checked as TEI checks them (no prompts, not empty, at most max_inputs)."""
    if req.prompt_name is not None:
        raise errors.BadRequest("prompt_name is not supported: the model has no prompts configured")
    inputs = [req.inputs] if isinstance(req.inputs, str) else req.inputs
    if not inputs:
        raise errors.BadRequest("`inputs` cannot be empty")
    if len(inputs) > gw.cfg.max_inputs:
        raise errors.TooLarge(f"batch size {len(inputs)} > maximum allowed batch size {gw.cfg.max_inputs}")
    return inputs


async def embed(gw: Gateway, req: EmbedRequest) -> np.ndarray:
    if not req.normalize:
        raise errors.BadRequest("normalize=false is not supported: the model returns L2-normalised embeddings")
    if req.truncation_direction.lower() != "right":
        raise errors.BadRequest("truncation_direction=Left is not supported: texts are truncated on the right")
    inputs = _inputs(gw, req)
    out = await gw.embed(encode_texts(inputs, "inputs"), truncate=bool(req.truncate))
    return truncated_dimensions(out.vectors, req.dimensions, await gw.triton.info())


async def rerank(gw: Gateway, req: RerankRequest) -> list[dict]:
    """The texts ranked by score, highest first; the score is sigmoid(logit) unless ``raw_scores``."""
    if req.truncation_direction.lower() != "right":
        raise errors.BadRequest("truncation_direction=Left is not supported: pairs are truncated on the right")
    if not req.texts:
        raise errors.BadRequest("`texts` cannot be empty")
    if len(req.texts) > gw.cfg.max_inputs:
        raise errors.TooLarge(f"batch size {len(req.texts)} > maximum allowed batch size {gw.cfg.max_inputs}")
    if not req.query:
        raise errors.BadRequest("'query' is an empty string", "query")
    (query,) = encode_texts([req.query], "query")
    scores = await gw.triton.rerank(query, encode_texts(req.texts, "texts"), truncate=bool(req.truncate))
    if not req.raw_scores:
        scores = relevance(scores)
    order = np.argsort(-scores, kind="stable")
    return [
        {"index": int(i), "score": float(scores[i]), **({"text": req.texts[i]} if req.return_text else {})}
        for i in order
    ]


def _rows(inputs: str | list[str] | list[list[str]]) -> tuple[list[tuple[str, str | None]], bool]:
    """(the rows as (text, text_pair or None), whether the request is a batch), as TEI reads ``inputs``: a string,
    a list of one string or a pair, or a list of such lists."""
    if isinstance(inputs, str):
        return [(inputs, None)], False
    if inputs and all(isinstance(x, str) for x in inputs):
        return [_row(inputs, "inputs")], False
    return [_row(row, f"inputs[{i}]") for i, row in enumerate(inputs)], True


def _row(row: list[str], where: str) -> tuple[str, str | None]:
    if len(row) not in (1, 2):
        raise errors.BadRequest(f"'{where}' holds {len(row)} strings: a text [text] or a pair [text, text_pair]")
    return row[0], row[1] if len(row) == 2 else None


async def predict(gw: Gateway, req: PredictRequest) -> list[dict] | list[list[dict]]:
    """Each row's labels with their scores, highest first: the softmax over the labels, or the logits with
    ``raw_scores``. A batch answers a list per row, in order; singles and pairs go to the model as two calls."""
    rows, batch = _rows(req.inputs)
    if not rows:
        raise errors.BadRequest("`inputs` cannot be empty")
    if len(rows) > gw.cfg.max_inputs:
        raise errors.TooLarge(f"batch size {len(rows)} > maximum allowed batch size {gw.cfg.max_inputs}")
    encoded = [encode_texts([a] if b is None else [a, b], f"inputs[{i}]" if batch else "inputs") for i, (a, b) in
               enumerate(rows)]  # fmt: skip
    groups = [[i for i, row in enumerate(encoded) if len(row) == n] for n in (1, 2)]
    truncate = bool(req.truncate)
    calls = [
        gw.triton.classify([encoded[i][0] for i in group], [encoded[i][1] for i in group] if n == 2 else None, truncate)
        for n, group in zip((1, 2), groups, strict=True)
        if group
    ]
    answers = iter(await asyncio.gather(*calls))
    out: list[list[dict]] = [[] for _ in rows]
    for group in groups:
        if not group:
            continue
        answer = next(answers)
        scores = answer.logits if req.raw_scores else answer.probabilities
        for row, i in enumerate(group):
            order = np.argsort(-scores[row], kind="stable")
            out[i] = [{"score": float(scores[row, k]), "label": answer.labels[k]} for k in order]
    return out if batch else out[0]


async def tokenize(gw: Gateway, req: TokenizeRequest) -> list[list[dict]]:
    """The texts' tokens by the primary model's tokenizer (the embedder's, whatever its name; a rerank-only
    repository's reranker's), as that model sees them: special tokens, truncation at its max_seq."""
    tokenizer = gw.tokenizers.get(gw.primary)
    if tokenizer is None:
        why = "the gateway was started without --repository" if gw.cfg.repository is None else "its repository has none"
        raise errors.NotReady(f"no tokenizer for {gw.primary}: {why}")
    inputs = _inputs(gw, req)
    return await asyncio.to_thread(_tokens, tokenizer, inputs, req.add_special_tokens)


def _tokens(tokenizer: Any, inputs: list[str], add_special_tokens: bool) -> list[list[dict]]:
    encodings = tokenizer.encode_batch(inputs, add_special_tokens=add_special_tokens)
    out = []
    for text, enc in zip(inputs, encodings, strict=True):
        tokens = []
        for token_id, token, special, (start, stop) in zip(
            enc.ids, enc.tokens, enc.special_tokens_mask, enc.offsets, strict=True
        ):
            if special:
                tokens.append({"id": token_id, "text": token, "special": True, "start": None, "stop": None})
            else:
                tokens.append(
                    {"id": token_id, "text": text[start:stop], "special": False, "start": start, "stop": stop}
                )
        out.append(tokens)
    return out


async def info(gw: Gateway, _req: None) -> dict:
    """TEI's ``/info`` of the primary model (the embedder, else the reranker, else the classifier), as a TEI server
    of that one model answers it, and ``models``: the same description of every model the routes call, each with
    its ``name`` (the model a request names) and ``task`` (embed, rerank, classify). TEI serves one model per server
    and has no field for several; its clients read the fields they know and pass over ``models``."""
    described = [await _described(gw, task, model) for task, model in gw.served]
    primary = {k: v for k, v in described[0].items() if k not in ("name", "task")}
    return {
        **primary,
        "max_concurrent_requests": 0,
        "max_client_batch_size": gw.cfg.max_inputs,
        "auto_truncate": False,
        "tokenization_workers": 0,
        "version": VERSION,
        "models": described,
    }


async def _described(gw: Gateway, task: str, model: str) -> dict:
    """One model in TEI's terms: its checkpoint, dtype, type (pooling, or the labels of a sequence classifier) and
    limits (max_seq; the rows of one forward, from its manifest or else its config)."""
    manifest = gw.manifests.get(model, {})
    max_seq = int(manifest.get("max_seq", 0))
    max_batch = int(manifest.get("max_batch") or (await gw.triton.info(model)).max_batch)
    return {
        "name": model,
        "task": task,
        "model_id": manifest.get("source", model),
        "model_sha": None,
        "model_dtype": manifest.get("precision", "float32"),
        "model_type": _model_type(task, manifest),
        "max_input_length": max_seq,
        "max_batch_tokens": max_seq * max_batch,
        "max_batch_requests": max_batch,
    }


def _model_type(task: str, manifest: dict) -> dict:
    """TEI's ``model_type``: ``embedding`` with its pooling, ``reranker`` (one label) or ``classifier`` with the
    labels both ways."""
    if task == "embed":
        return {"embedding": {"pooling": manifest.get("pooling", "mean")}}
    id2label = {str(k): v for k, v in manifest.get("labels", {}).items()}
    labels = {"id2label": id2label, "label2id": {v: int(k) for k, v in id2label.items()}}
    return {"reranker" if task == "rerank" else "classifier": labels}


async def health(gw: Gateway, _req: None) -> None:
    """200 when every model the routes call is ready (an embedder, a reranker or both)."""
    models = sorted(set(gw.fronted.values())) or [gw.cfg.model]
    down = [m for m in models if not await gw.triton.ready(m)]
    if down:
        raise errors.NotReady(f"{', '.join(down)} {'is' if len(down) == 1 else 'are'} not ready")
