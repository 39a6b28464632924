"""The gateway's routes, as one table: method, path, handler, request and response schema, error style.

Each request: key check (``Authorization: Bearer``, the front door's keys), body read within the limit (413), body
validated against the route's schema in one call (400, or TEI's 422), the handler, the answer encoded by orjson
(floats and numpy arrays) or the error in the route's style (OpenAI's error object, TEI's); the duration is recorded
under the route.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
import pydantic
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from serving.gateway import cohere, errors, openai, schemas, tei
from serving.gateway.state import Gateway

JSON = "application/json"
OPTIONS = orjson.OPT_SERIALIZE_NUMPY


@dataclass(frozen=True)
class Spec:
    method: str
    path: str
    handler: Callable[[Gateway, Any], Awaitable[Any]]
    request: type[pydantic.BaseModel] | None  # None: no body
    response: Any  # the schema of a successful answer (documentation and tests); None: an empty 200
    style: str  # "openai" (the /v1 and /v2 routes) or "tei": the error body
    public: bool = False  # answered without a key


ROUTES = [
    Spec("POST", "/v1/embeddings", openai.embeddings, schemas.EmbeddingsRequest, schemas.EmbeddingsResponse, "openai"),
    Spec("GET", "/v1/models", openai.models, None, schemas.ModelList, "openai"),
    Spec("POST", "/v1/rerank", cohere.rerank, schemas.CohereRerankRequest, schemas.CohereRerankResponse, "openai"),
    Spec("POST", "/v2/rerank", cohere.rerank, schemas.CohereRerankRequest, schemas.CohereRerankResponse, "openai"),
    Spec("POST", "/embed", tei.embed, schemas.EmbedRequest, list[list[float]], "tei"),
    Spec("POST", "/rerank", tei.rerank, schemas.RerankRequest, list[schemas.Rank], "tei"),
    Spec(
        "POST",
        "/predict",
        tei.predict,
        schemas.PredictRequest,
        list[schemas.Prediction] | list[list[schemas.Prediction]],
        "tei",
    ),
    Spec("POST", "/tokenize", tei.tokenize, schemas.TokenizeRequest, list[list[schemas.SimpleToken]], "tei"),
    Spec("GET", "/info", tei.info, None, schemas.Info, "tei"),
    Spec("GET", "/health", tei.health, None, None, "tei", public=True),
]


def _authorize(gw: Gateway, request: Request) -> None:
    if gw.keys is None:
        return
    scheme, _, key = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or key not in gw.keys:
        raise errors.Unauthorized("Missing or invalid API key: send 'Authorization: Bearer <key>'")


# A body over the limit is still read (and dropped) up to this many times the limit before the 413 goes out: most
# clients read no answer while they are still sending.
DRAIN_FACTOR = 4


async def _body(request: Request, limit: int) -> bytes:
    """The body, or TooLarge past ``limit`` bytes."""
    body = bytearray()
    received = 0
    async for chunk in request.stream():
        received += len(chunk)
        if received <= limit:
            body += chunk
        elif received > DRAIN_FACTOR * limit:
            break
    if received > limit:
        raise errors.TooLarge(f"the request body is over {limit} bytes")
    return bytes(body)


def _invalid(e: pydantic.ValidationError) -> errors.BadRequest:
    first = e.errors(include_url=False)[0]
    where = ".".join(str(p) for p in first["loc"]) or "body"
    param = str(first["loc"][0]) if first["loc"] else None
    return errors.BadRequest(f"'{where}': {first['msg']}", param)


def _error(e: errors.GatewayError, style: str) -> Response:
    if style == "openai":
        return Response(orjson.dumps(e.openai()), e.status, e.headers, JSON)
    return Response(orjson.dumps(e.tei()), e.tei_status, e.headers, JSON)


def endpoint(spec: Spec) -> Callable[[Request], Awaitable[Response]]:
    async def answer(request: Request) -> Response:
        gw: Gateway = request.app.state.gateway
        start = time.perf_counter()
        try:
            if not spec.public:
                _authorize(gw, request)
            body = None
            if spec.request is not None:
                try:
                    body = spec.request.model_validate_json(await _body(request, gw.cfg.max_body_bytes))
                except pydantic.ValidationError as e:
                    raise _invalid(e) from e
            result = await spec.handler(gw, body)
            response = Response(orjson.dumps(result, option=OPTIONS) if result is not None else b"", 200, None, JSON)
        except errors.GatewayError as e:
            response = _error(e, spec.style)
        gw.metrics.observe(spec.path, response.status_code, time.perf_counter() - start)
        return response

    return answer


async def metrics(request: Request) -> Response:
    return Response(request.app.state.gateway.metrics.exposition(), media_type="text/plain; version=0.0.4")


def create(gw: Gateway) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await gw.triton.start()
        yield
        await gw.triton.close()

    routes = [Route(s.path, endpoint(s), methods=[s.method]) for s in ROUTES]
    app = Starlette(routes=[*routes, Route("/metrics", metrics, methods=["GET"])], lifespan=lifespan)
    app.state.gateway = gw
    return app
