"""Request and response bodies of every gateway route (OpenAI's embeddings API, text-embeddings-inference's).

Requests are validated from the raw body in one call (``model_validate_json``, pydantic-core's parser). Responses are
built as plain dicts of this shape and encoded by orjson (numpy arrays included) on the gateway's event loop: building
pydantic objects per vector would cost more than the model on a short text. Unknown request fields are ignored, as
OpenAI and TEI do.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

NonNegative = Annotated[int, Field(ge=0)]


class EmbeddingsRequest(BaseModel):
    """OpenAI ``POST /v1/embeddings``. Token ids are the served model's vocabulary ids, sent to the encoder as given."""

    input: str | list[str] | list[NonNegative] | list[list[NonNegative]]
    model: str
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Annotated[int, Field(gt=0)] | None = None
    user: str | None = None


class Embedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str  # base64: little-endian float32


class Usage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingsResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: Usage


class Model(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[Model]


class OpenAIErrorBody(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class OpenAIError(BaseModel):
    error: OpenAIErrorBody


class CohereRerankRequest(BaseModel):
    """Cohere's and Jina's ``POST /v1/rerank`` and Cohere's ``/v2/rerank`` (serving/gateway/cohere.py says which fields are taken and which
    refused). Documents are checked by the handler, which names the element: a string or ``{"text": string}``."""

    query: str
    documents: list[Any]
    model: str | None = None
    top_n: Annotated[int, Field(ge=1)] | None = None
    return_documents: bool = False
    max_tokens_per_doc: Annotated[int, Field(ge=1)] | None = None
    rank_fields: list[str] | None = None
    max_chunks_per_doc: int | None = None
    return_embeddings: bool = False
    relevant_spans: Any = None


class RerankDocument(BaseModel):
    text: str


class RerankResult(BaseModel):
    index: int
    relevance_score: float
    document: RerankDocument | None = None  # only with return_documents


class RerankUsage(BaseModel):
    total_tokens: int | None = None  # absent where the gateway has no repository to count with


class CohereRerankResponse(BaseModel):
    id: str
    model: str
    results: list[RerankResult]
    usage: RerankUsage


class EmbedRequest(BaseModel):
    """TEI ``POST /embed``."""

    inputs: str | list[str]
    normalize: bool = True
    truncate: bool | None = False
    truncation_direction: Literal["Right", "Left", "right", "left"] = "Right"
    prompt_name: str | None = None
    dimensions: Annotated[int, Field(gt=0)] | None = None


class TokenizeRequest(BaseModel):
    """TEI ``POST /tokenize``."""

    inputs: str | list[str]
    add_special_tokens: bool = True
    prompt_name: str | None = None


class RerankRequest(BaseModel):
    """TEI ``POST /rerank``: one query against its texts, served by the ``rerank`` model (a cross-encoder)."""

    query: str
    texts: list[str]
    truncate: bool | None = False
    truncation_direction: Literal["Right", "Left", "right", "left"] = "Right"
    raw_scores: bool = False  # the logit as it is; else sigmoid(logit), as TEI gives a one-label model's score
    return_text: bool = False


class PredictRequest(BaseModel):
    """TEI ``POST /predict``, served by the ``classify`` model: a text, a pair ``[text, text_pair]``, or a batch
    of both ``[[text], [text, text_pair], ...]``."""

    inputs: str | list[str] | list[list[str]]
    truncate: bool | None = False
    raw_scores: bool = False  # the logits as they are; else the softmax over the labels


class Prediction(BaseModel):
    score: float
    label: str


class Rank(BaseModel):
    index: int
    score: float
    text: str | None = None


class SimpleToken(BaseModel):
    id: int
    text: str
    special: bool
    start: int | None
    stop: int | None


class ServedModel(BaseModel):
    """One model of ``/info``'s ``models``: TEI's description of a model, with the name requests give and its task."""

    name: str
    task: Literal["embed", "rerank", "classify"]
    model_id: str
    model_sha: str | None
    model_dtype: str
    model_type: dict  # {"embedding": {"pooling"}} or {"reranker" | "classifier": {"id2label", "label2id"}}
    max_input_length: int
    max_batch_tokens: int
    max_batch_requests: int | None


class Info(BaseModel):
    """TEI ``GET /info``: TEI's fields describe the primary model (the embedder, else the reranker, else the
    classifier) as a TEI server of that model would; ``models`` (not TEI's) describes every model the routes call."""

    model_id: str
    model_sha: str | None
    model_dtype: str
    model_type: dict
    max_concurrent_requests: int
    max_input_length: int
    max_batch_tokens: int
    max_batch_requests: int | None
    max_client_batch_size: int
    auto_truncate: bool
    tokenization_workers: int
    version: str
    models: list[ServedModel]


class TEIError(BaseModel):
    error: str
    error_type: str
